// SPDX-License-Identifier: MIT
pragma solidity ^0.8.28;

import {UserOperation} from "@account-abstraction/contracts/interfaces/UserOperation.sol";

/// @notice A minimal multi-owner smart account for the spend-permission tests: owners (addresses, among them a spend
/// permission manager) call `execute`/`executeBatch`; ERC-1271 over the raw hash; ERC-4337 v0.6 user operations through
/// the EntryPoint given to the constructor, signed by an owner over the EIP-191 form of the user operation hash.
contract TestSmartAccount {
    /// @notice One call of a batch.
    struct Call {
        address target;
        uint256 value;
        bytes data;
    }

    bytes4 internal constant ERC1271_MAGIC = 0x1626ba7e;
    uint256 internal constant SIG_VALIDATION_FAILED = 1;

    /// @notice The EntryPoint (v0.6) allowed to validate and run user operations.
    address public immutable entryPoint;

    mapping(address => bool) private _owners;

    event OwnerAdded(address indexed owner);
    event OwnerRemoved(address indexed owner);

    error Unauthorized();
    error CallFailed(uint256 index, bytes reason);

    constructor(address entryPoint_, address[] memory owners) {
        entryPoint = entryPoint_;
        for (uint256 i = 0; i < owners.length; i++) {
            _owners[owners[i]] = true;
            emit OwnerAdded(owners[i]);
        }
    }

    receive() external payable {}

    modifier onlyOwnerOrEntryPoint() {
        if (!_owners[msg.sender] && msg.sender != entryPoint && msg.sender != address(this)) revert Unauthorized();
        _;
    }

    /// @notice Whether `account` may call the account (Coinbase Smart Wallet's selector `0xa2e1a8d8`).
    function isOwnerAddress(address account) external view returns (bool) {
        return _owners[account];
    }

    /// @notice Adds an owner (an owner, the account itself or the EntryPoint may).
    function addOwnerAddress(address owner) external onlyOwnerOrEntryPoint {
        _owners[owner] = true;
        emit OwnerAdded(owner);
    }

    /// @notice Removes an owner: removing a spend permission manager makes its spends revert.
    function removeOwnerAddress(address owner) external onlyOwnerOrEntryPoint {
        _owners[owner] = false;
        emit OwnerRemoved(owner);
    }

    /// @notice Calls `target` with `value` and `data`, bubbling up a revert.
    function execute(address target, uint256 value, bytes calldata data) external payable onlyOwnerOrEntryPoint {
        _call(0, target, value, data);
    }

    /// @notice Calls each of `calls` in order; the first revert reverts all.
    function executeBatch(Call[] calldata calls) external payable onlyOwnerOrEntryPoint {
        for (uint256 i = 0; i < calls.length; i++) _call(i, calls[i].target, calls[i].value, calls[i].data);
    }

    /// @notice ERC-1271: valid when an owner signed `hash` itself (65-byte ECDSA).
    function isValidSignature(bytes32 hash, bytes calldata signature) external view returns (bytes4) {
        return _owners[_recover(hash, signature)] ? ERC1271_MAGIC : bytes4(0xffffffff);
    }

    /// @notice ERC-4337 v0.6: checks an owner's signature of the user operation and pays the EntryPoint what it lacks.
    function validateUserOp(UserOperation calldata userOp, bytes32 userOpHash, uint256 missingAccountFunds)
        external
        returns (uint256 validationData)
    {
        if (msg.sender != entryPoint) revert Unauthorized();
        bytes32 digest = keccak256(abi.encodePacked("\x19Ethereum Signed Message:\n32", userOpHash));
        validationData = _owners[_recover(digest, userOp.signature)] ? 0 : SIG_VALIDATION_FAILED;
        if (missingAccountFunds > 0) {
            (bool ok,) = payable(msg.sender).call{value: missingAccountFunds}("");
            ok; // the EntryPoint checks its deposit itself
        }
    }

    function _call(uint256 index, address target, uint256 value, bytes calldata data) private {
        (bool ok, bytes memory ret) = target.call{value: value}(data);
        if (!ok) {
            if (ret.length == 0) revert CallFailed(index, ret);
            assembly {
                revert(add(ret, 32), mload(ret))
            }
        }
    }

    function _recover(bytes32 hash, bytes calldata signature) private pure returns (address) {
        if (signature.length != 65) return address(0);
        bytes32 r = bytes32(signature[0:32]);
        bytes32 s = bytes32(signature[32:64]);
        uint8 v = uint8(signature[64]);
        return ecrecover(hash, v, r, s);
    }
}
