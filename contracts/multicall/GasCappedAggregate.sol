// SPDX-License-Identifier: MIT
pragma solidity ^0.8.28;

/// @title GasCappedAggregate
/// @notice Multicall3's `aggregate3` (same selector, arguments and results) for the renewal reads, with two limits a
///         hostile token cannot get around: each call gets at most `CALL_GAS`, and at most one word of its answer is
///         copied (a huge answer cannot make the caller pay for memory). Never deployed: the reader places its
///         runtime code at an unused address through `eth_call`'s state override, where the node allows one.
contract GasCappedAggregate {
    /// @dev Equal to CALL_GAS in src/renewals/reader.ts (a test holds them equal).
    uint256 public constant CALL_GAS = 100_000;

    struct Call3 {
        address target;
        bool allowFailure;
        bytes callData;
    }

    struct Result {
        bool success;
        bytes returnData;
    }

    function aggregate3(Call3[] calldata calls) external returns (Result[] memory returnData) {
        uint256 length = calls.length;
        returnData = new Result[](length);
        for (uint256 i = 0; i < length; ++i) {
            address target = calls[i].target;
            bytes memory data = calls[i].callData;
            bytes memory ret = new bytes(32);
            bool success;
            assembly {
                success := call(CALL_GAS, target, 0, add(data, 32), mload(data), add(ret, 32), 32)
                if lt(returndatasize(), 32) { mstore(ret, returndatasize()) }
            }
            returnData[i] = Result(success, ret);
        }
    }
}
