// SPDX-License-Identifier: MIT
pragma solidity ^0.8.28;

/// @title HostileToken
/// @notice A plan token whose reads misbehave, for the renewal reader's tests (installed with `anvil_setCode`, its
/// mode in storage slot 0): 0 answers like an ERC-20 (balance and allowance 1000 for everyone), 1 burns every unit of
/// gas it is given, 2 returns nothing, 3 reverts.
contract HostileToken {
    uint256 public mode;

    function balanceOf(address) external view returns (uint256) {
        return _answer();
    }

    function allowance(address, address) external view returns (uint256) {
        return _answer();
    }

    function _answer() internal view returns (uint256) {
        uint256 m = mode;
        if (m == 1) {
            assembly {
                for {} 1 {} {}
            }
        }
        if (m == 2) {
            assembly {
                return(0, 0)
            }
        }
        if (m == 3) revert("HostileToken: no");
        return 1000;
    }
}
