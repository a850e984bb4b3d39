/**
 * The movements of Spend Permission customers folded again, at the indexer's start when the chain is marked
 * (`chains.mrr_rebuild_due`): by migration 0056 (a chain indexed before permissions fed MRR), by a catch-up of added
 * spenders whose permissions lie before a customer's stored movements, or by `sp:forget` (a spender's permissions
 * gone from under a customer's movements). Every customer who holds a permission, or whose movements still name a
 * permission (`<chain>:<manager>:<hash>`) of the chain, is folded again from the standing status events of its module
 * allocations and permissions, from its first, as a fresh index folds them batch by batch; its old movements leave
 * the rollups and the table, the new ones enter both. One transaction at the indexer's start (after the catch-up),
 * before its first poll. The event log keeps what it announced: no customer event is added or withdrawn.
 */
import type { Sql } from "../db/client";
import type { Q } from "../db/query";
import { leaveReason } from "../domain/mrr";
import type { SubscriptionStatus } from "../domain/status";
import { moduleChange, permissionChange } from "./changes";
import {
  customerKey,
  foldMovements,
  movementIds,
  type Movement,
  type StatusChange,
  type StoredMovement,
} from "./movements";
import { addToRollups, insertMovements, loadLastFailures, loadPlanAmounts } from "./queries";

type EventRow = {
  type: string;
  merchant: string;
  block_number: string;
  log_index: number;
  ts: Date;
  data: Record<string, unknown> | null;
  s_subscription_id: string | null;
  s_module: string | null;
  s_subscriber: string | null;
  s_plan_id: string | null;
  s_status: SubscriptionStatus | null;
  s_previous_status: SubscriptionStatus | null;
};

/** A customer: merchant, wallet and token (lowercase). */
type Customer = { merchant: string; customer: string; token: string };

/**
 * The customers folded again: those holding a permission on the chain, and those whose movements name a permission of
 * the chain's manager (one forgotten since: its row is gone).
 */
async function customersToFold(q: Q, chainId: number): Promise<Customer[]> {
  return q<Customer[]>`
    select merchant, subscriber as customer, token from spend_permissions where chain_id = ${chainId}
    union
    select m.merchant, m.customer, m.token from mrr_movements m
    join chains c on c.chain_id = m.chain_id and c.spend_permission_manager is not null
    where m.chain_id = ${chainId} and exists (select 1 from unnest(m.allocation_ids) a
      where starts_with(a, ${chainId}::text || ':' || c.spend_permission_manager || ':'))`;
}

/** The customers as SQL rows `(merchant, customer, token)`. */
const customerRows = (q: Q, customers: Customer[]) =>
  q`select * from unnest(${customers.map((c) => c.merchant)}::text[], ${customers.map((c) => c.customer)}::text[],
    ${customers.map((c) => c.token)}::text[])`;

/**
 * A module allocation's status event as the fold needs it: from its snapshot columns, or from the record in `data`
 * (events stored before migration 0035).
 */
function moduleEvent(r: EventRow) {
  if (r.s_status !== null) {
    return {
      module: r.s_module!,
      subscriptionId: r.s_subscription_id!,
      subscriber: r.s_subscriber!,
      planId: r.s_plan_id!,
      status: r.s_status,
      previous: r.type === "subscription.created" ? null : r.s_previous_status,
    };
  }
  const o = r.data?.object as
    { allocation_id: string; plan_id: string; user_address: string; status: SubscriptionStatus } | undefined;
  if (!o) return null;
  const [, module, subscriptionId] = o.allocation_id.split(":");
  const previous = r.type === "subscription.created" ? null : ((r.data?.previous_status as SubscriptionStatus) ?? null);
  return {
    module: module!,
    subscriptionId: subscriptionId!,
    subscriber: o.user_address,
    planId: o.plan_id.split(":")[2]!,
    status: o.status,
    previous,
  };
}

/**
 * Rebuilds the movements of the chain's permission customers when the chain is marked; returns how many movements
 * it wrote (null: nothing was due). `blockHashes` reads, from the node, the hashes of blocks no stored row names
 * (where an expiry was placed): a movement's id depends on its block's hash.
 */
export async function rebuildPermissionCustomers(
  sql: Sql,
  chainId: number,
  blockHashes: (numbers: bigint[]) => Promise<Map<bigint, string>>,
): Promise<number | null> {
  return sql.begin(async (t) => {
    const tx = t as unknown as Q;
    const [chain] = await tx<{ due: boolean }[]>`
      select mrr_rebuild_due as due from chains where chain_id = ${chainId} for update`;
    if (!chain?.due) return null;
    const customers = await customersToFold(tx, chainId);
    // Every standing status event of the customers' wallets, in chain order (as `sortEvents` puts them).
    const rows = await tx<EventRow[]>`
      select e.type, e.merchant, e.block_number, e.log_index, e.ts, e.data, e.s_subscription_id::text,
        e.s_module, e.s_subscriber, e.s_plan_id::text, e.s_status, e.s_previous_status
      from merchant_events e
      join (select distinct merchant, customer from (${customerRows(tx, customers)}) as u(merchant, customer, token)) c
        on c.merchant = e.merchant
        and c.customer = lower(coalesce(e.s_subscriber, e.data->'object'->>'user_address'))
      where e.chain_id = ${chainId} and e.reverted_by is null
        and e.type in ('subscription.created', 'subscription.status_changed')
      order by e.block_number, e.log_index, e.sub_index, e.ts, e.seq`;
    const wanted = new Set(customers.map((c) => customerKey(c.merchant, c.customer, c.token)));
    type Pending = { row: EventRow; change?: StatusChange; module?: NonNullable<ReturnType<typeof moduleEvent>> };
    const pending: Pending[] = [];
    for (const row of rows) {
      const at = { type: row.type, blockNumber: BigInt(row.block_number), ts: row.ts.getTime() / 1000 };
      const change = permissionChange({ ...at, data: row.data });
      if (change) pending.push({ row, change });
      else {
        const module = moduleEvent(row);
        if (module) pending.push({ row, module });
      }
    }
    const modules = pending.filter((p) => p.module);
    const plans = await loadPlanAmounts(tx, chainId, [
      ...new Map(
        modules.map((p) => [`${p.module!.module}:${p.module!.planId}`, [p.module!.module, p.module!.planId]]),
      ).values(),
    ] as [string, string][]);
    // Who cancelled (the cancelling log's `by`), and what ended an ACTIVE allocation's payments before it expired.
    const cancelled = modules.filter((p) => p.module!.status === "CANCELLED");
    const cancels = new Map<string, string>();
    if (cancelled.length > 0) {
      const [blocks, logs] = [cancelled.map((p) => p.row.block_number), cancelled.map((p) => p.row.log_index)];
      const byRows = await tx<{ block_number: string; log_index: number; by: string }[]>`
        select ev.block_number, ev.log_index, ev.args->>'by' as by from events ev
        join unnest(${blocks}::bigint[], ${logs}::int[]) as u(b, l) on ev.block_number = u.b and ev.log_index = u.l
        where ev.chain_id = ${chainId} and ev.name = 'SubscriptionCancelled'`;
      for (const r of byRows) cancels.set(`${r.block_number}:${r.log_index}`, r.by);
    }
    const expired = modules.filter((p) => p.module!.status === "EXPIRED" && p.module!.previous === "ACTIVE");
    const paid = expired.length
      ? await tx<{ id: string; at: string; paid: string }[]>`
          select u.id, u.at, coalesce((select max(extract(epoch from a.block_time))::bigint from activity a
            where a.chain_id = ${chainId} and a.subscription_id = u.id::numeric and a.type = 'CHARGE'
              and a.block_time < to_timestamp(u.at)), 0) as paid
          from unnest(${expired.map((p) => p.module!.subscriptionId)}::text[],
            ${expired.map((p) => p.row.ts.getTime() / 1000)}::bigint[]) as u(id, at)`
      : [];
    const failures = await loadLastFailures(
      tx,
      chainId,
      paid.map((r) => ({ id: r.id, at: Number(r.at), paidAt: Number(r.paid) })),
    );
    const changes: StatusChange[] = [];
    for (const p of pending) {
      let change = p.change;
      if (!change) {
        const m = p.module!;
        const plan = plans.get(`${m.module}:${m.planId}`);
        if (!plan) continue;
        const ts = p.row.ts.getTime() / 1000;
        const by = cancels.get(`${p.row.block_number}:${p.row.log_index}`);
        change = moduleChange({
          chainId,
          ...m,
          merchant: p.row.merchant,
          plan,
          blockNumber: BigInt(p.row.block_number),
          ts,
          reason: leaveReason(m.status, {
            cancelledBySubscriber: by !== undefined && by.toLowerCase() === m.subscriber.toLowerCase(),
            lastFailure: failures.get(`${m.subscriptionId}:${ts}`)?.reason ?? null,
          }),
        });
      }
      if (wanted.has(customerKey(change.merchant, change.customer, change.token))) changes.push(change);
    }
    const moves = foldMovements(changes, () => undefined);
    const stored = await withIds(tx, chainId, customers, moves, blockHashes);
    const old = (): ReturnType<Q> =>
      tx`m.chain_id = ${chainId} and (m.merchant, m.customer, m.token) in (${customerRows(tx, customers)})`;
    await addToRollups(tx, old(), -1);
    await tx`delete from mrr_movements m where ${old()}`;
    await insertMovements(tx, chainId, stored);
    if (stored.length > 0) {
      await addToRollups(tx, tx`m.chain_id = ${chainId} and m.id = any(${stored.map((m) => m.id)}::text[])`, 1);
    }
    await tx`update chains set mrr_rebuild_due = false where chain_id = ${chainId}`;
    return stored.length;
  });
}

/**
 * The movements with their ids: a movement an old one stood for (same customer, block and instant) has its id (the
 * same hash of the same parts); the others' blocks are named by a stored log's row, else by the node.
 */
async function withIds(
  tx: Q,
  chainId: number,
  customers: Customer[],
  moves: Movement[],
  blockHashes: (numbers: bigint[]) => Promise<Map<bigint, string>>,
): Promise<StoredMovement[]> {
  const keyOf = (m: { merchant: string; customer: string; token: string }, block: string, at: string) =>
    `${customerKey(m.merchant, m.customer, m.token)}|${block}|${at}`;
  const oldIds = new Map(
    (
      await tx<{ id: string; merchant: string; customer: string; token: string; block_number: string; at: string }[]>`
        select m.id, m.merchant, m.customer, m.token, m.block_number, m.at from mrr_movements m
        where m.chain_id = ${chainId}
          and (m.merchant, m.customer, m.token) in (${customerRows(tx, customers)})`
    ).map((r) => [keyOf(r, r.block_number, r.at), r.id]),
  );
  const blocks = [
    ...new Set(
      moves.filter((m) => !oldIds.has(keyOf(m, String(m.blockNumber), String(m.at)))).map((m) => m.blockNumber),
    ),
  ];
  const hashes = new Map<bigint, string>();
  if (blocks.length > 0) {
    const named = await tx<{ block_number: string; hash: string }[]>`
      select distinct on (u.b) u.b as block_number, coalesce(
        (select ev.block_hash from events ev where ev.chain_id = ${chainId} and ev.block_number = u.b limit 1),
        (select a.block_hash from activity a where a.chain_id = ${chainId} and a.block_number = u.b limit 1)) as hash
      from unnest(${blocks.map(String)}::bigint[]) as u(b)`;
    for (const r of named) if (r.hash) hashes.set(BigInt(r.block_number), r.hash);
    const missing = blocks.filter((b) => !hashes.has(b));
    if (missing.length > 0) for (const [b, h] of await blockHashes(missing)) hashes.set(b, h);
  }
  return moves.map((m) => ({
    ...m,
    id:
      oldIds.get(keyOf(m, String(m.blockNumber), String(m.at))) ??
      movementIds(chainId, hashes.get(m.blockNumber)!, m).id,
  }));
}
