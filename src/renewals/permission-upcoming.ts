/**
 * `subscription.renewal_upcoming` of spend permissions (spend-permissions §3, renewals.md §4): for a chargeable
 * permission (not revoked, next due instant N before `end`), the notice instant is `N − RENEWAL_NOTICE_S`, for the N
 * an Approved or Used log set. As for module subscriptions, the event lies in the first block at or after the instant,
 * before that block's logs, and is created by the batch whose time range holds it, folding the batch's logs (a charge
 * or revoke before the instant prevents it); none when the instant is at or before the log that set N, nor twice for
 * one due instant (`renewal_notices`). Its id names the block's hash, the permission and N.
 */
import type { Q } from "../db/query";
import { SPEND_PERMISSION_LOGS } from "../domain/chain-event";
import { isoFromUnix } from "../domain/records";
import { permissionStatus } from "../domain/spend-permission";
import { eventIdOf } from "../events/ids";
import {
  permissionGrace,
  permissionRecordAt,
  permissionsBefore,
  permissionsInFlight,
} from "../events/spend-permission-events";
import type { NewEvent } from "../events/timeline";
import type { BatchContext } from "../indexer/hooks";
import { applyPermissionLog, type PermissionRow } from "../indexer/spend-permission-state";
import type { BatchRows } from "../indexer/write";
import { tokenMeta } from "./upcoming";

/** Whether a permission's next charge can still happen: not revoked, due before its end. */
const chargeable = (p: PermissionRow) => !p.revoked && p.nextChargeAt < p.end;

/** Permissions (committed state) whose notice instant lies in `(after, until]`. */
async function dueForNotice(q: Q, chainId: number, noticeS: number, after: number, until: number) {
  const rows = await q<{ id: string }[]>`
    select subscription_id::text as id from spend_permissions
    where chain_id = ${chainId} and not revoked and next_charge_at < end_s
      and next_charge_at > ${after + noticeS} and next_charge_at <= ${until + noticeS}`;
  return rows.map((r) => r.id);
}

/** A notice found by the fold: the permission's state at the instant. */
type Notice = { p: PermissionRow; instant: number };

/** The `renewal_upcoming` events of spend permissions in one batch, placed in their blocks; records them. */
export async function permissionUpcomingEvents(
  tx: Q,
  ctx: BatchContext,
  inFlight: readonly BatchRows[],
  noticeS: number,
): Promise<NewEvent[]> {
  if (noticeS <= 0 || ctx.toTime <= ctx.fromTime) return [];
  const { chainId } = ctx;
  const graceS = await permissionGrace(tx, chainId);
  if (graceS === null) return [];
  const logs = ctx.rows.batch.events.filter((e) => SPEND_PERMISSION_LOGS.has(e.name));
  const inWindow = (n: number) => n - noticeS > ctx.fromTime && n - noticeS <= ctx.toTime;
  // A catch-up's permissions are not in the table yet, and the others' notices were announced with the range.
  const ids = new Set([
    ...logs.map((e) => e.subscriptionId!),
    ...(ctx.catchUp ? [] : await dueForNotice(tx, chainId, noticeS, ctx.fromTime, ctx.toTime)),
  ]);
  for (const [id, p] of permissionsInFlight(inFlight)) if (inWindow(p.nextChargeAt)) ids.add(id);
  if (ids.size === 0) return [];
  const states = await permissionsBefore(tx, chainId, inFlight, [...ids]);
  // Fold each permission's logs from the batch's start: before each log (and at the batch's end), a notice whose
  // instant falls after the previous log and by then is found on the state that stood.
  const found: Notice[] = [];
  const since = new Map<string, number>();
  const check = (id: string, until: number) => {
    const p = states.get(id);
    if (!p || !chargeable(p)) return;
    const instant = p.nextChargeAt - noticeS;
    if (instant > (since.get(id) ?? ctx.fromTime) && instant <= until) found.push({ p: { ...p }, instant });
  };
  for (const ev of logs) {
    const id = ev.subscriptionId!;
    check(id, ev.blockTime);
    applyPermissionLog(states, ev);
    since.set(id, Math.max(since.get(id) ?? ctx.fromTime, ev.blockTime));
  }
  for (const id of ids) check(id, ctx.toTime);
  if (found.length === 0) return [];
  const announced = new Set(
    (
      await tx<{ k: string }[]>`
        select subscription_id::text || ':' || due_at as k from renewal_notices where chain_id = ${chainId}
          and (subscription_id, due_at) in (select * from unnest(
            ${found.map((n) => n.p.subscriptionId)}::text[]::numeric[], ${found.map((n) => n.p.nextChargeAt)}::bigint[]))`
    ).map((r) => r.k),
  );
  const fresh = found.filter((n) => !announced.has(`${n.p.subscriptionId}:${n.p.nextChargeAt}`));
  if (fresh.length === 0) return [];
  const meta = await tokenMeta(tx, ctx, inFlight, [...new Set(fresh.map((n) => n.p.token))]);
  const events: NewEvent[] = [];
  for (const { p, instant } of fresh) {
    const block = await ctx.blockAt(instant);
    const m = meta.get(p.token);
    events.push({
      id: eventIdOf(chainId, block.hash, "renewal_upcoming", p.subscriptionId, p.nextChargeAt),
      merchant: p.spender,
      type: "subscription.renewal_upcoming",
      blockNumber: block.number,
      logIndex: -1,
      subIndex: 0,
      ts: instant,
      data: {
        object: permissionRecordAt(chainId, p, instant, permissionStatus(p, instant, graceS)),
        due_at: isoFromUnix(p.nextChargeAt),
        // The charge a spend at N may take: the whole allowance of the uncharged period N starts.
        amount: p.allowance.toString(),
        currency: m?.symbol ?? null,
        token_decimals: m?.decimals ?? null,
      },
    });
  }
  await tx`insert into renewal_notices (chain_id, subscription_id, due_at, block_number)
    select ${chainId}, s, d, b from unnest(${fresh.map((n) => n.p.subscriptionId)}::text[]::numeric[],
      ${fresh.map((n) => n.p.nextChargeAt)}::bigint[], ${events.map((e) => e.blockNumber.toString())}::bigint[]) as x(s, d, b)
    on conflict do nothing`;
  return events;
}
