// SPDX-License-Identifier: MIT
pragma solidity ^0.8.28;

import {MintableERC20} from "./TestToken.sol";

/// @title NoMetaToken
/// @notice An ERC-20 without name(), symbol() or decimals(), for the indexer's null-currency case.
contract NoMetaToken is MintableERC20 {}
