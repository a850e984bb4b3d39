/** The dispatcher's statements: claiming due deliveries with a lease, and recording attempts in batches. */
import type { Sql } from "../db/client";
import { EVENT_COLUMNS, type EventRow } from "../events/envelope";
import { standing } from "../events/queries";
import { fanOutQueuedTo } from "./fanout";
import type { AttemptOutcome } from "./send";

/** A claimed delivery with what sending it needs. */
export type Claimed = EventRow & {
  delivery_id: string;
  endpoint_id: string;
  attempts: number;
  origin: string;
  url: string;
  secret: string;
  previous_secret: string | null;
  previous_secret_expires_at: Date | null;
};

/** What a send needs of a delivery, its endpoint (`w`) and its event (`e`), for `d`, `w` and `e` in scope. */
const CLAIMED_COLUMNS = `d.id as delivery_id, w.id as endpoint_id, d.attempts, d.origin, w.url, w.secret, w.previous_secret,
  w.previous_secret_expires_at, ${EVENT_COLUMNS}`;

/** One delivery as a claim reads it (the `test` route claims its own delivery at insertion). */
export async function claimedById(sql: Sql, deliveryId: string): Promise<Claimed | undefined> {
  const [row] = await sql<Claimed[]>`
    select ${sql.unsafe(CLAIMED_COLUMNS)}
    from webhook_deliveries d join webhook_endpoints w on w.id = d.endpoint_id
    join event_log e on e.merchant = w.merchant and e.seq = d.event_seq
    where d.id = ${deliveryId}`;
  return row;
}

/**
 * Claims up to `limit` due deliveries of enabled endpoints, at most `perEndpoint` in flight per endpoint (across
 * processes: leased, less the `settled` ones this process has sent and not yet recorded), and counts the claim as an
 * attempt. Each endpoint with due work is visited through its own index range (no scan of every pending delivery),
 * oldest due first. The conditional UPDATE makes two dispatchers that pick the same row take it once: the second
 * re-checks the lease after the first commits and skips it. A delivery whose event a reorg withdrew is cancelled
 * instead of claimed.
 */
export async function claimDue(
  sql: Sql,
  opts: { limit: number; perEndpoint: number; leaseMs: number; settled?: string[] },
): Promise<Claimed[]> {
  const claimed = await sql<(Claimed & { status: string })[]>`
    with ep as (
      select w.id, ${opts.perEndpoint}::int - (
          select count(*) from webhook_deliveries b
          where b.endpoint_id = w.id and b.status = 'pending' and b.lease_until is not null
            and b.lease_until > clock_timestamp() and b.id <> all(${opts.settled ?? []}::text[]))::int as room
      from webhook_endpoints w
      -- The endpoint's earliest pending delivery, read as the first entry of its due index. An EXISTS here was
      -- planned as a scan of the table that stops at the first match, which reads every delivery already sent.
      where w.enabled and (
        select d.next_attempt_at from webhook_deliveries d
        where d.endpoint_id = w.id and d.status = 'pending'
        order by d.next_attempt_at limit 1) <= clock_timestamp()),
    pick as (
      select c.id, c.event_seq from ep cross join lateral (
        select d.id, d.next_attempt_at, d.event_seq from webhook_deliveries d
        where d.endpoint_id = ep.id and d.status = 'pending' and d.next_attempt_at <= clock_timestamp()
          and (d.lease_until is null or d.lease_until <= clock_timestamp())
        order by d.next_attempt_at, d.id
        limit greatest(ep.room, 0)) c
      order by c.next_attempt_at
      limit ${opts.limit})
    update webhook_deliveries d
    set lease_until = case when ${standing(sql)} then clock_timestamp() + ${opts.leaseMs} * interval '1 millisecond' end,
        attempts = d.attempts + case when ${standing(sql)} then 1 else 0 end,
        status = case when ${standing(sql)} then d.status else 'cancelled' end
    -- Each event by its seq alone (the LIMIT keeps the planner from joining the log by merchant instead, which it
    -- did with statistics from before a burst: every event of the merchant read for each delivery claimed).
    from pick cross join lateral (select * from event_log e where e.seq = pick.event_seq limit 1) e, webhook_endpoints w
    where d.id = pick.id and w.id = d.endpoint_id and e.merchant = w.merchant
      and d.status = 'pending'
      and (d.lease_until is null or d.lease_until <= clock_timestamp())
    returning ${sql.unsafe(CLAIMED_COLUMNS)}, d.status`;
  // A delivery of an event withdrawn meanwhile (a replay or redeliver that raced the rollback) is cancelled, not sent.
  return claimed.filter((c) => c.status === "pending");
}

/** The outcome of one attempt, to record. */
export type Outcome = {
  deliveryId: string;
  attempt: number;
  ok: boolean;
  /** Whether the receiver may have the event after this attempt. */
  outcome: AttemptOutcome;
  status: number | null;
  error: string | null;
  durationMs: number;
  /** Seconds until the next attempt; null when this was the last one (the delivery is then `failed`). */
  retryInS: number | null;
};

/**
 * Records a batch of attempts in one transaction: the attempt log, each delivery's state (a cancelled one stays
 * cancelled), and each endpoint's failure clock — disabled once it has only failed for `disableAfterS`.
 */
export async function recordOutcomes(sql: Sql, outcomes: Outcome[], disableAfterS: number): Promise<void> {
  if (outcomes.length === 0) return;
  const rows = JSON.stringify(
    outcomes.map((o) => ({
      id: o.deliveryId,
      attempt: o.attempt,
      ok: o.ok,
      receipt: o.outcome,
      status: o.status,
      error: o.error,
      ms: o.durationMs,
      retry: o.retryInS,
    })),
  );
  // The id list lets the planner use the primary key: it cannot size the JSON recordset and would scan the table.
  const ids = outcomes.map((o) => o.deliveryId);
  await sql.begin(async (tx) => {
    const touched = await tx<{ endpoint_id: string; ok: boolean }[]>`
      with r as (
        select * from jsonb_to_recordset(${rows}::text::jsonb)
          as r(id text, attempt int, ok boolean, receipt text, status int, error text, ms int, retry float8)),
      att as (
        insert into webhook_attempts
          (delivery_id, attempt, endpoint_id, outcome, receipt, response_status, error, duration_ms)
        select r.id, r.attempt, d.endpoint_id, case when r.ok then 'succeeded' else 'failed' end, r.receipt, r.status,
          r.error, r.ms
        from r join webhook_deliveries d on d.id = r.id and d.id = any(${ids}::text[])
        on conflict do nothing)
      update webhook_deliveries d set
        status = case when d.status <> 'pending' then d.status when r.ok then 'succeeded'
          when r.retry is null then 'failed' else 'pending' end,
        next_attempt_at = case when r.ok or r.retry is null then d.next_attempt_at
          else clock_timestamp() + r.retry * interval '1 second' end,
        lease_until = null, response_status = r.status, error = r.error, duration_ms = r.ms,
        last_attempt_at = clock_timestamp()
      from r where d.id = r.id and d.id = any(${ids}::text[])
      returning d.endpoint_id, r.ok`;
    const ok = [...new Set(touched.filter((t) => t.ok).map((t) => t.endpoint_id))];
    const failed = [...new Set(touched.filter((t) => !t.ok).map((t) => t.endpoint_id))].filter((e) => !ok.includes(e));
    if (ok.length)
      await tx`update webhook_endpoints set failing_since = null where id = any(${ok}) and failing_since is not null`;
    if (failed.length) {
      await tx`
        update webhook_endpoints set failing_since = coalesce(failing_since, clock_timestamp())
        where id = any(${failed})`;
      const expired = await tx<{ id: string }[]>`
        select id from webhook_endpoints
        where id = any(${failed}) and enabled
          and failing_since <= clock_timestamp() - ${disableAfterS} * interval '1 second'
        for no key update`;
      if (expired.length > 0) {
        const ids = expired.map((e) => e.id);
        await fanOutQueuedTo(tx, ids);
        await tx`
          update webhook_endpoints set enabled = false, updated_at = clock_timestamp(),
            disabled_reason = 'every delivery failed for ' || ${disableAfterS} || ' s'
          where id = any(${ids})`;
      }
    }
  });
}
