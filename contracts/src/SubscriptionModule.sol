// SPDX-License-Identifier: MIT
pragma solidity ^0.8.28;

/// @notice The part of SubscriptionProcessor a module calls back into.
interface ISubscriptionIdSource {
    function allocateSubscriptionId() external returns (uint256);
}

/// @title SubscriptionModule
/// @notice One merchant product line: plans, subscriptions and the subscriber block list.
///         Created by SubscriptionProcessor, which alone may record payments.
contract SubscriptionModule {
    struct Plan {
        address token;
        uint256 amount;
        uint32 interval;
        uint32 gracePeriod;
        bool exists;
    }

    struct Subscription {
        address subscriber;
        uint32 planId;
        uint32 maxExecutions; // 0 = unlimited
        uint32 timesExecuted;
        uint64 createdAt;
        uint64 lastPaidAt;
        uint64 nextChargeAt;
        uint64 allowanceExpiry; // 0 = never expires
        uint256 totalSpent;
        bool paused;
        bool cancelled;
    }

    /// @notice Everything the processor needs for one charge, read in a single call.
    struct ChargeInfo {
        address owner;
        address subscriber;
        address token;
        uint256 amount;
        uint64 nextChargeAt;
        uint64 allowanceExpiry;
        bool chargeable;
        bool cancelled;
    }

    event PlanCreated(uint32 indexed planId, address indexed token, uint256 amount, uint32 interval, uint32 gracePeriod);
    event SubscriptionCreated(
        uint256 indexed subscriptionId,
        address indexed subscriber,
        uint32 indexed planId,
        uint32 maxExecutions,
        uint64 allowanceExpiry
    );
    event SubscriptionPaused(uint256 indexed subscriptionId, address indexed by);
    event SubscriptionResumed(uint256 indexed subscriptionId, address indexed by);
    event SubscriptionCancelled(uint256 indexed subscriptionId, address indexed by);
    event AllowanceExpiryUpdated(uint256 indexed subscriptionId, uint64 allowanceExpiry);
    event SubscriberBlocked(address indexed subscriber);
    event SubscriberUnblocked(address indexed subscriber);

    error NotOwner();
    error NotProcessor();
    error NotSubscriber();
    error NotSubscriberOrOwner();
    error UnknownSubscription();
    error UnknownPlan();
    error PlanExists();
    error InvalidPlan();
    error AlreadySubscribed();
    error Blocked();
    error InvalidState();

    address public immutable owner;
    address public immutable processor;

    mapping(uint32 => Plan) private _plans;
    mapping(uint256 => Subscription) private _subscriptions;
    mapping(address => mapping(uint32 => uint256)) private _subscriptionOf;
    mapping(address => bool) private _blocked;

    constructor(address owner_) {
        owner = owner_;
        processor = msg.sender;
    }

    modifier onlyOwner() {
        if (msg.sender != owner) revert NotOwner();
        _;
    }

    function createPlan(uint32 planId, address token, uint256 amount, uint32 interval, uint32 gracePeriod)
        external
        onlyOwner
    {
        if (_plans[planId].exists) revert PlanExists();
        if (token == address(0) || amount == 0 || interval == 0) revert InvalidPlan();
        _plans[planId] = Plan(token, amount, interval, gracePeriod, true);
        emit PlanCreated(planId, token, amount, interval, gracePeriod);
    }

    function subscribe(uint32 planId, uint32 maxExecutions, uint64 allowanceExpiry)
        external
        returns (uint256 subscriptionId)
    {
        if (!_plans[planId].exists) revert UnknownPlan();
        if (_blocked[msg.sender]) revert Blocked();
        if (_subscriptionOf[msg.sender][planId] != 0) revert AlreadySubscribed();
        subscriptionId = ISubscriptionIdSource(processor).allocateSubscriptionId();
        uint64 nowTs = uint64(block.timestamp);
        _subscriptions[subscriptionId] = Subscription({
            subscriber: msg.sender,
            planId: planId,
            maxExecutions: maxExecutions,
            timesExecuted: 0,
            createdAt: nowTs,
            lastPaidAt: 0,
            nextChargeAt: nowTs,
            allowanceExpiry: allowanceExpiry,
            totalSpent: 0,
            paused: false,
            cancelled: false
        });
        _subscriptionOf[msg.sender][planId] = subscriptionId;
        emit SubscriptionCreated(subscriptionId, msg.sender, planId, maxExecutions, allowanceExpiry);
    }

    function pause(uint256 subscriptionId) external {
        Subscription storage s = _subscriberOrOwner(subscriptionId);
        if (s.cancelled || s.paused) revert InvalidState();
        s.paused = true;
        emit SubscriptionPaused(subscriptionId, msg.sender);
    }

    function resume(uint256 subscriptionId) external {
        Subscription storage s = _subscriberOrOwner(subscriptionId);
        if (s.cancelled || !s.paused) revert InvalidState();
        s.paused = false;
        emit SubscriptionResumed(subscriptionId, msg.sender);
    }

    function cancel(uint256 subscriptionId) external {
        Subscription storage s = _subscriberOnly(subscriptionId);
        if (s.cancelled) revert InvalidState();
        s.cancelled = true;
        delete _subscriptionOf[s.subscriber][s.planId];
        emit SubscriptionCancelled(subscriptionId, msg.sender);
    }

    function setAllowanceExpiry(uint256 subscriptionId, uint64 allowanceExpiry) external {
        Subscription storage s = _subscriberOnly(subscriptionId);
        if (s.cancelled || s.allowanceExpiry == allowanceExpiry) revert InvalidState();
        s.allowanceExpiry = allowanceExpiry;
        emit AllowanceExpiryUpdated(subscriptionId, allowanceExpiry);
    }

    function blockSubscriber(address subscriber) external onlyOwner {
        if (_blocked[subscriber]) revert InvalidState();
        _blocked[subscriber] = true;
        emit SubscriberBlocked(subscriber);
    }

    function unblockSubscriber(address subscriber) external onlyOwner {
        if (!_blocked[subscriber]) revert InvalidState();
        _blocked[subscriber] = false;
        emit SubscriberUnblocked(subscriber);
    }

    /// @notice Records a successful charge; only the processor that created this module may call it.
    function recordPayment(uint256 subscriptionId, uint256 amount) external {
        if (msg.sender != processor) revert NotProcessor();
        Subscription storage s = _subscriptions[subscriptionId];
        uint64 nowTs = uint64(block.timestamp);
        s.timesExecuted += 1;
        s.lastPaidAt = nowTs;
        s.nextChargeAt = nowTs + _plans[s.planId].interval;
        s.totalSpent += amount;
    }

    function isActive(address wallet, uint32 planId) public view returns (bool) {
        uint256 id = _subscriptionOf[wallet][planId];
        if (id == 0 || _blocked[wallet]) return false;
        Subscription storage s = _subscriptions[id];
        if (s.paused || s.cancelled || s.timesExecuted == 0) return false;
        Plan storage p = _plans[planId];
        return block.timestamp <= uint256(s.lastPaidAt) + p.interval + p.gracePeriod;
    }

    function isActiveAny(address wallet, uint32[] calldata planIds) external view returns (bool) {
        for (uint256 i = 0; i < planIds.length; ++i) {
            if (isActive(wallet, planIds[i])) return true;
        }
        return false;
    }

    function getPlan(uint32 planId) external view returns (Plan memory) {
        return _plans[planId];
    }

    function getSubscription(uint256 subscriptionId) external view returns (Subscription memory) {
        return _subscriptions[subscriptionId];
    }

    function subscriptionOf(address wallet, uint32 planId) external view returns (uint256) {
        return _subscriptionOf[wallet][planId];
    }

    function isBlocked(address wallet) external view returns (bool) {
        return _blocked[wallet];
    }

    /// @notice Charge inputs for the processor; `chargeable` is false for an unknown id too.
    function chargeInfo(uint256 subscriptionId) external view returns (ChargeInfo memory info) {
        Subscription storage s = _subscriptions[subscriptionId];
        Plan storage p = _plans[s.planId];
        address subscriber = s.subscriber;
        info.owner = owner;
        info.subscriber = subscriber;
        info.token = p.token;
        info.amount = p.amount;
        info.nextChargeAt = s.nextChargeAt;
        info.allowanceExpiry = s.allowanceExpiry;
        info.cancelled = s.cancelled;
        info.chargeable = subscriber != address(0) && !s.paused && !s.cancelled && !_blocked[subscriber]
            && (s.maxExecutions == 0 || s.timesExecuted < s.maxExecutions);
    }

    function _existing(uint256 subscriptionId) private view returns (Subscription storage s) {
        s = _subscriptions[subscriptionId];
        if (s.subscriber == address(0)) revert UnknownSubscription();
    }

    function _subscriberOnly(uint256 subscriptionId) private view returns (Subscription storage s) {
        s = _existing(subscriptionId);
        if (msg.sender != s.subscriber) revert NotSubscriber();
    }

    function _subscriberOrOwner(uint256 subscriptionId) private view returns (Subscription storage s) {
        s = _existing(subscriptionId);
        if (msg.sender != s.subscriber && msg.sender != owner) revert NotSubscriberOrOwner();
    }
}
