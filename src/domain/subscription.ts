/** An allocation's state and how chain events change it, exactly as the contracts do: pure rules. */
import { moduleOfEvent } from "./attribution";
import type { ChainEvent } from "./chain-event";

/** Plan facts the derived state and the status need (plans are immutable on chain). */
export type PlanInfo = { token: string; interval: number; grace: number };

/** The current state of one allocation, as the `subscriptions` table holds it. */
export type SubState = {
  subscriptionId: string;
  module: string;
  merchant: string;
  subscriber: string;
  planId: string;
  maxExecutions: string;
  timesExecuted: number;
  totalSpent: bigint;
  createdAt: number;
  lastPaidAt: number;
  nextChargeAt: number;
  allowanceExpiry: string;
  paused: boolean;
  cancelled: boolean;
  blockNumber: bigint;
  logIndex: number;
  txHash: string;
};

/** Key of a plan in caches: `<module>:<planId>`. */
export const planKey = (module: string, planId: string | number) => `${module}:${planId}`;

/** The allocation a `SubscriptionCreated` starts: createdAt = nextChargeAt = the block timestamp. */
export function subscriptionFromCreated(ev: ChainEvent, merchant: string): SubState {
  return {
    subscriptionId: String(ev.args.subscriptionId),
    module: moduleOfEvent(ev)!,
    merchant,
    subscriber: String(ev.args.subscriber),
    planId: String(ev.args.planId),
    maxExecutions: String(ev.args.maxExecutions),
    timesExecuted: 0,
    totalSpent: 0n,
    createdAt: ev.blockTime,
    lastPaidAt: 0,
    nextChargeAt: ev.blockTime,
    allowanceExpiry: String(ev.args.allowanceExpiry),
    paused: false,
    cancelled: false,
    blockNumber: ev.blockNumber,
    logIndex: ev.logIndex,
    txHash: ev.txHash,
  };
}

/** Applies one later event to an allocation exactly as the contracts do; ChargeFailed changes nothing. */
export function applyToSubscription(sub: SubState, ev: ChainEvent, plan: PlanInfo | undefined): void {
  switch (ev.name) {
    case "ChargeSucceeded":
      sub.timesExecuted += 1;
      sub.totalSpent += BigInt(ev.args.amount as string);
      sub.lastPaidAt = ev.blockTime;
      sub.nextChargeAt = ev.blockTime + (plan?.interval ?? 0);
      break;
    case "SubscriptionPaused":
      sub.paused = true;
      break;
    case "SubscriptionResumed":
      sub.paused = false;
      break;
    case "SubscriptionCancelled":
      sub.cancelled = true;
      break;
    case "AllowanceExpiryUpdated":
      sub.allowanceExpiry = String(ev.args.allowanceExpiry);
      break;
  }
}
