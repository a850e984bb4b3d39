/**
 * The subscription events of spend permissions (spend-permissions spec §3), as extra events of the events hook:
 * `subscription.created` for an Approved log, `subscription.status_changed` when a Used or Revoked log changes the
 * status (after the charge's own `charge.succeeded`, the activity event), and the expiries time alone makes — at
 * `end` when never charged, else at `min(paid_through + grace, end)` — each placed in the first block at or after its
 * instant, so created only once such a block is indexed.
 */
import type { Q } from "../db/query";
import { SPEND_PERMISSION_LOGS } from "../domain/chain-event";
import { DEFAULT_PERMISSION_GRACE_S } from "../domain/spend-permission-status";
import { expiryInstant, permissionStatus, type PermissionStatus } from "../domain/spend-permission";
import { toPermissionRecord } from "../domain/spend-permission-record";
import type { BatchContext } from "../indexer/hooks";
import { applyPermissionLog, loadPermissions, type PermissionRow } from "../indexer/spend-permission-state";
import type { BatchRows } from "../indexer/write";
import { subscriptionEventData } from "./envelope";
import type { ExtraEvents } from "./hook";
import { eventIdOf } from "./ids";
import { loadAnnounced } from "./queries";
import { placeExpiries, type NewEvent } from "./timeline";

const iso = (t: number) => new Date(t * 1000).toISOString();

/** The subscription record of a permission's state at `at` with `status` (`renewal` null: derived from the chain). */
export function permissionRecordAt(chainId: number, p: PermissionRow, at: number, status: PermissionStatus) {
  return toPermissionRecord({
    chain_id: String(chainId),
    subscription_id: p.subscriptionId,
    hash: p.hash,
    manager: p.manager,
    merchant: p.spender,
    subscriber: p.account,
    token: p.token,
    allowance: p.allowance.toString(),
    period_s: String(p.period),
    start_s: String(p.start),
    end_s: String(p.end),
    salt: p.salt.toString(),
    extra_data: p.extraData,
    times_executed: p.timesExecuted,
    total_spent: p.totalSpent.toString(),
    last_period_start: p.lastPeriod ? String(p.lastPeriod.start) : null,
    last_period_end: String(p.paidThrough),
    last_period_spent: p.lastPeriod ? p.lastPeriod.spend.toString() : null,
    next_charge_at: String(p.nextChargeAt),
    revoked: p.revoked,
    revoked_by: p.revokedBy,
    revoked_at: p.revokedAt === null ? null : iso(p.revokedAt),
    created_at: String(p.createdAt),
    now_s: String(at),
    status,
  });
}

/** The event `data` of a permission's state at `at` with `status` (and the status before, for a change). */
function dataOf(chainId: number, p: PermissionRow, at: number, status: PermissionStatus, previous?: PermissionStatus) {
  return subscriptionEventData(permissionRecordAt(chainId, p, at, status), previous);
}

/** The status change → EXPIRED at `instant` that time alone makes (placed by `placeExpiries`). */
function expiryEvent(chainId: number, p: PermissionRow, instant: number, graceS: number): NewEvent {
  const previous = permissionStatus(p, instant - 1, graceS);
  return {
    id: "",
    merchant: p.spender,
    type: "subscription.status_changed",
    blockNumber: 0n,
    logIndex: -1,
    subIndex: 0,
    ts: instant,
    data: dataOf(chainId, p, instant, "EXPIRED", previous),
    expiry: { subscriptionId: p.subscriptionId, instant },
  };
}

/** Permissions of the chain (not in `skip`) whose expiry instant lies in `(after, until]`. */
async function dueIds(q: Q, chainId: number, graceS: number, after: number, until: number): Promise<string[]> {
  const rows = await q<{ id: string }[]>`
    select subscription_id::text as id from spend_permissions
    where chain_id = ${chainId} and not revoked
      and (case when times_executed = 0 then end_s
        else least(last_period_end + least(${graceS}::bigint, period_s), end_s) end) > ${after}
      and (case when times_executed = 0 then end_s
        else least(last_period_end + least(${graceS}::bigint, period_s), end_s) end) <= ${until}`;
  return rows.map((r) => r.id);
}

/** The chain's permission grace (`SPEND_PERMISSION_GRACE_S` as its indexer recorded it), or null when it indexes no manager. */
export async function permissionGrace(tx: Q, chainId: number): Promise<number | null> {
  const [chain] = await tx<{ manager: string | null; grace: string | null }[]>`
    select spend_permission_manager as manager, spend_permission_grace_s as grace from chains
    where chain_id = ${chainId}`;
  if (!chain?.manager) return null;
  return chain.grace === null ? DEFAULT_PERMISSION_GRACE_S : Number(chain.grace);
}

/** The newest permission rows the batches in flight leave (the database may not show them yet). */
export function permissionsInFlight(inFlight: readonly BatchRows[]): Map<string, PermissionRow> {
  const pending = new Map<string, PermissionRow>();
  for (const r of inFlight) for (const p of r.permissions?.permissions ?? []) pending.set(p.subscriptionId, p);
  return pending;
}

/** The permission states before a batch: the batches in flight (latest last) over the stored rows, copies. */
export async function permissionsBefore(
  tx: Q,
  chainId: number,
  inFlight: readonly BatchRows[],
  ids: readonly string[],
): Promise<Map<string, PermissionRow>> {
  const pending = permissionsInFlight(inFlight);
  const wanted = [...new Set(ids)];
  const stored = await loadPermissions(
    tx,
    chainId,
    wanted.filter((id) => !pending.has(id)),
  );
  const states = new Map<string, PermissionRow>();
  for (const id of wanted) {
    const p = pending.get(id) ?? stored.get(id);
    if (p) states.set(id, { ...p, lastPeriod: p.lastPeriod && { ...p.lastPeriod } });
  }
  return states;
}

/** The permission events of one batch (see the file's comment); none when the chain indexes no manager. */
export async function permissionEvents(tx: Q, ctx: BatchContext, inFlight: readonly BatchRows[]): Promise<NewEvent[]> {
  const { chainId } = ctx;
  const graceS = await permissionGrace(tx, chainId);
  if (graceS === null) return [];
  const logs = ctx.rows.batch.events.filter((e) => SPEND_PERMISSION_LOGS.has(e.name));
  // States before the batch: the batches in flight (latest last) over the table.
  const pending = permissionsInFlight(inFlight);
  const touched = new Set(logs.map((e) => e.subscriptionId!));
  // A catch-up's permissions are not in the table yet, and the others' expiries were announced with the range.
  const due = ctx.catchUp ? [] : await dueIds(tx, chainId, graceS, ctx.fromTime, ctx.toTime);
  for (const [id, p] of pending) {
    const instant = expiryInstant(p, graceS);
    if (instant !== null && instant > ctx.fromTime && instant <= ctx.toTime) due.push(id);
  }
  const states = await permissionsBefore(tx, chainId, inFlight, [...touched, ...due]);
  const announced = await loadAnnounced(tx, chainId, ctx.fromTime);
  const out: NewEvent[] = [];
  // Time passes for each permission from the batch's start: an expiry before its next log is announced first.
  const seen = new Map<string, number>();
  const expireUpTo = (p: PermissionRow, until: number) => {
    const instant = expiryInstant(p, graceS);
    const since = seen.get(p.subscriptionId) ?? ctx.fromTime;
    if (instant === null || instant <= since || instant > until) return;
    if (!announced.has(`${p.subscriptionId}:${instant}`)) out.push(expiryEvent(chainId, p, instant, graceS));
  };
  for (const ev of logs) {
    const id = ev.subscriptionId!;
    const t = ev.blockTime;
    const before = states.get(id);
    if (before) expireUpTo(before, t);
    const previous = before ? permissionStatus(before, t, graceS) : null;
    applyPermissionLog(states, ev);
    seen.set(id, t);
    const p = states.get(id);
    if (!p) continue;
    const base = { merchant: p.spender, blockNumber: ev.blockNumber, logIndex: ev.logIndex, ts: t };
    const now = permissionStatus(p, t, graceS);
    if (!before) {
      const type = "subscription.created";
      out.push({
        ...base,
        id: eventIdOf(chainId, ev.blockHash, ev.logIndex, type),
        type,
        subIndex: 0,
        data: dataOf(chainId, p, t, now),
      });
    } else if (now !== previous) {
      out.push({
        ...base,
        id: eventIdOf(chainId, ev.blockHash, ev.logIndex, "status", id, now),
        type: "subscription.status_changed",
        // A Used log is itself an event at this position (its activity row's): the status change follows it.
        subIndex: ev.name === "SpendPermissionUsed" ? 1 : 0,
        data: dataOf(chainId, p, t, now, previous!),
      });
    }
  }
  for (const p of states.values()) expireUpTo(p, ctx.toTime);
  return placeExpiries(chainId, out, ctx.blockAt);
}

/** `extra` of the events hook with the permission events added (after the other extra's). */
export function withPermissionEvents(extra?: ExtraEvents): ExtraEvents {
  return async (tx, ctx, inFlight) => {
    const own = await permissionEvents(tx, ctx, inFlight);
    return extra ? [...(await extra(tx, ctx, inFlight)), ...own] : own;
  };
}
