import type { Sql } from "../db/client";
import { copyIn, copyText, textColumns, type Q, type Tx } from "../db/query";
import { cursorStamp } from "../db/notify";
import { fromRow, type SubRow } from "../db/rows";
import type { ChainEvent } from "../domain/chain-event";
import { planKey, type PlanInfo, type SubState } from "../domain/subscription";
import type { DecodedEvent } from "./decode";
import type { ActivityRow, BlockedRow, ModuleRow, PlanRow } from "./derive";
import type { Header } from "../chain/rpc";
import type { TokenMeta } from "./tokens";

/** The indexed position: last committed block, its hash and timestamp (unix seconds). */
export type Cursor = { block: bigint; hash: string; time: number };

const iso = (unix: number) => new Date(unix * 1000).toISOString();

/** `iso` for long runs of rows from the same few blocks. */
function isoCached(): (unix: number) => string {
  let last = Number.NaN;
  let text = "";
  return (unix) => (unix === last ? text : ((last = unix), (text = iso(unix))));
}

const str = (v: bigint | number) => v.toString();

/** Creates the chain's row if missing and returns what it holds (`processor` null: a permission-only chain). */
export async function ensureChain(
  sql: Sql,
  chainId: number,
  processor: string | null,
  startBlock: bigint,
): Promise<{ processor: string | null; startBlock: bigint; cursor: Cursor | null }> {
  await sql`insert into chains (chain_id, processor, start_block)
    values (${chainId}, ${processor}, ${str(startBlock)}) on conflict (chain_id) do nothing`;
  const [row] = await sql<{ processor: string | null; start_block: string }[]>`
    select processor, start_block from chains where chain_id = ${chainId}`;
  return { processor: row!.processor, startBlock: BigInt(row!.start_block), cursor: await loadCursor(sql, chainId) };
}

/** The committed cursor, or null before the first batch. */
export async function loadCursor(q: Q, chainId: number, forUpdate = false): Promise<Cursor | null> {
  const rows = await q<{ indexed_block: string | null; indexed_hash: string | null; indexed_time: Date | null }[]>`
    select indexed_block, indexed_hash, indexed_time from chains where chain_id = ${chainId}
    ${forUpdate ? q`for update` : q``}`;
  const row = rows[0];
  if (!row || row.indexed_block === null) return null;
  return {
    block: BigInt(row.indexed_block),
    hash: row.indexed_hash ?? "",
    time: row.indexed_time ? Math.floor(row.indexed_time.getTime() / 1000) : 0,
  };
}

/** The cursor and the newest head the leader recorded (what a standby reports). */
export async function loadProgress(q: Q, chainId: number): Promise<{ cursor: Cursor | null; head: bigint | null }> {
  const [row] = await q<{ head_block: string | null }[]>`select head_block from chains where chain_id = ${chainId}`;
  return { cursor: await loadCursor(q, chainId), head: row?.head_block ? BigInt(row.head_block) : null };
}

/** In-memory views of small, append-only tables: modules (address → merchant), plans, token addresses. */
export async function loadCaches(q: Q, chainId: number) {
  const modules = new Map<string, string>();
  for (const r of await q<{ address: string; merchant: string }[]>`
    select address, merchant from modules where chain_id = ${chainId}`) {
    modules.set(r.address, r.merchant);
  }
  const plans = new Map<string, PlanInfo>();
  for (const r of await q<{ module: string; plan_id: string; token: string; interval_s: string; grace_s: string }[]>`
    select module, plan_id, token, interval_s, grace_s from plans where chain_id = ${chainId}`) {
    plans.set(planKey(r.module, r.plan_id), {
      token: r.token,
      interval: Number(r.interval_s),
      grace: Number(r.grace_s),
    });
  }
  const tokens = new Set(
    (await q<{ address: string }[]>`select address from tokens where chain_id = ${chainId}`).map((r) => r.address),
  );
  return { modules, plans, tokens };
}

/** Bulk-loads decoded logs with COPY (Postgres). */
export async function copyEvents(tx: Tx, chainId: number, events: DecodedEvent[]): Promise<void> {
  if (events.length === 0) return;
  const lines = new Array<string>(events.length);
  const time = isoCached();
  for (let i = 0; i < events.length; i++) {
    const e = events[i]!;
    // Hashes, addresses, decimal numbers and event names never need escaping; the JSON arguments might.
    lines[i] =
      `${chainId}\t${e.blockNumber}\t${e.logIndex}\t${e.txHash}\t${e.blockHash}\t${time(e.blockTime!)}\t` +
      `${e.address}\t${e.name}\t${e.subscriptionId ?? "\\N"}\t${copyText(JSON.stringify(e.args))}\n`;
  }
  await copyIn(
    tx,
    tx`copy events (chain_id, block_number, log_index, tx_hash, block_hash, block_time, address, name, subscription_id,
      args) from stdin`,
    lines.join(""),
  );
}

/** Bulk-loads activity records with COPY (Postgres). */
export async function copyActivity(tx: Tx, chainId: number, rows: ActivityRow[]): Promise<void> {
  if (rows.length === 0) return;
  const lines = new Array<string>(rows.length);
  const time = isoCached();
  for (let i = 0; i < rows.length; i++) {
    const r = rows[i]!;
    // Every field is a hash, an address, a decimal number or a fixed name: nothing to escape, only nulls.
    lines[i] =
      `${chainId}\t${r.blockNumber}\t${r.logIndex}\t${r.txHash}\t${r.blockHash}\t${time(r.blockTime)}\t${r.merchant}\t` +
      `${r.module}\t${r.subscriptionId}\t${r.type}\t${r.token ?? "\\N"}\t${r.amount}\t${r.fee ?? "\\N"}\t` +
      `${r.reason ?? "\\N"}\t${r.keeper}\t${r.eventSeq ?? "\\N"}\t${r.permissionHash ?? "\\N"}\t` +
      `${r.periodStart ?? "\\N"}\t${r.periodEnd ?? "\\N"}\n`;
  }
  await copyIn(
    tx,
    tx`copy activity (chain_id, block_number, log_index, tx_hash, block_hash, block_time, merchant, module,
      subscription_id, type, token, amount, fee, reason, keeper, event_seq, permission_hash, period_start,
      period_end) from stdin`,
    lines.join(""),
  );
}

/**
 * Inserts decoded logs (PGlite's bulk path). Like COPY, a repeated row fails the batch instead of being skipped:
 * `on conflict` costs PGlite ~20 % of the insert, and the cursor check keeps a batch from being applied twice.
 * Block times go as unix seconds (`to_timestamp`): PGlite parses 100,000 ISO timestamps in ~130 ms, these in ~50.
 */
export async function insertEvents(q: Q, chainId: number, events: DecodedEvent[]): Promise<void> {
  if (events.length === 0) return;
  const c = textColumns(q, events, {
    bn: (e) => e.blockNumber.toString(),
    li: (e) => String(e.logIndex),
    tx: (e) => e.txHash,
    bh: (e) => e.blockHash,
    bt: (e) => String(e.blockTime!),
    addr: (e) => e.address,
    name: (e) => e.name,
    sid: (e) => e.subscriptionId,
    args: (e) => JSON.stringify(e.args),
  });
  await q`insert into events (chain_id, block_number, log_index, tx_hash, block_hash, block_time, address, name,
      subscription_id, args)
    select ${chainId}, bn::bigint, li::integer, tx, bh, to_timestamp(bt::bigint), addr, name, sid::numeric, args::jsonb
    from unnest(${c.bn}, ${c.li}, ${c.tx}, ${c.bh}, ${c.bt}, ${c.addr}, ${c.name}, ${c.sid}, ${c.args})
      as u(bn, li, tx, bh, bt, addr, name, sid, args)`;
}

/** Inserts new modules. */
export async function insertModules(q: Q, chainId: number, rows: ModuleRow[]): Promise<void> {
  if (rows.length === 0) return;
  await q`insert into modules (chain_id, address, merchant, block_number, log_index, tx_hash)
    select ${chainId}, a, m, bn::bigint, li::integer, tx
    from unnest(${rows.map((r) => r.address)}::text[], ${rows.map((r) => r.merchant)}::text[],
      ${rows.map((r) => str(r.blockNumber))}::text[], ${rows.map((r) => str(r.logIndex))}::text[],
      ${rows.map((r) => r.txHash)}::text[]) as u(a, m, bn, li, tx)
    on conflict (chain_id, address) do nothing`;
}

/** Inserts new plans. */
export async function insertPlans(q: Q, chainId: number, rows: PlanRow[]): Promise<void> {
  if (rows.length === 0) return;
  await q`insert into plans (chain_id, module, plan_id, token, amount, interval_s, grace_s, block_number, log_index)
    select ${chainId}, m, p::bigint, t, a::numeric, i::bigint, g::bigint, bn::bigint, li::integer
    from unnest(${rows.map((r) => r.module)}::text[], ${rows.map((r) => r.planId)}::text[],
      ${rows.map((r) => r.token)}::text[], ${rows.map((r) => r.amount)}::text[],
      ${rows.map((r) => str(r.interval))}::text[],
      ${rows.map((r) => str(r.grace))}::text[], ${rows.map((r) => str(r.blockNumber))}::text[],
      ${rows.map((r) => str(r.logIndex))}::text[]) as u(m, p, t, a, i, g, bn, li)
    on conflict (chain_id, module, plan_id) do nothing`;
}

/** Inserts token metadata read from the chain (first read wins). */
export async function insertTokens(q: Q, chainId: number, rows: TokenMeta[]): Promise<void> {
  if (rows.length === 0) return;
  await q`insert into tokens (chain_id, address, symbol, decimals)
    select ${chainId}, a, s, d::integer
    from unnest(${rows.map((r) => r.address)}::text[], ${rows.map((r) => r.symbol)}::text[],
      ${rows.map((r) => (r.decimals === null ? null : String(r.decimals)))}::text[]) as u(a, s, d)
    on conflict (chain_id, address) do nothing`;
}

/** Loads the current rows of the given allocations. */
export async function loadSubscriptions(q: Q, chainId: number, ids: string[]): Promise<Map<string, SubState>> {
  const out = new Map<string, SubState>();
  if (ids.length === 0) return out;
  const rows = await q<SubRow[]>`
    select subscription_id, module, merchant, subscriber, plan_id, max_executions, times_executed, total_spent,
      created_at, last_paid_at, next_charge_at, allowance_expiry, paused, cancelled, block_number, log_index, tx_hash
    from subscriptions where chain_id = ${chainId} and subscription_id = any(${ids}::text[]::numeric[])`;
  for (const r of rows) out.set(r.subscription_id, fromRow(r));
  return out;
}

/** Writes the final state of created or changed allocations in one statement (rows passed as one JSON array). */
export async function upsertSubscriptions(q: Q, chainId: number, subs: SubState[]): Promise<void> {
  if (subs.length === 0) return;
  const rows = JSON.stringify(
    subs.map((s) => [
      s.subscriptionId,
      s.module,
      s.merchant,
      s.subscriber,
      s.planId,
      s.maxExecutions,
      s.timesExecuted,
      s.totalSpent.toString(),
      s.createdAt,
      s.lastPaidAt,
      s.nextChargeAt,
      s.allowanceExpiry,
      s.paused,
      s.cancelled,
      s.blockNumber.toString(),
      s.logIndex,
      s.txHash,
    ]),
  );
  await q`insert into subscriptions (chain_id, subscription_id, module, merchant, subscriber, plan_id, max_executions,
      times_executed, total_spent, created_at, last_paid_at, next_charge_at, allowance_expiry, paused, cancelled,
      block_number, log_index, tx_hash)
    select ${chainId}, (r->>0)::numeric, r->>1, r->>2, r->>3, (r->>4)::bigint, (r->>5)::bigint, (r->>6)::bigint,
      (r->>7)::numeric, (r->>8)::bigint, (r->>9)::bigint, (r->>10)::bigint, (r->>11)::numeric, (r->>12)::boolean,
      (r->>13)::boolean, (r->>14)::bigint, (r->>15)::integer, r->>16
    from jsonb_array_elements(${rows}::text::jsonb) as r
    on conflict (chain_id, subscription_id) do update set
      times_executed = excluded.times_executed, total_spent = excluded.total_spent,
      last_paid_at = excluded.last_paid_at, next_charge_at = excluded.next_charge_at,
      allowance_expiry = excluded.allowance_expiry, paused = excluded.paused, cancelled = excluded.cancelled`;
}

/** Writes the latest block state of each (module, subscriber) the batch touched. */
export async function upsertBlocked(q: Q, chainId: number, rows: BlockedRow[]): Promise<void> {
  if (rows.length === 0) return;
  await q`insert into blocked_subscribers (chain_id, module, subscriber, blocked, block_number, log_index)
    select ${chainId}, m, s, b::boolean, bn::bigint, li::integer
    from unnest(${rows.map((r) => r.module)}::text[], ${rows.map((r) => r.subscriber)}::text[],
      ${rows.map((r) => (r.blocked ? "t" : "f"))}::text[], ${rows.map((r) => str(r.blockNumber))}::text[],
      ${rows.map((r) => str(r.logIndex))}::text[]) as u(m, s, b, bn, li)
    on conflict (chain_id, module, subscriber) do update set
      blocked = excluded.blocked, block_number = excluded.block_number, log_index = excluded.log_index`;
}

/** Inserts activity records (CHARGE, FAIL, REFILL); as {@link insertEvents}, a repeated row fails the batch. */
export async function insertActivity(q: Q, chainId: number, rows: ActivityRow[]): Promise<void> {
  if (rows.length === 0) return;
  const c = textColumns(q, rows, {
    bn: (r) => r.blockNumber.toString(),
    li: (r) => String(r.logIndex),
    tx: (r) => r.txHash,
    bh: (r) => r.blockHash,
    bt: (r) => String(r.blockTime),
    mer: (r) => r.merchant,
    mod: (r) => r.module,
    sid: (r) => r.subscriptionId,
    type: (r) => r.type,
    token: (r) => r.token,
    amount: (r) => r.amount,
    fee: (r) => r.fee,
    reason: (r) => r.reason,
    keeper: (r) => r.keeper,
    eseq: (r) => r.eventSeq ?? null,
    ph: (r) => r.permissionHash ?? null,
    ps: (r) => (r.periodStart === undefined ? null : String(r.periodStart)),
    pe: (r) => (r.periodEnd === undefined ? null : String(r.periodEnd)),
  });
  await q`insert into activity (chain_id, block_number, log_index, tx_hash, block_hash, block_time, merchant, module,
      subscription_id, type, token, amount, fee, reason, keeper, event_seq, permission_hash, period_start, period_end)
    select ${chainId}, bn::bigint, li::integer, tx, bh, to_timestamp(bt::bigint), mer, mod, sid::numeric, type, token,
      amount::numeric, fee::numeric, reason, keeper, eseq::bigint, ph, ps::bigint, pe::bigint
    from unnest(${c.bn}, ${c.li}, ${c.tx}, ${c.bh}, ${c.bt}, ${c.mer}, ${c.mod}, ${c.sid}, ${c.type}, ${c.token},
      ${c.amount}, ${c.fee}, ${c.reason}, ${c.keeper}, ${c.eseq}, ${c.ph}, ${c.ps}, ${c.pe})
      as u(bn, li, tx, bh, bt, mer, mod, sid, type, token, amount, fee, reason, keeper, eseq, ph, ps, pe)`;
}

/** Stores hashes of recent blocks and forgets those older than the reorg window. */
export async function saveBlocks(q: Q, chainId: number, headers: Header[], keepAbove: bigint): Promise<void> {
  if (headers.length > 0) {
    await q`insert into blocks (chain_id, number, hash, parent_hash, timestamp)
      select ${chainId}, n::bigint, h, p, t::timestamptz
      from unnest(${headers.map((h) => str(h.number))}::text[], ${headers.map((h) => h.hash)}::text[],
        ${headers.map((h) => h.parentHash)}::text[], ${headers.map((h) => iso(h.timestamp))}::text[]) as u(n, h, p, t)
      on conflict (chain_id, number) do update set
        hash = excluded.hash, parent_hash = excluded.parent_hash, timestamp = excluded.timestamp`;
  }
  await q`delete from blocks where chain_id = ${chainId} and number <= ${str(keepAbove)}`;
}

/**
 * Moves the cursor (and records the head seen, the backfill rate, a rollback's depth, whether the batch stopped
 * short of the head) in the batch's transaction; returns its stamp (`cursorStamp`).
 */
export async function moveCursor(
  q: Q,
  chainId: number,
  cursor: Cursor | null,
  head: bigint,
  also: { blocksPerSec?: number | null; reorgDepth?: bigint; catchingUp?: boolean } = {},
): Promise<string> {
  const rate = also.blocksPerSec === undefined ? q`` : q`, sync_blocks_per_s = ${also.blocksPerSec}`;
  const catching = also.catchingUp === undefined ? q`` : q`, catching_up = ${also.catchingUp}`;
  const reorg =
    also.reorgDepth === undefined ? q`` : q`, last_reorg_at = now(), last_reorg_depth = ${str(also.reorgDepth)}`;
  const [row] = await q<{ stamp: string }[]>`update chains set
      indexed_block = ${cursor ? str(cursor.block) : null}, indexed_hash = ${cursor?.hash ?? null},
      indexed_time = ${cursor ? iso(cursor.time) : null}, head_block = ${str(head)}, head_seen_at = now(),
      updated_at = now() ${rate} ${reorg} ${catching}
    where chain_id = ${chainId}
    returning ${cursorStamp(q)} as stamp`;
  return row!.stamp;
}

/** Records the newest head observed when there was nothing to index. */
export async function touchHead(q: Q, chainId: number, head: bigint, cuPerHour?: number | null): Promise<void> {
  await q`update chains set head_block = ${str(head)}, head_seen_at = now(),
    rpc_cu_per_hour = ${cuPerHour === undefined ? q`rpc_cu_per_hour` : cuPerHour} where chain_id = ${chainId}`;
}

/** Records (or clears) that a deep reorg is suspected but not yet acted on, for every process's /readyz. */
export async function markDeepReorg(q: Q, chainId: number, suspected: boolean): Promise<void> {
  await q`update chains set deep_reorg_suspected_at = ${suspected ? q`coalesce(deep_reorg_suspected_at, now())` : null}
    where chain_id = ${chainId}`;
}

/** Stored recent block hashes, newest first. */
export async function loadBlocks(q: Q, chainId: number): Promise<{ number: bigint; hash: string; time: number }[]> {
  const rows = await q<{ number: string; hash: string; timestamp: Date }[]>`
    select number, hash, timestamp from blocks where chain_id = ${chainId} order by number desc`;
  return rows.map((r) => ({ number: BigInt(r.number), hash: r.hash, time: Math.floor(r.timestamp.getTime() / 1000) }));
}

type EventDbRow = {
  block_number: string;
  log_index: number;
  tx_hash: string;
  block_hash: string;
  block_time: Date;
  address: string;
  name: string;
  subscription_id: string | null;
  args: Record<string, string | number | boolean>;
};

/** Converts a stored `events` row back to the shape the reducers use. */
function eventFromRow(r: EventDbRow): ChainEvent {
  return {
    blockNumber: BigInt(r.block_number),
    logIndex: r.log_index,
    txHash: r.tx_hash,
    blockHash: r.block_hash,
    blockTime: Math.floor(r.block_time.getTime() / 1000),
    address: r.address,
    name: r.name,
    subscriptionId: r.subscription_id,
    args: r.args,
  };
}

/**
 * The logs that shaped the given allocations' rows, in chain order: their stored `events` and their charges, each
 * `ChargeSucceeded` rebuilt from its `activity` row with the arguments it was decoded with. Failed charges and
 * refills are left out: they change no allocation row (`applyToSubscription`).
 */
export async function loadSubscriptionEvents(q: Q, chainId: number, ids: string[]): Promise<ChainEvent[]> {
  if (ids.length === 0) return [];
  const rows = await q<EventDbRow[]>`
    select block_number, log_index, tx_hash, block_hash, block_time, address, name, subscription_id, args
    from events where chain_id = ${chainId} and subscription_id = any(${ids}::text[]::numeric[])
    union all
    select a.block_number, a.log_index, a.tx_hash, a.block_hash, a.block_time, c.processor, 'ChargeSucceeded',
      a.subscription_id, jsonb_build_object('module', a.module, 'subscriptionId', a.subscription_id::text,
        'keeper', a.keeper, 'token', a.token, 'amount', a.amount::text, 'fee', a.fee::text)
    from activity a join chains c on c.chain_id = a.chain_id
    where a.chain_id = ${chainId} and a.subscription_id = any(${ids}::text[]::numeric[]) and a.type = 'CHARGE'
    order by block_number, log_index`;
  return rows.map(eventFromRow);
}
