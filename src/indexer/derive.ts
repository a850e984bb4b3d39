import { moduleOfEvent } from "../domain/attribution";
import { failureReasonName } from "../domain/failure-reasons";
import { ACTIVITY_LOGS, SPEND_PERMISSION_LOGS, type ChainEvent } from "../domain/chain-event";
import {
  applyToSubscription,
  planKey,
  subscriptionFromCreated,
  type PlanInfo,
  type SubState,
} from "../domain/subscription";

/** A row of `modules`. */
export type ModuleRow = { address: string; merchant: string; blockNumber: bigint; logIndex: number; txHash: string };

/** A row of `plans`. */
export type PlanRow = {
  module: string;
  planId: string;
  token: string;
  amount: string;
  interval: number;
  grace: number;
  blockNumber: bigint;
  logIndex: number;
};

/** A row of `blocked_subscribers`. */
export type BlockedRow = {
  module: string;
  subscriber: string;
  blocked: boolean;
  blockNumber: bigint;
  logIndex: number;
};

/** A row of `activity`. */
export type ActivityRow = {
  blockNumber: bigint;
  logIndex: number;
  txHash: string;
  blockHash: string;
  blockTime: number;
  merchant: string;
  module: string;
  subscriptionId: string;
  type: "CHARGE" | "FAIL" | "REFILL";
  token: string | null;
  amount: string;
  fee: string | null;
  reason: string | null;
  keeper: string;
  /** Seq of the row's event in the event log, when the events hook gave it one (its id is derived). */
  eventSeq?: string;
  /** A spend permission's charge: its hash and the period `[periodStart, periodEnd)` it paid. */
  permissionHash?: string;
  periodStart?: number;
  periodEnd?: number;
};

/** Events that change a subscription's row after its creation. */
const SUBSCRIPTION_UPDATES = new Set([
  "ChargeSucceeded",
  "SubscriptionPaused",
  "SubscriptionResumed",
  "SubscriptionCancelled",
  "AllowanceExpiryUpdated",
]);

/** Events whose activity, derived rows or events (the event log's fold) need the subscription's current state. */
const NEEDS_SUBSCRIPTION = new Set([...SUBSCRIPTION_UPDATES, ...ACTIVITY_LOGS]);

/** Copies of the states of `ids` found in `subs`: the allocations a batch touches, before it applies. */
export function statesBefore(subs: Map<string, SubState>, ids: string[]): Map<string, SubState> {
  const out = new Map<string, SubState>();
  for (const id of ids) {
    const s = subs.get(id);
    if (s) out.set(id, { ...s });
  }
  return out;
}

/** Subscription ids a batch touches that it does not create itself: their rows must be loaded first. */
export function subscriptionsToLoad(events: ChainEvent[]): string[] {
  const created = new Set<string>();
  const needed = new Set<string>();
  for (const ev of events) {
    if (SPEND_PERMISSION_LOGS.has(ev.name)) continue; // ./spend-permission-state.ts
    if (ev.name === "SubscriptionCreated") created.add(ev.subscriptionId!);
    else if (ev.subscriptionId !== null && NEEDS_SUBSCRIPTION.has(ev.name) && !created.has(ev.subscriptionId)) {
      needed.add(ev.subscriptionId);
    }
  }
  return [...needed];
}

/** Everything a batch changes besides the raw `events` rows (its `activity` rows included). */
export type Derived = {
  modules: ModuleRow[];
  plans: PlanRow[];
  /** Final state of every allocation the batch created or changed. */
  subscriptions: SubState[];
  blocked: BlockedRow[];
  activity: ActivityRow[];
  /** Events skipped because their module or subscription is unknown (created before START_BLOCK). */
  orphans: number;
};

/** The activity record of a payment event: CHARGE, FAIL (in the token of the subscription's plan) or REFILL. */
function activityOf(ev: ChainEvent, merchant: string, module: string, plan: PlanInfo | undefined): ActivityRow {
  const a = ev.args;
  const base = {
    blockNumber: ev.blockNumber,
    logIndex: ev.logIndex,
    txHash: ev.txHash,
    blockHash: ev.blockHash,
    blockTime: ev.blockTime,
    merchant,
    module,
    subscriptionId: ev.subscriptionId!,
  };
  if (ev.name === "ChargeSucceeded") {
    const fee = String(a.fee);
    return {
      ...base,
      type: "CHARGE",
      token: String(a.token),
      amount: String(a.amount),
      fee,
      reason: null,
      keeper: String(a.keeper),
    };
  }
  if (ev.name === "ChargeFailed") {
    const reason = failureReasonName(Number(a.reason)) ?? `Unknown(${a.reason})`;
    return {
      ...base,
      type: "FAIL",
      token: plan?.token ?? null,
      amount: "0",
      fee: null,
      reason,
      keeper: String(a.keeper),
    };
  }
  return {
    ...base,
    type: "REFILL",
    token: String(a.token),
    amount: String(a.amount),
    fee: null,
    reason: null,
    keeper: String(a.from),
  };
}

/**
 * Folds a batch of events (in chain order) over the known state: `modules` (address → merchant), `plans`
 * and `subs` (the rows `subscriptionsToLoad` named). The maps are updated in place.
 */
export function deriveBatch(
  events: ChainEvent[],
  modules: Map<string, string>,
  plans: Map<string, PlanInfo>,
  subs: Map<string, SubState>,
): Derived {
  const out: Derived = { modules: [], plans: [], subscriptions: [], blocked: [], activity: [], orphans: 0 };
  const changed = new Set<string>();
  const blocked = new Map<string, BlockedRow>();
  for (const ev of events) {
    if (SPEND_PERMISSION_LOGS.has(ev.name)) continue; // ./spend-permission-state.ts
    const a = ev.args;
    switch (ev.name) {
      case "ModuleCreated": {
        const row = {
          address: moduleOfEvent(ev)!,
          merchant: String(a.merchant),
          blockNumber: ev.blockNumber,
          logIndex: ev.logIndex,
          txHash: ev.txHash,
        };
        modules.set(row.address, row.merchant);
        out.modules.push(row);
        continue;
      }
      case "PlanCreated": {
        const row: PlanRow = {
          module: moduleOfEvent(ev)!,
          planId: String(a.planId),
          token: String(a.token),
          amount: String(a.amount),
          interval: Number(a.interval),
          grace: Number(a.gracePeriod),
          blockNumber: ev.blockNumber,
          logIndex: ev.logIndex,
        };
        plans.set(planKey(row.module, row.planId), { token: row.token, interval: row.interval, grace: row.grace });
        out.plans.push(row);
        continue;
      }
      case "SubscriptionCreated": {
        const merchant = modules.get(moduleOfEvent(ev)!);
        if (merchant === undefined) {
          out.orphans++;
          continue;
        }
        const sub = subscriptionFromCreated(ev, merchant);
        subs.set(sub.subscriptionId, sub);
        changed.add(sub.subscriptionId);
        continue;
      }
      case "SubscriberBlocked":
      case "SubscriberUnblocked": {
        const row = {
          module: moduleOfEvent(ev)!,
          subscriber: String(a.subscriber),
          blocked: ev.name === "SubscriberBlocked",
          blockNumber: ev.blockNumber,
          logIndex: ev.logIndex,
        };
        blocked.set(`${row.module}:${row.subscriber}`, row);
        continue;
      }
    }
    if (ev.subscriptionId === null) continue; // KeeperSet, FeeSet
    const sub = subs.get(ev.subscriptionId);
    const module = moduleOfEvent(ev) ?? "";
    if (SUBSCRIPTION_UPDATES.has(ev.name)) {
      if (sub && sub.module === module) {
        applyToSubscription(sub, ev, plans.get(planKey(sub.module, sub.planId)));
        changed.add(sub.subscriptionId);
      } else {
        out.orphans++;
      }
    }
    const merchant = modules.get(module);
    if (ACTIVITY_LOGS.has(ev.name)) {
      if (merchant === undefined) {
        out.orphans++;
        continue;
      }
      const plan = sub ? plans.get(planKey(sub.module, sub.planId)) : undefined;
      out.activity.push(activityOf(ev, merchant, module, plan));
    }
  }
  // Copies: a later batch keeps folding into the cached objects while this one may still be writing.
  out.subscriptions = [...changed].map((id) => ({ ...subs.get(id)! }));
  out.blocked = [...blocked.values()];
  return out;
}
