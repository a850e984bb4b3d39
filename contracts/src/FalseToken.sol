// SPDX-License-Identifier: MIT
pragma solidity ^0.8.28;

import {TestToken} from "./TestToken.sol";

/// @title FalseToken
/// @notice A TestToken whose `transferFrom` always returns false and moves nothing, even with allowance
///         and balance in place: it makes the processor's `TransferFailed` path reachable in tests.
contract FalseToken is TestToken {
    constructor(string memory name_, string memory symbol_, uint8 decimals_) TestToken(name_, symbol_, decimals_) {}

    function transferFrom(address, address, uint256) external pure override returns (bool) {
        return false;
    }
}
