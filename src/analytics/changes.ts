/**
 * The status changes the movement fold reads (./movements.ts), from the status events of either source: a module
 * allocation's (its state and its plan) or a Spend Permission's (the record in the event's `data`: the allowance as
 * the amount, the period as the interval, the status of spend-permissions.md §2.2). Pure: the indexer's hook and the
 * rebuild of ./rebuild.ts read the events through the same functions.
 */
import { allocationMrr, permissionLeaveReason } from "../domain/mrr";
import type { RevokedBy } from "../domain/spend-permission";
import type { SubscriptionStatus } from "../domain/status";
import type { StatusChange } from "./movements";

/** The event types that carry an allocation's status. */
export const STATUS_TYPES: ReadonlySet<string> = new Set(["subscription.created", "subscription.status_changed"]);

/** What the fold reads of a permission's subscription record (spend-permissions.md §2.3). */
type PermissionObject = {
  allocation_id: string;
  user_address: string;
  status: SubscriptionStatus;
  spend_permission: {
    spender: string;
    token: string;
    allowance: string;
    period_s: number;
    revoked_by: RevokedBy | null;
  };
};

/** The permission record of an event's `data`, or null when the event is not about a permission. */
function permissionObject(data: Record<string, unknown> | null | undefined): PermissionObject | null {
  const o = data?.object as Partial<PermissionObject> | undefined;
  return o && typeof o === "object" && o.spend_permission && typeof o.spend_permission === "object"
    ? (o as PermissionObject)
    : null;
}

/** A status event as stored or about to be: its type, position in time and `data`. */
export type StatusEventData = { type: string; blockNumber: bigint; ts: number; data: Record<string, unknown> | null };

/** The change a permission's status event makes, or null when the event is not a permission's status event. */
export function permissionChange(e: StatusEventData): StatusChange | null {
  if (!STATUS_TYPES.has(e.type)) return null;
  const o = permissionObject(e.data);
  if (!o) return null;
  const sp = o.spend_permission;
  const previous =
    e.type === "subscription.created" ? null : ((e.data?.previous_status as SubscriptionStatus | undefined) ?? null);
  return {
    allocationId: o.allocation_id,
    merchant: sp.spender.toLowerCase(),
    customer: o.user_address.toLowerCase(),
    token: sp.token.toLowerCase(),
    blockNumber: e.blockNumber,
    at: e.ts,
    previous,
    status: o.status,
    activeMrr: allocationMrr("ACTIVE", BigInt(sp.allowance), sp.period_s),
    reason: o.status === "ACTIVE" ? null : permissionLeaveReason(o.status, sp.revoked_by),
  };
}

/** A module allocation at a status event, with its plan's terms. */
export type ModuleStatusEvent = {
  chainId: number;
  module: string;
  subscriptionId: string;
  merchant: string;
  subscriber: string;
  plan: { amount: bigint; interval: number; token: string };
  blockNumber: bigint;
  ts: number;
  status: SubscriptionStatus;
  previous: SubscriptionStatus | null;
  /** Why it left ACTIVE (`leaveReason`), when `status` is not ACTIVE. */
  reason: string | null;
};

/** The change a module allocation's status event makes. */
export function moduleChange(e: ModuleStatusEvent): StatusChange {
  return {
    allocationId: `${e.chainId}:${e.module}:${e.subscriptionId}`,
    merchant: e.merchant,
    customer: e.subscriber.toLowerCase(),
    token: e.plan.token,
    blockNumber: e.blockNumber,
    at: e.ts,
    previous: e.previous,
    status: e.status,
    activeMrr: allocationMrr("ACTIVE", e.plan.amount, e.plan.interval),
    reason: e.status === "ACTIVE" ? null : e.reason,
  };
}
