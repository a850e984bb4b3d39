import { moduleOfEvent } from "../domain/attribution";
import { getHeaders, type Header } from "../chain/rpc";
import type { Tx } from "../db/query";
import {
  applyToSubscription,
  planKey,
  subscriptionFromCreated,
  type PlanInfo,
  type SubState,
} from "../domain/subscription";
import { deriveBatch, statesBefore, subscriptionsToLoad } from "./derive";
import { ChainBehindError } from "./errors";
import { prepareBatch, type BatchEvent, type PreparedBatch } from "./fetch";
import {
  announce,
  batchContext,
  cursorOf,
  fetchRange,
  runBatchHooks,
  runCommitHooks,
  tokenMetas,
  verifyCursor,
  writeBatchBulk,
} from "./pipeline";
import type { IndexerContext } from "./context";
import type { BatchContext } from "./hooks";
import {
  loadBlocks,
  loadSubscriptionEvents,
  loadSubscriptions,
  moveCursor,
  saveBlocks,
  upsertBlocked,
  upsertSubscriptions,
  type Cursor,
} from "./store";
import { writeState, type BatchRows } from "./write";
import { fetchEarlierApprovals, withSpendPermissionEvents } from "./spend-permission-source";
import { derivePermissionRows, rollbackPermissions } from "./spend-permission-state";

/**
 * Rolls the index back to `ancestor` (null: to nothing, a deep reorg) and re-ingests the new branch's first batch
 * from there, in one transaction: readers never see the rows of the old branch gone before the new ones are in.
 */
export async function applyReorg(
  ctx: IndexerContext,
  ancestor: Cursor | null,
  head: bigint,
  target: bigint,
): Promise<void> {
  const { sql, chainId, state, log, window, startBlock } = ctx;
  const old = state.cursor;
  const from = ancestor ? ancestor.block + 1n : startBlock;
  const batch = from <= target ? await newBranchBatch(ctx, ancestor, from, target) : null;
  // Tokens deleted with orphaned plans may come back: read every plan token of the new branch's range.
  const metas = await tokenMetas(ctx, batch, true);
  const next: Cursor | null = batch ? cursorOf(batch) : ancestor;
  const refill = ancestor && next ? await windowRefill(ctx, ancestor, next) : [];
  let batchRows: BatchRows | null = null;
  let bctx: BatchContext | null = null;
  let stamp = "";
  ctx.finalHeaders.clear();
  state.needReload = true; // caches are rebuilt from the rolled-back tables below, and reloaded if this fails
  const started = performance.now();
  await sql.begin(async (tx) => {
    await verifyCursor(ctx, tx, old);
    for (const h of ctx.hooks) await h.beforeRollback?.(tx, { chainId, ancestor: ancestor?.block ?? null });
    const { events } = await rollback(tx, chainId, ancestor);
    log("warn", "indexer rolled back", { chainId, to: ancestor?.block ?? null, removedEvents: events });
    for (const h of ctx.hooks) await h.onRollback?.(tx, { chainId, ancestor: ancestor?.block ?? null });
    await state.reload(tx, false);
    if (batch) {
      const ids = subscriptionsToLoad(batch.events);
      const subs = await loadSubscriptions(tx, chainId, ids);
      const before = statesBefore(subs, ids);
      const derived = deriveBatch(batch.events, state.modules, state.plans, subs);
      const permissions = await derivePermissionRows(
        tx,
        chainId,
        {},
        batch.events,
        (hashes) => fetchEarlierApprovals(ctx.client, ctx.sp!, hashes, ctx.policy) as Promise<BatchEvent[]>,
      );
      if (permissions) derived.activity.push(...permissions.activity);
      batchRows = { batch, before, derived, tokens: metas, permissions };
      bctx = batchContext(ctx, batchRows, ancestor, head, true);
      await writeBatchBulk(ctx, tx, bctx);
      await runBatchHooks(ctx, tx, bctx);
      await writeState(tx, chainId, batchRows, window);
    }
    if (refill.length > 0) await saveBlocks(tx, chainId, refill, (next?.block ?? 0n) - window);
    const depth = (old?.block ?? startBlock - 1n) - (ancestor?.block ?? startBlock - 1n);
    stamp = await moveCursor(tx, chainId, next, head, { reorgDepth: depth });
  });
  if (bctx) runCommitHooks(ctx, bctx);
  for (const m of metas) state.tokens.known.add(m.address);
  state.needReload = false;
  state.setCursor(next);
  state.resetHead(head);
  if (next) ctx.sync.committed(next.block, batch?.events.length ?? 0, head);
  const toBlock = batch?.to ?? next?.block ?? startBlock - 1n;
  announce(ctx, batchRows, { fromBlock: from, toBlock, reorg: true, stamp }, performance.now() - started);
}

/** The first batch of the new branch above the ancestor, with the modules known as of the ancestor. */
async function newBranchBatch(
  ctx: IndexerContext,
  ancestor: Cursor | null,
  from: bigint,
  target: bigint,
): Promise<PreparedBatch> {
  // Modules as of the ancestor: those created in orphaned blocks are not known on the new branch.
  const rows = await ctx.sql<{ address: string; merchant: string }[]>`
    select address, merchant from modules where chain_id = ${ctx.chainId} and block_number < ${from.toString()}`;
  const atAncestor = new Map(rows.map((r) => [r.address, r.merchant]));
  const fetched = await fetchRange(ctx, from, ctx.sizer.nextTo(from, target), [...atAncestor.keys()]);
  const batch = await prepareBatch({
    client: ctx.client,
    fetched,
    modules: atAncestor,
    base: ancestor,
    target,
    window: ctx.window,
    processor: ctx.processor,
    policy: ctx.policy,
  });
  return withSpendPermissionEvents(ctx.client, ctx.sp, batch, ctx.policy);
}

/** Hashes of the window below the ancestor may have been pruned while the index stood higher: fetch them back. */
async function windowRefill(ctx: IndexerContext, ancestor: Cursor, next: Cursor): Promise<Header[]> {
  const low = next.block - ctx.window + 1n > ctx.startBlock ? next.block - ctx.window + 1n : ctx.startBlock;
  const stored = new Set((await loadBlocks(ctx.sql, ctx.chainId)).map((b) => b.number));
  const missing: bigint[] = [];
  for (let n = low; n <= ancestor.block; n++) if (!stored.has(n)) missing.push(n);
  const headers = await getHeaders(ctx.client, missing, ctx.policy);
  const refill = [...headers.values()].filter((h): h is Header => h !== null);
  if (refill.length !== missing.length) throw new ChainBehindError("blocks below the ancestor are not available");
  return refill;
}

/**
 * Removes everything above `ancestor` (null: everything of the chain) and rebuilds the derived rows the removed
 * events touched, by replaying the events log, so the tables equal a fresh index up to the ancestor.
 * Runs inside the caller's transaction.
 */
export async function rollback(tx: Tx, chainId: number, ancestor: Cursor | null): Promise<{ events: number }> {
  const above = ancestor ? ancestor.block.toString() : "-1";
  await rollbackPermissions(tx, chainId, above);
  // The allocations the removed logs touched: payment logs are stored as activity rows (migration 0034).
  const touchedSubs = (
    await tx<{ id: string }[]>`
      select subscription_id as id from events
      where chain_id = ${chainId} and block_number > ${above} and subscription_id is not null
      union
      select subscription_id from activity where chain_id = ${chainId} and block_number > ${above}`
  ).map((r) => r.id);
  const touchedBlocks = await tx<{ module: string; subscriber: string }[]>`
    select distinct address as module, args->>'subscriber' as subscriber from events
    where chain_id = ${chainId} and block_number > ${above} and name in ('SubscriberBlocked', 'SubscriberUnblocked')`;
  const removed = await tx`delete from events where chain_id = ${chainId} and block_number > ${above}`;
  const payments = await tx`delete from activity where chain_id = ${chainId} and block_number > ${above}`;
  await tx`delete from modules where chain_id = ${chainId} and block_number > ${above}`;
  await tx`delete from plans where chain_id = ${chainId} and block_number > ${above}`;
  await tx`delete from subscriptions where chain_id = ${chainId} and block_number > ${above}`;
  await tx`delete from blocks where chain_id = ${chainId} and number > ${above}`;
  // Tokens are recorded for plans; one whose every plan was rolled back goes too (a fresh index never saw it).
  await tx`delete from tokens t where t.chain_id = ${chainId}
    and not exists (select 1 from plans p where p.chain_id = t.chain_id and p.token = t.address)
    and not exists (select 1 from spend_permissions sp where sp.chain_id = t.chain_id and sp.token = t.address)`;

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
    for (const p of await tx<{ module: string; plan_id: string; token: string; interval_s: string; grace_s: string }[]>`
      select module, plan_id, token, interval_s, grace_s from plans where chain_id = ${chainId}
        and module in (select module from subscriptions
          where chain_id = ${chainId} and subscription_id = any(${survivors}::text[]::numeric[]))`) {
      plans.set(planKey(p.module, p.plan_id), {
        token: p.token,
        interval: Number(p.interval_s),
        grace: Number(p.grace_s),
      });
    }
    const states = new Map<string, SubState>();
    for (const ev of await loadSubscriptionEvents(tx, chainId, survivors)) {
      const id = ev.subscriptionId!;
      if (ev.name === "SubscriptionCreated") {
        states.set(id, subscriptionFromCreated(ev, merchants.get(moduleOfEvent(ev)!) ?? ""));
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
  return { events: removed.count + payments.count };
}
