// SPDX-License-Identifier: MIT
pragma solidity ^0.8.28;

interface IChargeProcessor {
    function charge(address module, uint256 subscriptionId) external returns (bool success);
}

/// @title ChargeBatcher
/// @notice Test and benchmark helper only: once registered as a keeper, it charges many subscriptions
///         (or the same failing one many times) in one transaction, to produce payment events fast.
contract ChargeBatcher {
    IChargeProcessor public immutable processor;

    constructor(address processor_) {
        processor = IChargeProcessor(processor_);
    }

    /// @notice Charges every id of `module` `rounds` times; reverts (not due, not chargeable) are skipped.
    /// @return succeeded how many charges emitted ChargeSucceeded
    function chargeMany(address module, uint256[] calldata ids, uint256 rounds) external returns (uint256 succeeded) {
        for (uint256 r = 0; r < rounds; ++r) {
            for (uint256 i = 0; i < ids.length; ++i) {
                try processor.charge(module, ids[i]) returns (bool ok) {
                    if (ok) ++succeeded;
                } catch {}
            }
        }
    }
}
