/** The event object (webhooks.md §2): the element of the event log API and the body of a delivery. */
import { toActivityRecord, toSubscriptionRecord, type SubscriptionRecordObject } from "../domain/records";
import type { SubscriptionStatus } from "../domain/status";

/** Every event type. */
export const EVENT_TYPES = [
  "charge.succeeded",
  "charge.failed",
  "credit.refilled",
  "subscription.created",
  "subscription.status_changed",
  "subscription.renewal_upcoming",
  "subscription.renewal_at_risk",
  "subscription.renewal_recovered",
  "customer.churned",
  "customer.reactivated",
  "event.reverted",
  "webhook.test",
] as const;

/** What readers select of `event_log` (for a view or alias `e`): `EventRow`. */
export const EVENT_COLUMNS = `e.seq, e.id, e.chain_id, e.merchant, e.type, e.block_number, e.ts, e.data, e.log_index,
  e.a_tx_hash, e.a_module, e.a_subscription_id, e.a_type, e.a_amount, e.a_fee, e.a_reason, e.a_keeper, e.a_symbol,
  e.a_decimals, e.s_subscription_id, e.s_module, e.s_subscriber, e.s_plan_id, e.s_max_executions, e.s_created_at,
  e.s_times_executed, e.s_total_spent, e.s_next_charge_at, e.s_allowance_expiry, e.s_paused, e.s_cancelled,
  e.s_blocked, e.s_status, e.s_previous_status, e.a_permission_hash`;

/**
 * A row of `event_log` as the readers select it. An activity event has `data` null and its record in `a_*`; a
 * subscription event stored as a snapshot (migration 0035) has `data` null and its allocation's state in `s_*`.
 */
export type EventRow = {
  seq: string;
  id: string;
  chain_id: string;
  merchant: string;
  type: string;
  block_number: string;
  ts: Date;
  data: Record<string, unknown> | null;
  log_index: number;
  a_tx_hash: string | null;
  /** A spend permission's charge: its hash (migration 0053). */
  a_permission_hash?: string | null;
  a_module: string | null;
  a_subscription_id: string | null;
  a_type: "CHARGE" | "FAIL" | "REFILL" | null;
  a_amount: string | null;
  a_fee: string | null;
  a_reason: string | null;
  a_keeper: string | null;
  a_symbol: string | null;
  a_decimals: number | null;
  s_subscription_id: string | null;
  s_module: string | null;
  s_subscriber: string | null;
  s_plan_id: string | null;
  s_max_executions: string | null;
  s_created_at: string | null;
  s_times_executed: string | null;
  s_total_spent: string | null;
  s_next_charge_at: string | null;
  s_allowance_expiry: string | null;
  s_paused: boolean | null;
  s_cancelled: boolean | null;
  s_blocked: boolean | null;
  s_status: SubscriptionStatus | null;
  s_previous_status: SubscriptionStatus | null;
};

/** The event object. */
export type EventEnvelope = {
  id: string;
  type: string;
  timestamp: string;
  chain_id: number;
  merchant: string;
  block_number: string;
  data: Record<string, unknown>;
};

/** The object with its keys in jsonb's order (shorter first, then bytewise): as a stored copy of it reads back. */
function inJsonbOrder<T extends object>(o: T): T {
  const keys = Object.keys(o).sort((a, b) => a.length - b.length || (a < b ? -1 : a > b ? 1 : 0));
  const out: Record<string, unknown> = {};
  for (const k of keys) out[k] = (o as Record<string, unknown>)[k];
  return out as T;
}

/**
 * `data` of a subscription event: its record, and for a status change the status before (`previous` undefined:
 * `subscription.created`). Keys in jsonb's order, as when the record was stored as jsonb.
 */
export function subscriptionEventData(
  object: SubscriptionRecordObject,
  previous?: SubscriptionStatus | null,
): Record<string, unknown> {
  const record = inJsonbOrder(object);
  return previous === undefined ? { object: record } : { object: record, previous_status: previous };
}

/** `data` of a row: stored, built from a subscription event's snapshot, or the activity record of an activity event. */
export function eventData(r: EventRow): Record<string, unknown> {
  if (r.data !== null) return r.data;
  if (r.s_status !== null) {
    const object = toSubscriptionRecord({
      chain_id: String(r.chain_id),
      subscription_id: String(r.s_subscription_id),
      module: r.s_module!,
      subscriber: r.s_subscriber!,
      plan_id: String(r.s_plan_id),
      max_executions: String(r.s_max_executions),
      times_executed: String(r.s_times_executed),
      total_spent: String(r.s_total_spent),
      created_at: String(r.s_created_at),
      next_charge_at: String(r.s_next_charge_at),
      allowance_expiry: String(r.s_allowance_expiry),
      paused: r.s_paused!,
      cancelled: r.s_cancelled!,
      is_blocked: r.s_blocked!,
      status: r.s_status,
    });
    return subscriptionEventData(object, r.type === "subscription.created" ? undefined : r.s_previous_status);
  }
  const object = toActivityRecord({
    chain_id: String(r.chain_id),
    block_number: String(r.block_number),
    log_index: r.log_index,
    tx_hash: r.a_tx_hash!,
    timestamp: r.ts.toISOString(),
    module: r.a_module!,
    subscription_id: String(r.a_subscription_id),
    type: r.a_type!,
    amount: String(r.a_amount),
    fee: r.a_fee === null ? null : String(r.a_fee),
    reason: r.a_reason,
    keeper: r.a_keeper,
    symbol: r.a_symbol,
    decimals: r.a_decimals,
    permission_hash: r.a_permission_hash,
  });
  return { object };
}

/** The event object of a row. */
export function toEnvelope(r: EventRow): EventEnvelope {
  return {
    id: r.id,
    type: r.type,
    timestamp: r.ts.toISOString(),
    chain_id: Number(r.chain_id),
    merchant: r.merchant,
    block_number: String(r.block_number),
    data: eventData(r),
  };
}
