/**
 * The `spend_permissions` table as a fold of the manager's logs (spend-permissions spec §6.2, §7): Approved creates
 * a row, Used charges it (and is its CHARGE activity row), Revoked ends it. Derived from cached state while a backfill
 * pipelines its batches, and replayed from `events` and `activity` after a rollback, as `subscriptions` is.
 */
import type { Q } from "../db/query";
import { SPEND_PERMISSION_LOGS, type ChainEvent } from "../domain/chain-event";
import {
  applyRevoked,
  applyUsed,
  permissionFromApproved,
  type PermissionState,
  type RevokedBy,
} from "../domain/spend-permission";
import type { PermissionColumns } from "../domain/spend-permission-record";
import type { ActivityRow } from "./derive";
import type { DecodedEvent } from "./decode";
import { insertEvents } from "./store";

/** One row of `spend_permissions`: the state and where it comes from. */
export type PermissionRow = PermissionState & {
  subscriptionId: string;
  hash: string;
  manager: string;
  blockNumber: bigint;
  logIndex: number;
  txHash: string;
  /** Unix seconds of the Approved log's block. */
  createdAt: number;
  revokedBlock: bigint | null;
  revokedLogIndex: number | null;
};

/**
 * What a batch changes of the permissions: their final rows, the CHARGE rows of Used logs, and the Approved logs found
 * before the start block for its orphan Used logs (stored in `events` with it).
 */
export type PermissionRows = {
  permissions: PermissionRow[];
  activity: ActivityRow[];
  orphans: number;
  earlierApprovals?: ChainEvent[];
};

/** Ids (uint256 of the hash) of permissions a batch touches without approving them in it: they are loaded first. */
export function permissionsToLoad(events: readonly ChainEvent[]): string[] {
  const approved = new Set<string>();
  const needed = new Set<string>();
  for (const ev of events) {
    if (ev.name === "SpendPermissionApproved") approved.add(ev.subscriptionId!);
    else if (
      (ev.name === "SpendPermissionUsed" || ev.name === "SpendPermissionRevoked") &&
      !approved.has(ev.subscriptionId!)
    ) {
      needed.add(ev.subscriptionId!);
    }
  }
  return [...needed];
}

function fromApproved(ev: ChainEvent): PermissionRow {
  const a = ev.args;
  return {
    ...permissionFromApproved({
      account: String(a.account) as `0x${string}`,
      spender: String(a.spender) as `0x${string}`,
      token: String(a.token) as `0x${string}`,
      allowance: BigInt(String(a.allowance)),
      period: Number(a.period),
      start: Number(a.start),
      end: Number(a.end),
      salt: BigInt(String(a.salt)),
      extraData: String(a.extraData) as `0x${string}`,
    }),
    subscriptionId: ev.subscriptionId!,
    hash: String(a.hash),
    manager: ev.address,
    blockNumber: ev.blockNumber,
    logIndex: ev.logIndex,
    txHash: ev.txHash,
    createdAt: ev.blockTime,
    revokedBlock: null,
    revokedLogIndex: null,
  };
}

/**
 * Applies one manager log to `perms` (in place); returns the CHARGE row of a Used log, or null. An Approved of a
 * known hash (the manager emits at most one), a Revoked or Used of an unknown one change nothing.
 */
export function applyPermissionLog(perms: Map<string, PermissionRow>, ev: ChainEvent): ActivityRow | null | "orphan" {
  const id = ev.subscriptionId!;
  const p = perms.get(id);
  switch (ev.name) {
    case "SpendPermissionApproved":
      if (!p) perms.set(id, fromApproved(ev));
      return null;
    case "SpendPermissionRevoked":
      if (!p || p.revoked) return null;
      applyRevoked(p, (String(ev.args.revokedBy ?? "unknown") as RevokedBy) ?? "unknown", ev.blockTime);
      p.revokedBlock = ev.blockNumber;
      p.revokedLogIndex = ev.logIndex;
      return null;
    case "SpendPermissionUsed": {
      if (!p) return "orphan";
      const a = ev.args;
      const periodStart = Number(a.periodStart);
      const periodEnd = Number(a.periodEnd);
      applyUsed(p, { start: periodStart, end: periodEnd, spend: BigInt(String(a.value)) });
      return {
        blockNumber: ev.blockNumber,
        logIndex: ev.logIndex,
        txHash: ev.txHash,
        blockHash: ev.blockHash,
        blockTime: ev.blockTime,
        merchant: String(a.spender),
        module: ev.address,
        subscriptionId: id,
        type: "CHARGE",
        token: String(a.token),
        amount: String(a.value),
        fee: "0",
        reason: null,
        keeper: String(a.spender),
        permissionHash: String(a.hash),
        periodStart,
        periodEnd,
      };
    }
  }
  return null;
}

/** Folds a batch's manager logs over `perms` (the rows `permissionsToLoad` named, loaded); `perms` is updated. */
export function derivePermissions(events: readonly ChainEvent[], perms: Map<string, PermissionRow>): PermissionRows {
  const out: PermissionRows = { permissions: [], activity: [], orphans: 0 };
  const changed = new Set<string>();
  for (const ev of events) {
    if (!SPEND_PERMISSION_LOGS.has(ev.name)) continue;
    const row = applyPermissionLog(perms, ev);
    if (row === "orphan") out.orphans++;
    else if (row) out.activity.push(row);
    if (perms.has(ev.subscriptionId!)) changed.add(ev.subscriptionId!);
  }
  // Copies: a later batch keeps folding into the cached objects while this one may still be writing.
  out.permissions = [...changed].map((id) => ({ ...perms.get(id)! }));
  return out;
}

// Cached permission states, one map per allocation cache of the indexer state: when the state drops its cache (a
// failed write, a rollback, new leadership), this one goes with it and rows are loaded again.
const caches = new WeakMap<object, Map<string, PermissionRow>>();

/**
 * A batch's permission rows, derived from the cache tied to `owner` (loading the permissions it lacks from `q`); the
 * cache moves forward at once, as the allocation cache does.
 */
export async function derivePermissionRows(
  q: Q,
  chainId: number,
  owner: object,
  events: readonly ChainEvent[],
  earlier?: (hashes: string[]) => Promise<ChainEvent[]>,
): Promise<PermissionRows | undefined> {
  if (!events.some((e) => SPEND_PERMISSION_LOGS.has(e.name))) return undefined;
  let cache = caches.get(owner);
  if (!cache) caches.set(owner, (cache = new Map()));
  const missing = permissionsToLoad(events).filter((id) => !cache.has(id));
  for (const [id, p] of await loadPermissions(q, chainId, missing)) cache.set(id, p);
  // Used logs of permissions approved before the start block: their Approved is looked up and applied first. A
  // permission approved earlier in the same batch (Base Pay's first charge: Approved and Used in one transaction)
  // is no orphan.
  const approvedHere = new Set<string>();
  const orphans = new Set<string>();
  for (const e of events) {
    if (e.name === "SpendPermissionApproved") approvedHere.add(e.subscriptionId!);
    else if (e.name === "SpendPermissionUsed" && !cache.has(e.subscriptionId!) && !approvedHere.has(e.subscriptionId!))
      orphans.add(String(e.args.hash));
  }
  const found = earlier && orphans.size > 0 ? await earlier([...orphans]) : [];
  const approvals = found.filter((e) => !cache.has(e.subscriptionId!));
  const out = derivePermissions([...approvals, ...events], cache);
  if (approvals.length > 0) out.earlierApprovals = approvals;
  return out;
}

/** Writes a batch's permission rows (and the earlier Approved logs its orphans needed, into `events`). */
export async function writePermissions(q: Q, chainId: number, rows: PermissionRows): Promise<void> {
  if (rows.earlierApprovals?.length) await insertEvents(q, chainId, rows.earlierApprovals as DecodedEvent[]);
  await upsertPermissions(q, chainId, rows.permissions);
}

/** A stored row as the indexer reads it back. */
type PermissionDbRow = PermissionColumns & {
  revoked_at: Date | null;
  revoked_block: string | null;
  revoked_log_index: number | null;
  block_number: string;
  log_index: number;
  tx_hash: string;
  created_at: Date;
};

/** A stored row as the fold's state. */
export function permissionFromRow(r: PermissionDbRow): PermissionRow {
  return {
    account: r.subscriber as `0x${string}`,
    spender: r.merchant as `0x${string}`,
    token: r.token as `0x${string}`,
    allowance: BigInt(r.allowance),
    period: Number(r.period_s),
    start: Number(r.start_s),
    end: Number(r.end_s),
    salt: BigInt(r.salt),
    extraData: r.extra_data as `0x${string}`,
    timesExecuted: r.times_executed,
    totalSpent: BigInt(r.total_spent),
    paidThrough: Number(r.last_period_end),
    lastPeriod:
      r.last_period_start === null
        ? null
        : {
            start: Number(r.last_period_start),
            end: Number(r.last_period_end),
            spend: BigInt(r.last_period_spent ?? 0),
          },
    nextChargeAt: Number(r.next_charge_at),
    revoked: r.revoked,
    revokedBy: r.revoked_by,
    revokedAt: r.revoked_at ? Math.floor(r.revoked_at.getTime() / 1000) : null,
    subscriptionId: r.subscription_id,
    hash: r.hash,
    manager: r.manager,
    blockNumber: BigInt(r.block_number),
    logIndex: r.log_index,
    txHash: r.tx_hash,
    createdAt: Math.floor(r.created_at.getTime() / 1000),
    revokedBlock: r.revoked_block === null ? null : BigInt(r.revoked_block),
    revokedLogIndex: r.revoked_log_index,
  };
}

/** The stored permissions among `ids`. */
export async function loadPermissions(q: Q, chainId: number, ids: string[]): Promise<Map<string, PermissionRow>> {
  const out = new Map<string, PermissionRow>();
  if (ids.length === 0) return out;
  const rows = await q<PermissionDbRow[]>`
    select subscription_id::text, hash, manager, merchant, subscriber, token, allowance::text, period_s, start_s,
      end_s, salt::text, extra_data, times_executed, total_spent::text, last_period_start, last_period_end,
      last_period_spent::text, next_charge_at, revoked, revoked_by, revoked_at, revoked_block, revoked_log_index,
      block_number, log_index, tx_hash, created_at
    from spend_permissions where chain_id = ${chainId} and subscription_id = any(${ids}::text[]::numeric[])`;
  for (const r of rows) out.set(r.subscription_id, permissionFromRow(r));
  return out;
}

const iso = (unix: number) => new Date(unix * 1000).toISOString();

/** Inserts or replaces permission rows. */
export async function upsertPermissions(q: Q, chainId: number, rows: PermissionRow[]): Promise<void> {
  for (const r of rows) {
    await q`insert into spend_permissions (chain_id, subscription_id, hash, manager, merchant, subscriber, token,
        allowance, period_s, start_s, end_s, salt, extra_data, times_executed, total_spent, last_period_start,
        last_period_end, last_period_spent, next_charge_at, revoked, revoked_by, revoked_at, revoked_block,
        revoked_log_index, block_number, log_index, tx_hash, created_at)
      values (${chainId}, ${r.subscriptionId}, ${r.hash}, ${r.manager}, ${r.spender}, ${r.account}, ${r.token},
        ${r.allowance.toString()}, ${r.period}, ${r.start}, ${r.end}, ${r.salt.toString()}, ${r.extraData},
        ${r.timesExecuted}, ${r.totalSpent.toString()}, ${r.lastPeriod?.start ?? null}, ${r.paidThrough},
        ${r.lastPeriod ? r.lastPeriod.spend.toString() : null}, ${r.nextChargeAt}, ${r.revoked}, ${r.revokedBy},
        ${r.revokedAt === null ? null : iso(r.revokedAt)}, ${r.revokedBlock?.toString() ?? null}, ${r.revokedLogIndex},
        ${r.blockNumber.toString()}, ${r.logIndex}, ${r.txHash}, ${iso(r.createdAt)})
      on conflict (chain_id, subscription_id) do update set
        times_executed = excluded.times_executed, total_spent = excluded.total_spent,
        last_period_start = excluded.last_period_start, last_period_end = excluded.last_period_end,
        last_period_spent = excluded.last_period_spent, next_charge_at = excluded.next_charge_at,
        revoked = excluded.revoked, revoked_by = excluded.revoked_by, revoked_at = excluded.revoked_at,
        revoked_block = excluded.revoked_block, revoked_log_index = excluded.revoked_log_index`;
  }
}

/**
 * Inside a rollback to block `above` (−1: everything): drops the permissions approved above it and rebuilds those
 * changed above it from their remaining logs (`events` for Approved/Revoked, `activity` for Used), reading only
 * rows at or below it, so it may run before or after the rolled-back rows are deleted.
 */
export async function rollbackPermissions(tx: Q, chainId: number, above: string): Promise<void> {
  const touched = (
    await tx<{ id: string }[]>`
      select subscription_id::text as id from events where chain_id = ${chainId} and block_number > ${above}
        and name in ('SpendPermissionApproved', 'SpendPermissionRevoked')
      union
      select subscription_id::text from activity where chain_id = ${chainId} and block_number > ${above}
        and permission_hash is not null`
  ).map((r) => r.id);
  await tx`delete from spend_permissions where chain_id = ${chainId} and block_number > ${above}`;
  if (touched.length === 0) return;
  const rows = await tx<
    {
      block_number: string;
      log_index: number;
      tx_hash: string;
      block_hash: string;
      block_time: Date;
      address: string;
      name: string;
      subscription_id: string;
      args: Record<string, string | number | boolean>;
    }[]
  >`
    select block_number, log_index, tx_hash, block_hash, block_time, address, name, subscription_id::text, args
    from events where chain_id = ${chainId} and block_number <= ${above}
      and subscription_id = any(${touched}::text[]::numeric[])
      and name in ('SpendPermissionApproved', 'SpendPermissionRevoked')
    union all
    select block_number, log_index, tx_hash, block_hash, block_time, module, 'SpendPermissionUsed',
      subscription_id::text, jsonb_build_object('hash', permission_hash, 'account', '', 'spender', merchant,
        'token', token, 'periodStart', period_start, 'periodEnd', period_end, 'value', amount::text)
    from activity where chain_id = ${chainId} and block_number <= ${above} and permission_hash is not null
      and subscription_id = any(${touched}::text[]::numeric[])
    order by block_number, log_index`;
  const perms = new Map<string, PermissionRow>();
  for (const r of rows) {
    applyPermissionLog(perms, {
      blockNumber: BigInt(r.block_number),
      logIndex: r.log_index,
      txHash: r.tx_hash,
      blockHash: r.block_hash,
      blockTime: Math.floor(r.block_time.getTime() / 1000),
      address: r.address,
      name: r.name,
      subscriptionId: r.subscription_id,
      args: r.args,
    });
  }
  await upsertPermissions(tx, chainId, [...perms.values()]);
}
