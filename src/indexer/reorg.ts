import { moduleOfEvent } from "../domain/attribution";
import type { PublicClient } from "viem";
import type { Sql } from "../db/client";
import { applyToSubscription, planKey, subscriptionFromCreated, type PlanInfo, type SubState } from "./derive";
import { getHeaders, type RetryPolicy } from "../chain/rpc";
import { loadBlocks, loadSubscriptionEvents, upsertBlocked, upsertSubscriptions, type Cursor, type Tx } from "./store";

/**
 * Finds the newest stored block the chain still has (same number, same hash): the common ancestor.
 * Returns null when none of the stored recent blocks survives (a reorg deeper than the window).
 */
export async function findAncestor(
  sql: Sql,
  client: PublicClient,
  chainId: number,
  cursor: Cursor,
  head: bigint,
  policy?: RetryPolicy,
): Promise<Cursor | null> {
  const stored = await loadBlocks(sql, chainId);
  if (!stored.some((b) => b.number === cursor.block))
    stored.unshift({ number: cursor.block, hash: cursor.hash, time: cursor.time });
  const candidates = stored.filter((b) => b.number <= head);
  // Newest first, a few at a time: shallow reorgs (the common case) need one round trip.
  for (let i = 0; i < candidates.length; i += 8) {
    const chunk = candidates.slice(i, i + 8);
    const headers = await getHeaders(
      client,
      chunk.map((b) => b.number),
      policy,
    );
    for (const b of chunk) {
      const h = headers.get(b.number);
      if (h && h.hash === b.hash) return { block: b.number, hash: b.hash, time: h.timestamp };
    }
  }
  return null;
}

/**
 * Removes everything above `ancestor` (null: everything of the chain) and rebuilds the derived rows the removed
 * events touched, by replaying the events log, so the tables equal a fresh index up to the ancestor.
 * Runs inside the caller's transaction.
 */
export async function rollback(tx: Tx, chainId: number, ancestor: Cursor | null): Promise<{ events: number }> {
  const above = ancestor ? ancestor.block.toString() : "-1";
  const touchedSubs = (
    await tx<{ id: string }[]>`
      select distinct subscription_id as id from events
      where chain_id = ${chainId} and block_number > ${above} and subscription_id is not null`
  ).map((r) => r.id);
  const touchedBlocks = await tx<{ module: string; subscriber: string }[]>`
    select distinct address as module, args->>'subscriber' as subscriber from events
    where chain_id = ${chainId} and block_number > ${above} and name in ('SubscriberBlocked', 'SubscriberUnblocked')`;
  const removed = await tx`delete from events where chain_id = ${chainId} and block_number > ${above}`;
  await tx`delete from activity where chain_id = ${chainId} and block_number > ${above}`;
  await tx`delete from modules where chain_id = ${chainId} and block_number > ${above}`;
  await tx`delete from plans where chain_id = ${chainId} and block_number > ${above}`;
  await tx`delete from subscriptions where chain_id = ${chainId} and block_number > ${above}`;
  await tx`delete from blocks where chain_id = ${chainId} and number > ${above}`;
  // Tokens are recorded for plans; one whose every plan was rolled back goes too (a fresh index never saw it).
  await tx`delete from tokens t where t.chain_id = ${chainId}
    and not exists (select 1 from plans p where p.chain_id = t.chain_id and p.token = t.address)`;

  // Allocations created at or before the ancestor but changed after it: replay their remaining events.
  const survivors = (
    await tx<{ id: string }[]>`
      select subscription_id::text as id from subscriptions
      where chain_id = ${chainId} and subscription_id = any(${touchedSubs}::text[]::numeric[])`
  ).map((r) => r.id);
  if (survivors.length > 0) {
    const merchants = new Map(
      (
        await tx<
          { address: string; merchant: string }[]
        >`select address, merchant from modules where chain_id = ${chainId}`
      ).map((r) => [r.address, r.merchant]),
    );
    const plans = new Map<string, PlanInfo>();
    for (const p of await tx<{ module: string; plan_id: string; token: string; interval_s: string }[]>`
      select module, plan_id, token, interval_s from plans where chain_id = ${chainId}
        and module in (select module from subscriptions
          where chain_id = ${chainId} and subscription_id = any(${survivors}::text[]::numeric[]))`) {
      plans.set(planKey(p.module, p.plan_id), { token: p.token, interval: Number(p.interval_s) });
    }
    const states = new Map<string, SubState>();
    for (const ev of await loadSubscriptionEvents(tx, chainId, survivors)) {
      const id = ev.subscriptionId!;
      if (ev.name === "SubscriptionCreated") {
        states.set(id, subscriptionFromCreated(ev, merchants.get(ev.address) ?? ""));
        continue;
      }
      const sub = states.get(id);
      const module = moduleOfEvent(ev);
      if (sub && sub.module === module) applyToSubscription(sub, ev, plans.get(planKey(sub.module, sub.planId)));
    }
    await upsertSubscriptions(tx, chainId, [...states.values()]);
  }

  // Block state of each touched (module, subscriber): the latest remaining event decides, none means no row.
  if (touchedBlocks.length > 0) {
    const mods = touchedBlocks.map((r) => r.module);
    const subs = touchedBlocks.map((r) => r.subscriber);
    await tx`delete from blocked_subscribers b using unnest(${mods}::text[], ${subs}::text[]) as u(m, s)
      where b.chain_id = ${chainId} and b.module = u.m and b.subscriber = u.s`;
    const latest = await tx<
      { module: string; subscriber: string; name: string; block_number: string; log_index: number }[]
    >`
      select distinct on (e.address, e.args->>'subscriber')
        e.address as module, e.args->>'subscriber' as subscriber, e.name, e.block_number, e.log_index
      from events e join unnest(${mods}::text[], ${subs}::text[]) as u(m, s)
        on e.address = u.m and e.args->>'subscriber' = u.s
      where e.chain_id = ${chainId} and e.name in ('SubscriberBlocked', 'SubscriberUnblocked')
      order by e.address, e.args->>'subscriber', e.block_number desc, e.log_index desc`;
    await upsertBlocked(
      tx,
      chainId,
      latest.map((r) => ({
        module: r.module,
        subscriber: r.subscriber,
        blocked: r.name === "SubscriberBlocked",
        blockNumber: BigInt(r.block_number),
        logIndex: r.log_index,
      })),
    );
  }
  return { events: removed.count };
}
