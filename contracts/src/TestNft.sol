// SPDX-License-Identifier: MIT
pragma solidity ^0.8.28;

/// @notice Answers ERC-165 as an ERC-721 does, and nothing else: a token a spend permission must refuse.
contract TestNft {
    function supportsInterface(bytes4 interfaceId) external pure returns (bool) {
        return interfaceId == 0x80ac58cd || interfaceId == 0x01ffc9a7;
    }
}
