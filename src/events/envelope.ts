/** The event object (webhooks.md §2): the element of the event log API and the body of a delivery. */

/** A row of `merchant_events` as the readers select it. */
export type EventRow = {
  seq: string;
  id: string;
  chain_id: string;
  merchant: string;
  type: string;
  block_number: string;
  ts: Date;
  data: Record<string, unknown>;
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

/** The event object of a row. */
export function toEnvelope(r: EventRow): EventEnvelope {
  return {
    id: r.id,
    type: r.type,
    timestamp: r.ts.toISOString(),
    chain_id: Number(r.chain_id),
    merchant: r.merchant,
    block_number: String(r.block_number),
    data: r.data,
  };
}
