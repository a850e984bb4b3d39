/**
 * Fan-out of new events to endpoints. The transaction that writes events records their range in an outbox
 * (`enqueueFanOut`, one small row); the dispatcher creates the deliveries from it in a transaction of its own
 * (`drainFanOut`), so the indexer's batches never wait on deliveries. Idempotent: a range may hold seqs of other
 * transactions, whose deliveries exist already. An endpoint with a `chain_id` (made by a chain-scoped credential)
 * gets only that chain's events.
 */
import type { Sql } from "../db/client";
import { lockForTransaction, tryLockForTransaction } from "../db/advisory-lock";
import { catchingUpSql } from "../db/catch-up";
import type { Q, Tx } from "../db/query";
import type { EventRange } from "../events/hook";
import { analyzeAfterBurst } from "./burst-statistics";
import { deliveriesOfEvent, mayHaveReceived } from "./received";

/** Records `range` in the fan-out outbox, in the transaction that wrote its events (an `OnEvents` hook). */
export async function enqueueFanOut(tx: Q, range: EventRange): Promise<void> {
  await tx`insert into webhook_fanout_queue (chain_id, from_seq, to_seq, withdrawals, merchants)
    values (${range.chainId}, ${range.fromSeq.toString()}, ${range.toSeq.toString()}, ${range.withdrawals},
      ${range.merchants ? (range.merchants as string[]) : null})`;
}

type QueuedRange = {
  id: string;
  chain_id: string;
  from_seq: string;
  to_seq: string;
  withdrawals: boolean;
  merchants: string[] | null;
  /**
   * As text, and sent back as text (`::text::timestamptz`): postgres.js turns a timestamptz parameter into a Date, which
   * drops the microseconds the endpoints' `fanout_since` and `created_at` are compared in.
   */
  queued_at: string;
};

/** What a read of the outbox selects (a `QueuedRange`). */
const QUEUED_COLUMNS = "id, chain_id, from_seq, to_seq, withdrawals, merchants, queued_at::text";

/** A queued row as the range it holds. */
const rangeOf = (r: QueuedRange): EventRange => ({
  chainId: Number(r.chain_id),
  fromSeq: BigInt(r.from_seq),
  toSeq: BigInt(r.to_seq),
  withdrawals: r.withdrawals,
  ...(r.merchants ? { merchants: r.merchants } : {}),
});

// Drains take it without waiting; a change of an endpoint's settings waits for it (fanOutQueuedTo).
const FANOUT_LOCK = "webhook fan-out";

/** The outbox's backlog: ranges queued, and the age in seconds of the oldest one no catch-up holds (null: none). */
export async function fanOutBacklog(q: Q): Promise<{ queued: number; oldestReadyAgeS: number | null }> {
  const [row] = await q<{ n: number; age: string | null }[]>`
    select count(*)::int as n,
      extract(epoch from clock_timestamp() - min(f.queued_at) filter (where not ${catchingUpSql(q)}))::text as age
    from webhook_fanout_queue f left join chains c on c.chain_id = f.chain_id`;
  return { queued: row!.n, oldestReadyAgeS: row!.age === null ? null : Math.max(0, Number(row!.age)) };
}

/**
 * Fans out the oldest `limit` ranges of the outbox in queue order (but those of a chain catching up), in one
 * transaction that deletes them. One drainer at a time, so a rollback's withdrawals come after the ranges they
 * withdraw; another process draining meanwhile is left to it (its sends need not wait). Returns whether more are
 * queued.
 */
export async function drainFanOut(sql: Sql, limit = 16): Promise<boolean> {
  let created = 0;
  const more = await sql.begin(async (tx) => {
    if (!(await tryLockForTransaction(tx, FANOUT_LOCK))) return false;
    const rows = await tx<QueuedRange[]>`
      select ${tx.unsafe(QUEUED_COLUMNS)} from webhook_fanout_queue
      where chain_id not in (select c.chain_id from chains c where ${catchingUpSql(tx)})
      order by id limit ${limit + 1}`;
    const take = rows.slice(0, limit);
    if (take.length === 0) return false;
    for (const r of take) created += await fanOut(tx, rangeOf(r), { queuedAt: r.queued_at });
    // By id, not by "id <= last": a range with a smaller id committed meanwhile is not fanned out yet.
    await tx`delete from webhook_fanout_queue where id = any(${take.map((r) => r.id)}::bigint[])`;
    return rows.length > limit;
  });
  await analyzeAfterBurst(sql, created);
  return more;
}

/**
 * Fans the ranges still queued (held ones included) out to `endpointIds` as their settings are now, and makes their
 * next settings apply to the ranges queued from now on. Called in the transaction that changes an endpoint's
 * `enabled` or `event_types`, before the change: each event then goes where the settings at its commit sent it,
 * however late the drain runs. Waits for a drain in progress, and for writers whose ranges are not committed yet
 * (new ranges wait for this transaction), so no range falls between the two settings.
 */
export async function fanOutQueuedTo(tx: Tx, endpointIds: string[]): Promise<number> {
  if (endpointIds.length === 0) return 0;
  await lockForTransaction(tx, FANOUT_LOCK);
  await tx`lock table webhook_fanout_queue in share mode`;
  const rows = await tx<QueuedRange[]>`select ${tx.unsafe(QUEUED_COLUMNS)} from webhook_fanout_queue order by id`;
  let created = 0;
  for (const r of rows) created += await fanOut(tx, rangeOf(r), { queuedAt: r.queued_at, endpointIds });
  await tx`update webhook_endpoints set fanout_since = clock_timestamp() where id = any(${endpointIds}::text[])`;
  return created;
}

/** Whether any of `merchants` has an enabled endpoint. */
async function anyEndpoint(tx: Q, merchants: readonly string[]): Promise<boolean> {
  const [row] = await tx<{ any: boolean }[]>`
    select exists (select 1 from webhook_endpoints where enabled and merchant = any(${merchants as string[]})) as any`;
  return row!.any;
}

/**
 * Creates the deliveries of the events in `range` (read from both tables of the event log directly: the view costs
 * more to plan than this statement costs to run): one per enabled endpoint of the merchant whose types match and, for
 * a range from the outbox, whose settings applied when it was queued (`endpointIds`: only to those, withdrawals
 * left to the drain). A `webhook.test` written meanwhile by `…/test` may hold a seq inside the range: it belongs to
 * its endpoint only. Returns how many deliveries it created.
 */
export async function fanOut(
  tx: Q,
  range: EventRange,
  opts: { queuedAt?: string; endpointIds?: string[] } = {},
): Promise<number> {
  const { queuedAt, endpointIds } = opts;
  const from = range.fromSeq.toString();
  const to = range.toSeq.toString();
  // Most batches of a backfill have no endpoint to go to: a lookup by merchant is far cheaper to plan and run.
  if (range.merchants && !range.withdrawals && !(await anyEndpoint(tx, range.merchants))) return 0;
  const created = await tx`
    insert into webhook_deliveries (id, endpoint_id, event_seq, event_id, event_type, origin)
    select 'wd_' || substr(md5(w.id || e.id), 1, 24), w.id, e.seq, e.id, e.type, 'auto'
    from webhook_endpoints w
    cross join lateral (
      select e.seq, e.id, e.type, e.type as subscribed from merchant_events e
      where e.merchant = w.merchant and e.seq between ${from} and ${to} and e.chain_id = ${range.chainId}
        and e.type not in ('event.reverted', 'webhook.test') and e.reverted_by is null
      union all
      select a.event_seq, activity_event_id(a.chain_id, a.block_number, a.log_index, a.block_hash),
        activity_event_type(a.type), activity_event_type(a.type)
      from activity a
      where a.merchant = w.merchant and a.event_seq between ${from} and ${to} and a.chain_id = ${range.chainId}
      ${
        range.withdrawals
          ? // A withdrawal goes to every endpoint subscribed to the withdrawn event's type, whether or not it
            // received that event (webhooks.md §1): it may have read the state it changed through the API.
            tx`union all
      select e.seq, e.id, e.type, e.data->'object'->>'type' from merchant_events e
      where e.merchant = w.merchant and e.seq between ${from} and ${to} and e.chain_id = ${range.chainId}
        and e.type = 'event.reverted'`
          : tx``
      }) e
    where w.enabled and ('*' = any(w.event_types) or e.subscribed = any(w.event_types))
      and (w.chain_id is null or w.chain_id = ${range.chainId})
      ${queuedAt ? tx`and coalesce(w.fanout_since, w.created_at) <= ${queuedAt}::text::timestamptz` : tx``}
      ${endpointIds ? tx`and w.id = any(${endpointIds}::text[])` : tx``}
    on conflict do nothing`;
  if (!range.withdrawals || endpointIds) return created.count;
  // A withdrawn event: its event.reverted also goes to the endpoints that may have received the original though
  // their settings no longer send them its type (webhooks.md §1), then the original's pending deliveries are
  // cancelled.
  const reverted = await tx`
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
  return created.count + reverted.count;
}
