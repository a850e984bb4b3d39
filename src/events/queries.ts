/** The event log's statements: what the hook reads before a batch's fold, and the writes of events and expiries. */
import { copyIn, copyText, textColumn, textColumns, type Q, type Tx } from "../db/query";
import { fromRow, type SubRow } from "../db/rows";
import { planKey, type SubState } from "../domain/subscription";
import type { NewEvent, PlanTerms, SubSnapshot } from "./timeline";
import { EVENT_COLUMNS, eventData, type EventRow } from "./envelope";

const SUB_COLUMNS = (q: Q) => q`s.subscription_id, s.module, s.merchant, s.subscriber, s.plan_id, s.max_executions,
  s.times_executed, s.total_spent, s.created_at, s.last_paid_at, s.next_charge_at, s.allowance_expiry, s.paused,
  s.cancelled, s.block_number, s.log_index, s.tx_hash`;

/** Existing allocations of `(module, subscriber)` pairs. */
export async function loadPairSubscriptions(q: Q, chainId: number, pairs: [string, string][]) {
  const rows = await q<SubRow[]>`
    select ${SUB_COLUMNS(q)} from subscriptions s
    where s.chain_id = ${chainId}
      and (s.module, s.subscriber) in (select * from unnest(${pairs.map((p) => p[0])}::text[], ${pairs.map((p) => p[1])}::text[]))`;
  return new Map(rows.map((r) => [r.subscription_id, fromRow(r)]));
}

/** States, block flags and plan terms of rows that carry their plan and block state. */
function withTerms(rows: (SubRow & { interval_s: string; grace_s: string; token: string; blocked: boolean })[]) {
  const subs = new Map<string, SubState>();
  const blocked = new Map<string, boolean>();
  const plans = new Map<string, PlanTerms>();
  for (const r of rows) {
    subs.set(r.subscription_id, fromRow(r));
    blocked.set(`${r.module}:${r.subscriber}`, r.blocked);
    plans.set(planKey(r.module, r.plan_id), {
      interval: Number(r.interval_s),
      grace: Number(r.grace_s),
      token: r.token,
    });
  }
  return { subs, blocked, plans };
}

/** Block state of `(module, subscriber)` pairs. */
export async function loadBlocked(q: Q, chainId: number, pairs: [string, string][]): Promise<Map<string, boolean>> {
  if (pairs.length === 0) return new Map();
  const rows = await q<{ module: string; subscriber: string; blocked: boolean }[]>`
    select module, subscriber, blocked from blocked_subscribers where chain_id = ${chainId}
      and (module, subscriber) in (select * from unnest(${pairs.map((p) => p[0])}::text[], ${pairs.map((p) => p[1])}::text[]))`;
  return new Map(rows.map((r) => [`${r.module}:${r.subscriber}`, r.blocked]));
}

/**
 * Seqs of the event log step by SEQ_BLOCK (migration 0015): a batch takes one value and numbers its own events inside
 * `[base, base + SEQ_BLOCK)` in chain order; every other writer takes one value per event.
 */
export const SEQ_BLOCK = 1n << 28n;

/** A fresh seq of the event log (the base of a block of SEQ_BLOCK seqs no one else uses). */
export async function reserveSeqBlock(q: Q): Promise<bigint> {
  const [row] = await q<{ s: string }[]>`select nextval(pg_get_serial_sequence('merchant_events', 'seq'))::text as s`;
  return BigInt(row!.s);
}

/**
 * Copies the activity events of the blocks above `ancestor` (all when null) into `merchant_events`, same seq and
 * id, their record as `data`: a rollback is about to delete their rows, and a withdrawn event stays in the log.
 */
export async function keepActivityEvents(q: Q, chainId: number, ancestor: bigint | null) {
  const rows = await q<EventRow[]>`
    select ${q.unsafe(EVENT_COLUMNS)} from event_log e
    where e.chain_id = ${chainId} and e.block_number > ${(ancestor ?? -1n).toString()} and not e.stored
      and e.seq is not null`;
  if (rows.length === 0) return;
  await q`
    insert into merchant_events (seq, id, chain_id, merchant, type, block_number, log_index, sub_index, ts, data,
      s_subscription_id, s_module, s_subscriber)
    overriding system value
    select u.seq, u.id, ${chainId}, u.merchant, u.type, u.bn, u.li, 0, u.ts, u.data::jsonb,
      u.sid, u.module, s.subscriber
    from unnest(${rows.map((r) => r.seq)}::bigint[], ${rows.map((r) => r.id)}::text[],
      ${rows.map((r) => r.merchant)}::text[], ${rows.map((r) => r.type)}::text[],
      ${rows.map((r) => String(r.block_number))}::bigint[], ${rows.map((r) => r.log_index)}::int[],
      ${rows.map((r) => r.ts.toISOString())}::timestamptz[], ${rows.map((r) => JSON.stringify(eventData(r)))}::text[],
      ${rows.map((r) => r.a_module)}::text[], ${rows.map((r) => String(r.a_subscription_id))}::numeric[])
      as u(seq, id, merchant, type, bn, li, ts, data, module, sid)
    -- The subscriber, which the activity record lacks, while its allocation still exists: a withdrawal names it.
    left join subscriptions s on s.chain_id = ${chainId} and s.module = u.module and s.subscription_id = u.sid`;
}

/** `<subscriptionId>:<instant>` of the expiries announced after `after` (ahead of the cursor, by an idle poll). */
export async function loadAnnounced(q: Q, chainId: number, after: number): Promise<Set<string>> {
  const rows = await q<{ subscription_id: string; t: string }[]>`
    select subscription_id, floor(extract(epoch from expires_at))::bigint as t from event_expiries
    where chain_id = ${chainId} and expires_at > to_timestamp(${after})`;
  return new Set(rows.map((r) => `${r.subscription_id}:${r.t}`));
}

/**
 * Paid allocations whose expiry instant (`last_paid_at + interval + grace + 1`) lies in `(after, until]`, not yet
 * announced, not in `skip` (filtered here: a batch's touched allocations are many). The due index bounds the scan:
 * `next_charge_at = last_paid_at + interval` once paid, so the instant is `next_charge_at + grace + 1` with grace at
 * most the chain's longest.
 */
export async function expiringBetween(q: Q, chainId: number, after: number, until: number, skip: Set<string>) {
  const rows = await q<(SubRow & { interval_s: string; grace_s: string; token: string; blocked: boolean })[]>`
    with g as (select coalesce(max(grace_s), 0) as max_grace from plans where chain_id = ${chainId})
    select ${SUB_COLUMNS(q)}, p.interval_s, p.grace_s, p.token, false as blocked
    from g, subscriptions s
    join plans p on p.chain_id = s.chain_id and p.module = s.module and p.plan_id = s.plan_id
    left join blocked_subscribers b on b.chain_id = s.chain_id and b.module = s.module and b.subscriber = s.subscriber
    where s.chain_id = ${chainId}
      and s.next_charge_at > ${after}::bigint - 1 - g.max_grace and s.next_charge_at <= ${until}::bigint - 1
      and s.times_executed > 0 and not s.paused and not s.cancelled and not coalesce(b.blocked, false)
      and s.last_paid_at + p.interval_s + p.grace_s + 1 > ${after}::bigint
      and s.last_paid_at + p.interval_s + p.grace_s + 1 <= ${until}::bigint
      and not exists (select 1 from event_expiries e where e.chain_id = s.chain_id
        and e.subscription_id = s.subscription_id::text
        and e.expires_at = to_timestamp(s.last_paid_at + p.interval_s + p.grace_s + 1))`;
  return withTerms(skip.size === 0 ? rows : rows.filter((r) => !skip.has(r.subscription_id)));
}

/**
 * Appends events (already in order) and records their expiries; returns the seq range written, or null. An event
 * with a `seq` keeps it (a batch's block of seqs); one without takes the next. `bulk` (a new batch whose events all
 * hold their seq): by COPY, or by a plain insert (PGlite), either way a repeated id fails instead of being skipped.
 */
export async function insertEvents(q: Q, chainId: number, events: NewEvent[], bulk: false | "copy" | "insert" = false) {
  if (events.length === 0) return null;
  const expiries = events.filter((e) => e.expiry);
  if (bulk && events.every((e) => e.seq !== undefined)) {
    // Not pipelined with the COPY: postgres.js may send a query's Bind only after describing it, by then amid the COPY.
    if (bulk === "copy") await copyNewEvents(q as Tx, chainId, events);
    else await appendNewEvents(q, chainId, events);
    if (expiries.length) await insertExpiries(q, chainId, expiries);
    const seqs = events.map((e) => e.seq!);
    return { fromSeq: seqs[0]!, toSeq: seqs.at(-1)! };
  }
  // Independent statements, pipelined on the connection.
  const [[r]] = await Promise.all([
    insertNewEvents(q, chainId, events),
    expiries.length ? insertExpiries(q, chainId, expiries) : [],
  ]);
  return r?.lo ? { fromSeq: BigInt(r.lo), toSeq: BigInt(r.hi!) } : null;
}

/** Records the expiries the events announce (each once). */
function insertExpiries(q: Q, chainId: number, expiries: NewEvent[]) {
  return q`
      insert into event_expiries (chain_id, subscription_id, expires_at, block_number)
      select ${chainId}, s, to_timestamp(t), b
      from unnest(${expiries.map((e) => e.expiry!.subscriptionId)}::text[],
        ${expiries.map((e) => e.expiry!.instant)}::bigint[],
        ${expiries.map((e) => e.blockNumber.toString())}::bigint[]) as x(s, t, b)
      on conflict do nothing`;
}

/**
 * The snapshot columns of `merchant_events` (migration 0035): name, the cast that reads it back from text (none for
 * text), and its value of a snapshot as text (null: SQL null).
 */
const SNAPSHOT_FIELDS: readonly [string, string, (s: SubSnapshot) => string | null][] = [
  ["s_subscription_id", "numeric(78,0)", (s) => s.state.subscriptionId],
  ["s_module", "", (s) => s.state.module],
  ["s_subscriber", "", (s) => s.state.subscriber],
  ["s_plan_id", "bigint", (s) => s.state.planId],
  ["s_max_executions", "bigint", (s) => s.state.maxExecutions],
  ["s_created_at", "bigint", (s) => String(s.state.createdAt)],
  ["s_times_executed", "bigint", (s) => String(s.state.timesExecuted)],
  ["s_total_spent", "numeric(78,0)", (s) => s.state.totalSpent.toString()],
  ["s_next_charge_at", "bigint", (s) => String(s.state.nextChargeAt)],
  ["s_allowance_expiry", "numeric(20,0)", (s) => s.state.allowanceExpiry],
  ["s_paused", "boolean", (s) => (s.state.paused ? "t" : "f")],
  ["s_cancelled", "boolean", (s) => (s.state.cancelled ? "t" : "f")],
  ["s_blocked", "boolean", (s) => (s.blocked ? "t" : "f")],
  ["s_status", "", (s) => s.status],
  ["s_previous_status", "", (s) => s.previous ?? null],
];

const SNAPSHOT_NAMES = SNAPSHOT_FIELDS.map(([name]) => name).join(", ");

/** The columns every writer of new events fills, in the order of their values. */
const NEW_EVENT_COLUMNS = `seq, id, chain_id, merchant, type, block_number, log_index, sub_index, ts, data, ${SNAPSHOT_NAMES}`;

/** The snapshot columns read back from text (`unnest` of text columns as `u`), in `NEW_EVENT_COLUMNS`' order. */
const SNAPSHOT_CASTS = SNAPSHOT_FIELDS.map(([name, cast]) => (cast ? `u.${name}::${cast}` : `u.${name}`)).join(", ");

const NO_SNAPSHOT = SNAPSHOT_FIELDS.map(() => "\\N").join("\t");

/** `data` (null) and the snapshot columns of a COPY row. */
const snapshotCopyText = (snap: SubSnapshot): string =>
  `\\N\t${SNAPSHOT_FIELDS.map(([, , value]) => value(snap) ?? "\\N").join("\t")}`;

/** The COPY text of numbered events (`copyNewEvents`); exported for the benchmarks. */
export function eventsCopyText(chainId: number, events: NewEvent[]): string {
  const lines = new Array<string>(events.length);
  // A batch's events come from few blocks, and their instants repeat.
  let lastTs = Number.NaN;
  let time = "";
  for (let i = 0; i < events.length; i++) {
    const e = events[i]!;
    if (e.ts !== lastTs) time = new Date((lastTs = e.ts) * 1000).toISOString();
    // Ids, addresses, type names, statuses and numbers never need escaping; the JSON might.
    const snap = e.snapshot;
    const tail = snap ? snapshotCopyText(snap) : `${copyText(JSON.stringify(e.data))}\t${NO_SNAPSHOT}`;
    lines[i] =
      `${e.seq}\t${e.id}\t${chainId}\t${e.merchant}\t${e.type}\t${e.blockNumber}\t${e.logIndex}\t${e.subIndex}\t` +
      `${time}\t${tail}\n`;
  }
  return lines.join("");
}

/** COPY of a backfill batch's numbered events (no ON CONFLICT: only for blocks never seen). */
async function copyNewEvents(tx: Tx, chainId: number, events: NewEvent[]) {
  await copyIn(
    tx,
    tx`copy merchant_events (${tx.unsafe(NEW_EVENT_COLUMNS)}) from stdin`,
    eventsCopyText(chainId, events),
  );
}

/** An event's `data` as stored: null for a snapshot (built when read). */
const storedData = (e: NewEvent) => (e.snapshot ? null : JSON.stringify(e.data));

/** The snapshot columns of `events`, as text[] expressions for an `unnest` (in `SNAPSHOT_NAMES`' order). */
const snapshotColumns = (q: Q, events: NewEvent[]) =>
  SNAPSHOT_FIELDS.map(([, , value]) =>
    textColumn(
      q,
      events.map((e) => (e.snapshot ? value(e.snapshot) : null)),
    ),
  ).reduce((all, c) => q`${all}, ${c}`);

/**
 * Numbered events of a new batch, as COPY writes them on a server (PGlite's bulk path): a plain insert, without
 * `on conflict` (a repeated id fails the batch; the cursor check keeps a batch from being applied twice), the
 * ordering (every row brings its seq) or the returned range.
 */
async function appendNewEvents(q: Q, chainId: number, events: NewEvent[]) {
  const c = textColumns(q, events, {
    seq: (e) => e.seq!.toString(),
    id: (e) => e.id,
    merchant: (e) => e.merchant,
    type: (e) => e.type,
    bn: (e) => e.blockNumber.toString(),
    li: (e) => String(e.logIndex),
    si: (e) => String(e.subIndex),
    ts: (e) => String(e.ts),
    data: storedData,
  });
  await q`
    insert into merchant_events (${q.unsafe(NEW_EVENT_COLUMNS)})
    overriding system value
    select u.seq::bigint, u.id, ${chainId}, u.merchant, u.type, u.bn::bigint, u.li::int, u.si::int,
      to_timestamp(u.ts::bigint), u.data::jsonb, ${q.unsafe(SNAPSHOT_CASTS)}
    from unnest(${c.seq}, ${c.id}, ${c.merchant}, ${c.type}, ${c.bn}, ${c.li}, ${c.si}, ${c.ts}, ${c.data},
      ${snapshotColumns(q, events)})
      as u(seq, id, merchant, type, bn, li, si, ts, data, ${q.unsafe(SNAPSHOT_NAMES)})`;
}

function insertNewEvents(q: Q, chainId: number, events: NewEvent[]) {
  return q<{ lo: string | null; hi: string | null }[]>`
    with ins as (
      insert into merchant_events (${q.unsafe(NEW_EVENT_COLUMNS)})
      overriding system value
      select coalesce(u.seq, nextval(pg_get_serial_sequence('merchant_events', 'seq'))), u.id, ${chainId}, u.merchant,
        u.type, u.bn, u.li, u.si, to_timestamp(u.ts), u.data::jsonb, ${q.unsafe(SNAPSHOT_CASTS)}
      from unnest(${events.map((e) => e.seq?.toString() ?? null)}::bigint[], ${events.map((e) => e.id)}::text[],
        ${events.map((e) => e.merchant)}::text[], ${events.map((e) => e.type)}::text[],
        ${events.map((e) => e.blockNumber.toString())}::bigint[], ${events.map((e) => e.logIndex)}::int[],
        ${events.map((e) => e.subIndex)}::int[], ${events.map((e) => e.ts)}::bigint[],
        ${events.map(storedData)}::text[], ${snapshotColumns(q, events)})
        with ordinality as u(seq, id, merchant, type, bn, li, si, ts, data, ${q.unsafe(SNAPSHOT_NAMES)}, n)
      order by u.n
      on conflict (id) do nothing
      returning seq)
    select min(seq)::text as lo, max(seq)::text as hi from ins`;
}

/**
 * An event of `event_log e` that still stands: no `event.reverted` withdrew it (webhooks.md §1). What replay,
 * redeliver and the dispatcher's claim each check before sending an event.
 */
export const standing = (q: Q) => q`e.reverted_by is null`;

/**
 * The allocation and subscriber a row of `merchant_events` concerns (`allocation_id`, `user_address`; null for an
 * event without a subscriber): from its snapshot columns (a subscription event, or an activity event kept by a
 * rollback), else from its stored record (a subscription or renewal record, an MRR movement's `customer`).
 */
const withdrawnSubject = (q: Q) => q`
  coalesce(
    case when s_subscription_id is not null then chain_id || ':' || s_module || ':' || s_subscription_id end,
    data->'object'->>'allocation_id', data->'object'->'allocation_ids'->>0) as allocation_id,
  lower(coalesce(s_subscriber, data->'object'->>'user_address', data->'object'->>'customer')) as user_address`;

/**
 * Withdraws the events of the blocks above `ancestor` (all when null): each gets an `event.reverted` after it in
 * the log (naming its id, type, block, and the chain, allocation and subscriber it concerned), and its `reverted_by`
 * set. Returns the seq range of the `event.reverted` events, or null.
 */
export async function withdrawAbove(q: Q, chainId: number, ancestor: bigint | null) {
  const above = ancestor === null ? -1n : ancestor;
  // A revert names the removed block, and its time is when the reorg was seen, never before the event it withdraws
  // (a dev chain's clock can run ahead of the wall clock): a receiver ordering by time puts it after that event.
  const rows = await q<{ lo: string | null; hi: string | null }[]>`
    with gone as (
      select seq, id, merchant, type, block_number, ts, ${withdrawnSubject(q)} from merchant_events
      where chain_id = ${chainId} and block_number > ${above.toString()} and reverted_by is null
        and type not in ('event.reverted', 'webhook.test')
        -- Observations of an evaluation (renewals.md §4): the next evaluation on the new branch decides.
        and type not in ('subscription.renewal_at_risk', 'subscription.renewal_recovered')
      order by seq),
    ins as (
      insert into merchant_events (id, chain_id, merchant, type, block_number, log_index, sub_index, ts, data)
      select 'evt_' || substr(encode(sha256(convert_to('reverted|' || g.id, 'UTF8')), 'hex'), 1, 40), ${chainId},
        g.merchant, 'event.reverted', g.block_number, 2147483647, 0, greatest(now(), g.ts),
        jsonb_build_object('object', jsonb_build_object('id', g.id, 'type', g.type,
          'block_number', g.block_number::text,
          'chain_id', case when g.allocation_id is not null then ${chainId}::int end,
          'allocation_id', g.allocation_id, 'user_address', g.user_address))
      from gone g order by g.seq
      on conflict (id) do nothing
      returning seq, id, data),
    upd as (
      update merchant_events m set reverted_by = i.id from ins i
      where m.id = i.data->'object'->>'id')
    select min(seq) as lo, max(seq) as hi from ins`;
  await q`delete from event_expiries where chain_id = ${chainId} and block_number > ${above.toString()}`;
  const r = rows[0];
  return r?.lo ? { fromSeq: BigInt(r.lo), toSeq: BigInt(r.hi!) } : null;
}
