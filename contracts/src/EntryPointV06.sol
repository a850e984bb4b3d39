// SPDX-License-Identifier: MIT
pragma solidity ^0.8.28;

// ERC-4337's EntryPoint v0.6, from the npm package @account-abstraction/contracts@0.6.0, for tests of user operations
// (Base Pay charges a subscription in one user operation). Built here so its artifact sits beside the others.
import {EntryPoint} from "@account-abstraction/contracts/core/EntryPoint.sol";
