/**
 * Fan-out of new events to endpoints, inside the transaction that wrote the events (so a committed event always
 * has its deliveries). Idempotent: the range may hold seqs of other transactions, whose deliveries exist already.
 * An endpoint with a `chain_id` (made by a chain-scoped credential) gets only that chain's events.
 */
import type { Q } from "../db/query";
import type { EventRange } from "../events/hook";
import { deliveriesOfEvent, mayHaveReceived } from "./queries";

/** Whether any of `merchants` has an enabled endpoint. */
async function anyEndpoint(tx: Q, merchants: readonly string[]): Promise<boolean> {
  const [row] = await tx<{ any: boolean }[]>`
    select exists (select 1 from webhook_endpoints where enabled and merchant = any(${merchants as string[]})) as any`;
  return row!.any;
}

/**
 * Creates the deliveries of the events in `range` (read from both tables of the event log directly: the view costs
 * more to plan than this statement costs to run): one per enabled endpoint of the merchant whose types match. A
 * `webhook.test` written meanwhile by `…/test` may hold a seq inside the range: it belongs to its endpoint only.
 */
export async function fanOut(tx: Q, range: EventRange): Promise<void> {
  const from = range.fromSeq.toString();
  const to = range.toSeq.toString();
  // Most batches of a backfill have no endpoint to go to: a lookup by merchant is far cheaper to plan and run.
  if (range.merchants && !range.withdrawals && !(await anyEndpoint(tx, range.merchants))) return;
  await tx`
    insert into webhook_deliveries (id, endpoint_id, event_seq, event_id, event_type, origin)
    select 'wd_' || substr(md5(w.id || e.id), 1, 24), w.id, e.seq, e.id, e.type, 'auto'
    from webhook_endpoints w
    cross join lateral (
      select e.seq, e.id, e.type from merchant_events e
      where e.merchant = w.merchant and e.seq between ${from} and ${to} and e.chain_id = ${range.chainId}
        and e.type not in ('event.reverted', 'webhook.test')
      union all
      select a.event_seq, activity_event_id(a.chain_id, a.block_number, a.log_index, ev.block_hash),
        activity_event_type(a.type)
      from activity a
      join events ev on ev.chain_id = a.chain_id and ev.block_number = a.block_number and ev.log_index = a.log_index
      where a.merchant = w.merchant and a.event_seq between ${from} and ${to} and a.chain_id = ${range.chainId}) e
    where w.enabled and ('*' = any(w.event_types) or e.type = any(w.event_types))
      and (w.chain_id is null or w.chain_id = ${range.chainId})
    on conflict do nothing`;
  if (!range.withdrawals) return;
  // A withdrawn event: its event.reverted goes to the endpoints that may have received the original (webhooks.md §1),
  // then the original's pending deliveries are cancelled; an endpoint that only had non-2xx answers, or was never
  // sent it, gets neither.
  await tx`
    insert into webhook_deliveries (id, endpoint_id, event_seq, event_id, event_type, origin)
    select 'wd_' || substr(md5(d.endpoint_id || r.id), 1, 24), d.endpoint_id, r.seq, r.id, r.type, 'auto'
    from merchant_events r
    cross join ${deliveriesOfEvent(tx, tx`r.data->'object'->>'id'`)}
    where r.seq between ${from} and ${to} and r.chain_id = ${range.chainId} and r.type = 'event.reverted'
      and ${mayHaveReceived(tx)}
    on conflict do nothing`;
  await tx`
    update webhook_deliveries set status = 'cancelled', lease_until = null
    where id = any(array(
      select d.id from merchant_events r
      cross join ${deliveriesOfEvent(tx, tx`r.data->'object'->>'id'`)}
      where r.seq between ${from} and ${to} and r.chain_id = ${range.chainId} and r.type = 'event.reverted'
        and d.status = 'pending'))
      and status = 'pending'`;
}
