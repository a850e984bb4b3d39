// SPDX-License-Identifier: MIT
pragma solidity ^0.8.28;

import {SubscriptionModule} from "./SubscriptionModule.sol";

/// @title SubscriptionProcessor
/// @notice One per chain: creates SubscriptionModules, hands out subscription ids, charges due
///         subscriptions (from prepaid credit or an ERC-20 allowance) and holds prepaid credit.
contract SubscriptionProcessor {
    enum FailureReason {
        None,
        InsufficientAllowance,
        InsufficientBalance,
        TransferFailed,
        AllowanceExpired
    }

    event ModuleCreated(address indexed merchant, address indexed module);
    event ChargeSucceeded(
        address indexed module,
        uint256 indexed subscriptionId,
        address indexed keeper,
        address token,
        uint256 amount,
        uint256 fee
    );
    event ChargeFailed(address indexed module, uint256 indexed subscriptionId, address indexed keeper, uint8 reason);
    event CreditRefilled(
        address indexed module, uint256 indexed subscriptionId, address indexed from, address token, uint256 amount
    );
    event CreditWithdrawn(
        address indexed module, uint256 indexed subscriptionId, address indexed to, address token, uint256 amount
    );
    event KeeperSet(address indexed keeper, bool allowed);
    event FeeSet(uint16 feeBps, address feeRecipient);

    error NotOwner();
    error NotKeeper();
    error NotDue(uint256 subscriptionId, uint64 nextChargeAt);
    error NotChargeable(uint256 subscriptionId);
    error NotSubscriber();
    error NotSelf();
    error InvalidState();
    error InvalidFee();
    error UnknownModule();
    error UnknownSubscription();
    error TokenTransferFailed();
    error Reentrancy();
    error InsufficientGas();

    uint16 public constant MAX_FEE_BPS = 1000;

    address public immutable owner;
    address public feeRecipient;
    uint16 public feeBps;
    /// @notice The last subscription id handed out (ids start at 1).
    uint256 public lastSubscriptionId;

    mapping(address => bool) private _keepers;
    mapping(address => bool) private _modules;
    mapping(address => mapping(uint256 => uint256)) private _credit;

    bool private transient _locked;

    constructor(uint16 feeBps_, address feeRecipient_) {
        owner = msg.sender;
        _setFee(feeBps_, feeRecipient_);
    }

    modifier onlyOwner() {
        if (msg.sender != owner) revert NotOwner();
        _;
    }

    modifier nonReentrant() {
        if (_locked) revert Reentrancy();
        _locked = true;
        _;
        _locked = false;
    }

    function createModule() external returns (address module) {
        module = address(new SubscriptionModule(msg.sender));
        _modules[module] = true;
        emit ModuleCreated(msg.sender, module);
    }

    /// @notice Hands out the next chain-wide subscription id; only modules created here may call it.
    function allocateSubscriptionId() external returns (uint256) {
        if (!_modules[msg.sender]) revert UnknownModule();
        return ++lastSubscriptionId;
    }

    function charge(address module, uint256 subscriptionId) external nonReentrant returns (bool success) {
        if (!_modules[module]) revert UnknownModule();
        SubscriptionModule.ChargeInfo memory info = SubscriptionModule(module).chargeInfo(subscriptionId);
        if (!_keepers[msg.sender] && msg.sender != info.owner) revert NotKeeper();
        if (!info.chargeable) revert NotChargeable(subscriptionId);
        if (block.timestamp < info.nextChargeAt) revert NotDue(subscriptionId, info.nextChargeAt);

        uint256 amount = info.amount;
        FailureReason reason = FailureReason.None;
        bool fromCredit = false;
        if (info.allowanceExpiry != 0 && block.timestamp > info.allowanceExpiry) {
            reason = FailureReason.AllowanceExpired;
        } else if (_credit[module][subscriptionId] >= amount) {
            fromCredit = true;
        } else {
            // A token whose allowance() or balanceOf() reverts is not an ERC-20: the revert bubbles up.
            IERC20Min token = IERC20Min(info.token);
            if (token.allowance(info.subscriber, address(this)) < amount) {
                reason = FailureReason.InsufficientAllowance;
            } else if (token.balanceOf(info.subscriber) < amount) {
                reason = FailureReason.InsufficientBalance;
            }
        }

        uint256 fee = amount * feeBps / 10_000;
        if (reason == FailureReason.None) {
            // The transfers and the module's bookkeeping run in one self-call so that any token failure
            // rolls all of them back without reverting the charge itself.
            uint256 gasBefore = gasleft();
            try this.settle(
                module, subscriptionId, info.token, fromCredit ? address(this) : info.subscriber, info.owner, amount, fee
            ) {}
            catch {
                // Running out of gas inside settle leaves at most 1/64 of the gas behind. Revert then, so that
                // an underfunded transaction (or gas estimation probing low limits) never records a TransferFailed.
                if (gasleft() <= gasBefore / 63) revert InsufficientGas();
                reason = FailureReason.TransferFailed;
            }
        }
        if (reason != FailureReason.None) {
            emit ChargeFailed(module, subscriptionId, msg.sender, uint8(reason));
            return false;
        }
        emit ChargeSucceeded(module, subscriptionId, msg.sender, info.token, amount, fee);
        return true;
    }

    /// @notice Moves one payment and records it on the module; callable only by this contract from `charge`.
    /// @param from the subscriber, or this contract when paying from prepaid credit
    function settle(
        address module,
        uint256 subscriptionId,
        address token,
        address from,
        address merchant,
        uint256 amount,
        uint256 fee
    ) external {
        if (msg.sender != address(this)) revert NotSelf();
        if (from == address(this)) {
            _credit[module][subscriptionId] -= amount;
            if (!_transfer(token, merchant, amount - fee)) revert TokenTransferFailed();
            if (fee != 0 && !_transfer(token, feeRecipient, fee)) revert TokenTransferFailed();
        } else {
            if (!_transferFrom(token, from, merchant, amount - fee)) revert TokenTransferFailed();
            if (fee != 0 && !_transferFrom(token, from, feeRecipient, fee)) revert TokenTransferFailed();
        }
        SubscriptionModule(module).recordPayment(subscriptionId, amount);
    }

    function refill(address module, uint256 subscriptionId, uint256 amount) external nonReentrant {
        SubscriptionModule.ChargeInfo memory info = _info(module, subscriptionId);
        if (info.cancelled || amount == 0) revert InvalidState();
        if (!_transferFrom(info.token, msg.sender, address(this), amount)) revert TokenTransferFailed();
        _credit[module][subscriptionId] += amount;
        emit CreditRefilled(module, subscriptionId, msg.sender, info.token, amount);
    }

    function withdrawCredit(address module, uint256 subscriptionId) external nonReentrant {
        SubscriptionModule.ChargeInfo memory info = _info(module, subscriptionId);
        if (msg.sender != info.subscriber) revert NotSubscriber();
        uint256 amount = _credit[module][subscriptionId];
        if (amount == 0) revert InvalidState();
        _credit[module][subscriptionId] = 0;
        if (!_transfer(info.token, info.subscriber, amount)) revert TokenTransferFailed();
        emit CreditWithdrawn(module, subscriptionId, info.subscriber, info.token, amount);
    }

    function setKeeper(address keeper, bool allowed) external onlyOwner {
        _keepers[keeper] = allowed;
        emit KeeperSet(keeper, allowed);
    }

    function setFee(uint16 feeBps_, address feeRecipient_) external onlyOwner {
        _setFee(feeBps_, feeRecipient_);
    }

    function creditOf(address module, uint256 subscriptionId) external view returns (uint256) {
        return _credit[module][subscriptionId];
    }

    function isKeeper(address account) external view returns (bool) {
        return _keepers[account];
    }

    function isModule(address module) external view returns (bool) {
        return _modules[module];
    }

    function _setFee(uint16 feeBps_, address feeRecipient_) private {
        if (feeBps_ > MAX_FEE_BPS || feeRecipient_ == address(0)) revert InvalidFee();
        feeBps = feeBps_;
        feeRecipient = feeRecipient_;
        emit FeeSet(feeBps_, feeRecipient_);
    }

    function _info(address module, uint256 subscriptionId)
        private
        view
        returns (SubscriptionModule.ChargeInfo memory info)
    {
        if (!_modules[module]) revert UnknownModule();
        info = SubscriptionModule(module).chargeInfo(subscriptionId);
        if (info.subscriber == address(0)) revert UnknownSubscription();
    }

    function _transfer(address token, address to, uint256 amount) private returns (bool) {
        return _call(token, abi.encodeCall(IERC20Min.transfer, (to, amount)));
    }

    function _transferFrom(address token, address from, address to, uint256 amount) private returns (bool) {
        return _call(token, abi.encodeCall(IERC20Min.transferFrom, (from, to, amount)));
    }

    /// @dev Success means: no revert, and either no return data from a contract or a return value of true.
    function _call(address token, bytes memory data) private returns (bool) {
        (bool success, bytes memory ret) = token.call(data);
        if (!success) return false;
        if (ret.length == 0) return token.code.length > 0;
        return ret.length >= 32 && abi.decode(ret, (uint256)) == 1;
    }
}

interface IERC20Min {
    function allowance(address owner, address spender) external view returns (uint256);
    function balanceOf(address account) external view returns (uint256);
    function transfer(address to, uint256 amount) external returns (bool);
    function transferFrom(address from, address to, uint256 amount) external returns (bool);
}
