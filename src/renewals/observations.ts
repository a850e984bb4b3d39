/**
 * `subscription.renewal_at_risk` and `subscription.renewal_recovered` (renewals.md §4): observations of an evaluation
 * at its `checked_block`, one per change. `at_risk` when a due instant (an allocation's next_charge_at) is first judged
 * at risk, or for another reason than the last one sent for it; `recovered` when it is judged to renew after an
 * `at_risk` was sent for it. What was last sent is kept in `renewal_sent`, apart from the outlook (whose row goes
 * while the allocation is paused), so pause → top up → resume sends `recovered`, and never a second `at_risk` for
 * one due instant and reason. A reorg does not withdraw them: the next evaluation on the new branch decides. A spend
 * permission's go to its spender, with the permission's record.
 */
import { toSubscriptionRecord, type SubscriptionRecordObject, type SubscriptionRecordRow } from "../domain/records";
import { toPermissionRecord, type PermissionRecordRow } from "../domain/spend-permission-record";
import { permissionNow, permissionRecordColumns } from "../domain/spend-permission-status";
import type { RenewalObject } from "../domain/renewal-record";
import { chainNow, statusJoins, statusSql } from "../domain/status";
import type { Sql } from "../db/client";
import { eventIdOf } from "../events/ids";
import type { OnEvents } from "../events/hook";
import { insertEvents } from "../events/queries";
import type { NewEvent } from "../events/timeline";
import type { Q } from "../db/query";
import type { OutlookRow } from "./queries";
import { permissionRenewalJoins, renewalColumn, renewalJoins } from "./sql";

/** Whether a change of outlook is announced, and as what; `sent` is the last outlook sent for this due instant. */
export function observationType(
  now: { outlook: string; reason: string | null },
  sent: { outlook: string; reason: string | null } | null,
): "subscription.renewal_at_risk" | "subscription.renewal_recovered" | null {
  if (now.outlook === "at_risk") {
    return sent?.outlook === "at_risk" && sent.reason === now.reason ? null : "subscription.renewal_at_risk";
  }
  return sent?.outlook === "at_risk" ? "subscription.renewal_recovered" : null;
}

/** The subscription records (status now, stored outlook) of allocations and spend permissions, by on-chain id. */
async function records(tx: Q, chainId: number, ids: string[]) {
  const sql = tx as unknown as Sql; // the status fragments are typed for the pool; a transaction renders them alike
  const permissions = await sql<PermissionRecordRow[]>`
    select ${permissionRecordColumns(sql)}, ${renewalColumn(sql)}
    from spend_permissions sp
    cross join ${permissionNow(sql, chainId)}
    ${permissionRenewalJoins(sql)}
    where sp.chain_id = ${chainId} and sp.subscription_id = any(${ids}::text[]::numeric[])`;
  const out = new Map<string, SubscriptionRecordObject>(
    permissions.map((r) => [r.subscription_id, toPermissionRecord(r)]),
  );
  if (out.size === ids.length) return out;
  const rows = await sql<(SubscriptionRecordRow & { subscription_id: string })[]>`
    select s.chain_id, s.subscription_id, s.module, s.subscriber, s.plan_id, s.max_executions, s.times_executed,
      s.total_spent, s.created_at, s.next_charge_at, s.allowance_expiry, s.paused, s.cancelled,
      coalesce(b.blocked, false) as is_blocked, ${statusSql(sql)} as status, ${renewalColumn(sql)}
    from subscriptions s
    cross join ${chainNow(sql, chainId)}
    ${statusJoins(sql)}
    ${renewalJoins(sql)}
    where s.chain_id = ${chainId} and s.subscription_id = any(${ids}::text[]::numeric[])`;
  for (const r of rows) out.set(r.subscription_id, toSubscriptionRecord(r));
  return out;
}

/**
 * Inside the transaction that stored an evaluation's outlooks: writes the observation events of the changes among
 * `rows`, records them as sent, and hands their range to `onEvents` (the webhook fan-out).
 */
export async function writeObservations(
  tx: Q,
  chainId: number,
  rows: OutlookRow[],
  checked: { block: bigint; time: number },
  onEvents?: OnEvents,
): Promise<NewEvent[]> {
  if (rows.length === 0) return [];
  const ids = rows.map((r) => r.charge.key);
  const sentRows = await tx<{ id: string; sent_for: string | null; sent: RenewalObject | null }[]>`
    select subscription_id::text as id, sent_for::text, sent from renewal_sent
    where chain_id = ${chainId} and subscription_id = any(${ids}::text[]::numeric[])`;
  const sentBy = new Map(sentRows.map((r) => [r.id, r]));
  const changed: {
    row: OutlookRow;
    type: NonNullable<ReturnType<typeof observationType>>;
    previous: RenewalObject | null;
  }[] = [];
  for (const row of rows) {
    const s = sentBy.get(row.charge.key);
    const previous = s?.sent && s.sent_for === String(row.charge.nextChargeAt) ? s.sent : null;
    const type = observationType(row.outlook, previous);
    if (type) changed.push({ row, type, previous });
  }
  if (changed.length === 0) return [];
  const recs = await records(
    tx,
    chainId,
    changed.map((c) => c.row.charge.key),
  );
  const events: NewEvent[] = [];
  const marks: { id: string; for: number; sent: string }[] = [];
  for (const { row, type, previous } of changed) {
    const object = recs.get(row.charge.key);
    if (!object?.renewal) continue; // no longer shown (e.g. paused meanwhile): nothing to announce
    const { charge: c, outlook: o } = row;
    events.push({
      id: eventIdOf(chainId, "renewal", c.key, c.nextChargeAt, o.outlook, o.reason ?? "", checked.block),
      merchant: c.merchant,
      type,
      blockNumber: checked.block,
      logIndex: 2147483647, // after every log of the block it observed
      subIndex: 0,
      ts: checked.time,
      data: { object, renewal: object.renewal, previous_renewal: previous },
    });
    marks.push({ id: c.key, for: c.nextChargeAt, sent: JSON.stringify(object.renewal) });
  }
  if (events.length === 0) return [];
  await tx`insert into renewal_sent (chain_id, subscription_id, sent_for, sent)
    select ${chainId}, x.id, x.sent_for, x.sent::jsonb
    from unnest(${marks.map((m) => m.id)}::text[]::numeric[], ${marks.map((m) => m.for)}::bigint[],
      ${marks.map((m) => m.sent)}::text[]) as x(id, sent_for, sent)
    on conflict (chain_id, subscription_id) do update set sent_for = excluded.sent_for, sent = excluded.sent`;
  const range = await insertEvents(tx, chainId, events);
  if (range && onEvents) {
    await onEvents(tx, {
      chainId,
      ...range,
      withdrawals: false,
      merchants: [...new Set(events.map((e) => e.merchant))],
    });
  }
  return events;
}
