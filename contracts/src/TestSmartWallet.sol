// SPDX-License-Identifier: MIT
pragma solidity ^0.8.28;

/// @notice Minimal ERC-1271 contract wallet for tests: a signature is valid when its owner signed the hash.
contract TestSmartWallet {
    bytes4 internal constant MAGIC_VALUE = 0x1626ba7e;

    address public immutable owner;

    constructor(address owner_) {
        owner = owner_;
    }

    /// @notice ERC-1271: returns the magic value when `signature` is the owner's 65-byte ECDSA signature of `hash`.
    function isValidSignature(bytes32 hash, bytes calldata signature) external view returns (bytes4) {
        if (signature.length != 65) return 0xffffffff;
        bytes32 r = bytes32(signature[0:32]);
        bytes32 s = bytes32(signature[32:64]);
        uint8 v = uint8(signature[64]);
        address signer = ecrecover(hash, v, r, s);
        return signer != address(0) && signer == owner ? MAGIC_VALUE : bytes4(0xffffffff);
    }
}

/// @notice CREATE2 factory of TestSmartWallet, so a wallet has an address before it is deployed (ERC-6492).
contract TestSmartWalletFactory {
    /// @notice Deploys the wallet of `owner` at the address fixed by `salt`.
    function deploy(address owner, bytes32 salt) external returns (address wallet) {
        wallet = address(new TestSmartWallet{salt: salt}(owner));
    }
}
