/** The event object (webhooks.md §2): the element of the event log API and the body of a delivery. */
import { toActivityRecord } from "../domain/records";

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
  "event.reverted",
  "webhook.test",
] as const;

/** What readers select of `event_log` (for a view or alias `e`): `EventRow`. */
export const EVENT_COLUMNS = `e.seq, e.id, e.chain_id, e.merchant, e.type, e.block_number, e.ts, e.data, e.log_index,
  e.a_tx_hash, e.a_module, e.a_subscription_id, e.a_type, e.a_amount, e.a_fee, e.a_reason, e.a_keeper, e.a_symbol,
  e.a_decimals`;

/** A row of `event_log` as the readers select it; an activity event has `data` null and its record in `a_*`. */
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
  a_module: string | null;
  a_subscription_id: string | null;
  a_type: "CHARGE" | "FAIL" | "REFILL" | null;
  a_amount: string | null;
  a_fee: string | null;
  a_reason: string | null;
  a_keeper: string | null;
  a_symbol: string | null;
  a_decimals: number | null;
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

/** `data` of a row: stored, or the activity record of an activity event. */
export function eventData(r: EventRow): Record<string, unknown> {
  if (r.data !== null) return r.data;
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
