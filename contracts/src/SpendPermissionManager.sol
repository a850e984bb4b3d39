// SPDX-License-Identifier: MIT
pragma solidity ^0.8.28;

/// @notice The account side of a spend: a smart account the manager is an owner of.
interface ISpendAccount {
    function execute(address target, uint256 value, bytes calldata data) external payable;
}

/// @notice ERC-1271 signature check of a contract account.
interface IERC1271Signer {
    function isValidSignature(bytes32 hash, bytes calldata signature) external view returns (bytes4);
}

/// @notice The project's own manager of recurring spend permissions, written from the published interface of Base's
/// `SpendPermissionManager`: the same struct, events, errors, EIP-712 hash, selectors and period rules, so the
/// indexer, the keeper and their tests run against it as against the deployed one. Batch approvals and spends with a
/// MagicSpend withdrawal are left out.
contract SpendPermissionManager {
    /// @notice A recurring allowance of `token` that `account` grants to `spender`, per `period` seconds from `start`
    /// until `end` (exclusive).
    struct SpendPermission {
        address account;
        address spender;
        address token;
        uint160 allowance;
        uint48 period;
        uint48 start;
        uint48 end;
        uint256 salt;
        bytes extraData;
    }

    /// @notice What was spent in one period `[start, end)`.
    struct PeriodSpend {
        uint48 start;
        uint48 end;
        uint160 spend;
    }

    /// @notice ERC-7528's address for the chain's native currency.
    address public constant NATIVE_TOKEN = 0xEeeeeEeeeEeEeeEeEeEeeEEEeeeeEeeeeeeeEEeE;

    /// @notice The EIP-712 type hash of `SpendPermission`.
    bytes32 public constant SPEND_PERMISSION_TYPEHASH = keccak256(
        "SpendPermission(address account,address spender,address token,uint160 allowance,uint48 period,uint48 start,uint48 end,uint256 salt,bytes extraData)"
    );

    bytes32 private constant DOMAIN_TYPEHASH =
        keccak256("EIP712Domain(string name,string version,uint256 chainId,address verifyingContract)");
    bytes32 private constant NAME_HASH = keccak256("Spend Permission Manager");
    bytes32 private constant VERSION_HASH = keccak256("1");
    bytes4 private constant ERC1271_MAGIC = 0x1626ba7e;
    bytes4 private constant ERC721_INTERFACE_ID = 0x80ac58cd;

    /// @notice Kept for interface parity with the deployed manager; this one verifies ERC-1271 signatures only.
    address public immutable PUBLIC_ERC6492_VALIDATOR;
    /// @notice Kept for interface parity with the deployed manager; unused here.
    address public immutable MAGIC_SPEND;

    mapping(bytes32 => bool) private _approved;
    mapping(bytes32 => bool) private _revoked;
    mapping(bytes32 => PeriodSpend) private _lastUpdatedPeriod;

    event SpendPermissionApproved(bytes32 indexed hash, SpendPermission spendPermission);
    event SpendPermissionRevoked(bytes32 indexed hash, SpendPermission spendPermission);
    event SpendPermissionUsed(
        bytes32 indexed hash, address indexed account, address indexed spender, address token, PeriodSpend periodSpend
    );

    error InvalidSender(address sender, address expected);
    error InvalidSignature();
    error MismatchedAccounts(address firstAccount, address secondAccount);
    error InvalidLastUpdatedPeriod(PeriodSpend actualLastUpdatedPeriod, PeriodSpend expectedLastUpdatedPeriod);
    error ZeroToken();
    error ERC721TokenNotSupported(address token);
    error ZeroSpender();
    error ZeroPeriod();
    error ZeroAllowance();
    error InvalidStartEnd(uint48 start, uint48 end);
    error ZeroValue();
    error SpendValueOverflow(uint256 value);
    error UnauthorizedSpendPermission();
    error BeforeSpendPermissionStart(uint48 currentTimestamp, uint48 start);
    error AfterSpendPermissionEnd(uint48 currentTimestamp, uint48 end);
    error ExceededSpendPermission(uint256 value, uint256 allowance);
    error SafeERC20FailedOperation(address token);
    error UnexpectedReceiveAmount(uint256 received, uint256 expected);

    constructor(address publicERC6492Validator, address magicSpend) {
        PUBLIC_ERC6492_VALIDATOR = publicERC6492Validator;
        MAGIC_SPEND = magicSpend;
    }

    /// @notice Native currency arrives here from the account during a native spend, then goes on to the spender.
    receive() external payable {}

    /// @notice Approves `spendPermission` as its account. False (and nothing emitted) when it was revoked.
    function approve(SpendPermission calldata spendPermission) external returns (bool) {
        _requireSender(spendPermission.account);
        return _approve(spendPermission);
    }

    /// @notice Approves `spendPermission` with the account's ERC-1271 signature of its hash; anyone may submit it.
    function approveWithSignature(SpendPermission calldata spendPermission, bytes calldata signature)
        external
        returns (bool)
    {
        bytes32 hash = getHash(spendPermission);
        if (spendPermission.account.code.length == 0) revert InvalidSignature();
        try IERC1271Signer(spendPermission.account).isValidSignature(hash, signature) returns (bytes4 magic) {
            if (magic != ERC1271_MAGIC) revert InvalidSignature();
        } catch {
            revert InvalidSignature();
        }
        return _approve(spendPermission);
    }

    /// @notice Revokes `permissionToRevoke` and approves `permissionToApprove` in one call (a plan change), provided
    /// the revoked one's last updated period is still `expectedLastUpdatedPeriod`.
    function approveWithRevoke(
        SpendPermission calldata permissionToApprove,
        SpendPermission calldata permissionToRevoke,
        PeriodSpend calldata expectedLastUpdatedPeriod
    ) external returns (bool) {
        _requireSender(permissionToApprove.account);
        if (permissionToApprove.account != permissionToRevoke.account) {
            revert MismatchedAccounts(permissionToApprove.account, permissionToRevoke.account);
        }
        PeriodSpend memory last = _lastUpdatedPeriod[getHash(permissionToRevoke)];
        if (
            last.start != expectedLastUpdatedPeriod.start || last.end != expectedLastUpdatedPeriod.end
                || last.spend != expectedLastUpdatedPeriod.spend
        ) revert InvalidLastUpdatedPeriod(last, expectedLastUpdatedPeriod);
        _revoke(permissionToRevoke);
        return _approve(permissionToApprove);
    }

    /// @notice Revokes `spendPermission` as its account; for good.
    function revoke(SpendPermission calldata spendPermission) external {
        _requireSender(spendPermission.account);
        _revoke(spendPermission);
    }

    /// @notice Revokes `spendPermission` as its spender; for good.
    function revokeAsSpender(SpendPermission calldata spendPermission) external {
        _requireSender(spendPermission.spender);
        _revoke(spendPermission);
    }

    /// @notice Moves `value` of the permission's token from its account to its spender, within the current period's
    /// remaining allowance. Only the spender may call it.
    function spend(SpendPermission calldata spendPermission, uint160 value) external {
        _requireSender(spendPermission.spender);
        _use(spendPermission, value);
        if (spendPermission.token == NATIVE_TOKEN) _pullNative(spendPermission, value);
        else _pullToken(spendPermission, value);
    }

    /// @notice The EIP-712 hash of `spendPermission` under this manager's domain.
    function getHash(SpendPermission memory spendPermission) public view returns (bytes32) {
        bytes32 structHash = keccak256(
            abi.encode(
                SPEND_PERMISSION_TYPEHASH,
                spendPermission.account,
                spendPermission.spender,
                spendPermission.token,
                spendPermission.allowance,
                spendPermission.period,
                spendPermission.start,
                spendPermission.end,
                spendPermission.salt,
                keccak256(spendPermission.extraData)
            )
        );
        return keccak256(abi.encodePacked("\x19\x01", _domainSeparator(), structHash));
    }

    /// @notice Approved at some point (revoked or not).
    function isApproved(SpendPermission memory spendPermission) public view returns (bool) {
        return _approved[getHash(spendPermission)];
    }

    /// @notice Revoked at some point.
    function isRevoked(SpendPermission memory spendPermission) public view returns (bool) {
        return _revoked[getHash(spendPermission)];
    }

    /// @notice Approved and not revoked.
    function isValid(SpendPermission memory spendPermission) public view returns (bool) {
        bytes32 hash = getHash(spendPermission);
        return _approved[hash] && !_revoked[hash];
    }

    /// @notice The period of the latest spend, with the total spent in it.
    function getLastUpdatedPeriod(SpendPermission memory spendPermission) external view returns (PeriodSpend memory) {
        return _lastUpdatedPeriod[getHash(spendPermission)];
    }

    /// @notice The period containing now, with what was spent in it; reverts before `start` and from `end` on.
    function getCurrentPeriod(SpendPermission memory spendPermission) public view returns (PeriodSpend memory) {
        uint48 now_ = uint48(block.timestamp);
        if (now_ < spendPermission.start) revert BeforeSpendPermissionStart(now_, spendPermission.start);
        if (now_ >= spendPermission.end) revert AfterSpendPermissionEnd(now_, spendPermission.end);
        PeriodSpend memory last = _lastUpdatedPeriod[getHash(spendPermission)];
        if (last.start <= now_ && now_ < last.end) return last;
        // Periods are anchored at `start`; the last one is cut at `end`.
        uint256 periodStart = now_ - (now_ - spendPermission.start) % spendPermission.period;
        uint256 periodEnd = periodStart + spendPermission.period;
        if (periodEnd > spendPermission.end) periodEnd = spendPermission.end;
        return PeriodSpend({start: uint48(periodStart), end: uint48(periodEnd), spend: 0});
    }

    /// @notice ERC-5267: the EIP-712 domain.
    function eip712Domain()
        external
        view
        returns (
            bytes1 fields,
            string memory name,
            string memory version,
            uint256 chainId,
            address verifyingContract,
            bytes32 salt,
            uint256[] memory extensions
        )
    {
        return (hex"0f", "Spend Permission Manager", "1", block.chainid, address(this), bytes32(0), new uint256[](0));
    }

    function _domainSeparator() private view returns (bytes32) {
        return keccak256(abi.encode(DOMAIN_TYPEHASH, NAME_HASH, VERSION_HASH, block.chainid, address(this)));
    }

    function _requireSender(address expected) private view {
        if (msg.sender != expected) revert InvalidSender(msg.sender, expected);
    }

    function _approve(SpendPermission calldata p) private returns (bool) {
        if (p.token == address(0)) revert ZeroToken();
        if (_isErc721(p.token)) revert ERC721TokenNotSupported(p.token);
        if (p.spender == address(0)) revert ZeroSpender();
        if (p.period == 0) revert ZeroPeriod();
        if (p.allowance == 0) revert ZeroAllowance();
        if (p.start >= p.end) revert InvalidStartEnd(p.start, p.end);
        bytes32 hash = getHash(p);
        // A revoked permission stays dead; approving an approved one again changes nothing.
        if (_revoked[hash]) return false;
        if (_approved[hash]) return true;
        _approved[hash] = true;
        emit SpendPermissionApproved(hash, p);
        return true;
    }

    function _revoke(SpendPermission calldata p) private {
        bytes32 hash = getHash(p);
        if (_revoked[hash]) return;
        _revoked[hash] = true;
        emit SpendPermissionRevoked(hash, p);
    }

    function _use(SpendPermission calldata p, uint160 value) private {
        if (value == 0) revert ZeroValue();
        bytes32 hash = getHash(p);
        if (!_approved[hash] || _revoked[hash]) revert UnauthorizedSpendPermission();
        PeriodSpend memory current = getCurrentPeriod(p);
        uint256 total = uint256(current.spend) + value;
        if (total > p.allowance) revert ExceededSpendPermission(total, p.allowance);
        _lastUpdatedPeriod[hash] = PeriodSpend({start: current.start, end: current.end, spend: uint160(total)});
        // The event carries this spend's increment; getLastUpdatedPeriod holds the period's total.
        emit SpendPermissionUsed(
            hash, p.account, p.spender, p.token, PeriodSpend({start: current.start, end: current.end, spend: value})
        );
    }

    function _pullToken(SpendPermission calldata p, uint160 value) private {
        ISpendAccount(p.account).execute(p.token, 0, abi.encodeWithSelector(0x095ea7b3, address(this), uint256(value)));
        (bool ok, bytes memory ret) =
            p.token.call(abi.encodeWithSelector(0x23b872dd, p.account, p.spender, uint256(value)));
        if (!ok || (ret.length != 0 && (ret.length < 32 || !abi.decode(ret, (bool))))) {
            revert SafeERC20FailedOperation(p.token);
        }
        if (ret.length == 0 && p.token.code.length == 0) revert SafeERC20FailedOperation(p.token);
    }

    function _pullNative(SpendPermission calldata p, uint160 value) private {
        uint256 before = address(this).balance;
        ISpendAccount(p.account).execute(address(this), value, "");
        uint256 received = address(this).balance - before;
        if (received != value) revert UnexpectedReceiveAmount(received, value);
        (bool ok,) = p.spender.call{value: value}("");
        if (!ok) revert SafeERC20FailedOperation(NATIVE_TOKEN);
    }

    /// @dev ERC-165 probe by a low-level call: a token without code, or one that does not answer, is not an ERC-721.
    function _isErc721(address token) private view returns (bool) {
        if (token.code.length == 0) return false;
        (bool ok, bytes memory ret) =
            token.staticcall{gas: 30_000}(abi.encodeWithSelector(0x01ffc9a7, ERC721_INTERFACE_ID));
        return ok && ret.length >= 32 && abi.decode(ret, (bool));
    }
}
