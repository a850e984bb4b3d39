/**
 * The event log's indexer hook (webhooks.md §1): writes a batch's events inside the batch's own transaction (a
 * transactional outbox), withdraws the events of rolled-back blocks, and announces expiries that became final
 * while the chain was idle.
 */
import { moduleOfEvent } from "../domain/attribution";
import type { IndexerHook } from "../indexer/hooks";
import type { Q } from "../indexer/store";
import type { BatchContext } from "../indexer/hooks";
import {
  expiringBetween,
  indexedTime,
  insertEvents,
  loadBlocked,
  loadAnnounced,
  loadRefs,
  loadTouched,
  withdrawAbove,
} from "./queries";
import {
  activityEvents,
  blockFinder,
  dueExpiries,
  sortEvents,
  subscriptionEvents,
  type NewEvent,
  type TimelineInput,
} from "./timeline";

/** Seqs of events one transaction wrote; the range may also hold seqs of other transactions running at once. */
export type EventRange = { chainId: number; fromSeq: bigint; toSeq: bigint };

/** Called inside the writing transaction after events were inserted (the webhook fan-out). */
export type OnEvents = (tx: Q, range: EventRange) => Promise<void>;

const SUBSCRIPTION_LOGS = new Set([
  "ChargeSucceeded",
  "ChargeFailed",
  "CreditRefilled",
  "SubscriptionPaused",
  "SubscriptionResumed",
  "SubscriptionCancelled",
  "AllowanceExpiryUpdated",
]);

/** Loads everything the fold of one batch needs and runs it. */
async function batchEvents(tx: Q, ctx: BatchContext): Promise<NewEvent[]> {
  const { batch, derived, tokens } = ctx.rows;
  const created = new Set(batch.events.filter((e) => e.name === "SubscriptionCreated").map((e) => e.subscriptionId!));
  const ids = new Set<string>();
  const pairs = new Map<string, [string, string]>();
  for (const ev of batch.events) {
    if (ev.subscriptionId !== null && SUBSCRIPTION_LOGS.has(ev.name) && !created.has(ev.subscriptionId)) {
      ids.add(ev.subscriptionId);
    }
    if (ev.name === "SubscriberBlocked" || ev.name === "SubscriberUnblocked" || ev.name === "SubscriptionCreated") {
      const module = moduleOfEvent(ev)!;
      pairs.set(`${module}:${String(ev.args.subscriber)}`, [module, String(ev.args.subscriber)]);
    }
  }
  const prevTime = await indexedTime(tx, ctx.chainId);
  const touched = await loadTouched(tx, ctx.chainId, [...ids], [...pairs.values()]);
  const modules = new Set([...pairs.values()].map((p) => p[0]));
  for (const ev of batch.events) if (ev.name === "SubscriptionCreated") modules.add(moduleOfEvent(ev)!);
  const tokenAddrs = [...new Set(derived.activity.map((a) => a.token).filter((t): t is string => t !== null))];
  const refs = await loadRefs(tx, ctx.chainId, [...modules], tokenAddrs);
  for (const m of derived.modules) refs.merchants.set(m.address, m.merchant);
  for (const p of derived.plans)
    refs.plans.set(`${p.module}:${p.planId}`, { interval: p.interval, grace: p.grace, token: p.token });
  for (const t of tokens) refs.tokens.set(t.address, { symbol: t.symbol, decimals: t.decimals });
  const existing = [...touched.subs.keys()];
  const input: TimelineInput = {
    chainId: ctx.chainId,
    events: batch.events,
    before: touched.subs,
    blocked: new Map([...(await loadBlocked(tx, ctx.chainId, [...pairs.values()])), ...touched.blocked]),
    plans: new Map([...refs.plans, ...touched.plans]),
    tokens: refs.tokens,
    announced: await loadAnnounced(tx, ctx.chainId, existing, prevTime),
    prevTime,
    toBlock: batch.to,
    toHash: batch.toHeader.hash,
    toTime: ctx.toTime,
  };
  const hashes = new Map(batch.events.map((e) => [e.blockNumber, e.blockHash]));
  const out = [...activityEvents(input, derived.activity, hashes), ...subscriptionEvents(input, refs.merchants)];
  const skip = [...existing, ...created];
  const due = await expiringBetween(tx, ctx.chainId, prevTime, ctx.toTime, skip);
  return sortEvents([...out, ...dueExpiries(ctx.chainId, due, blockFinder(input), -1)]);
}

/** The hook; `onEvents` runs in the same transaction after each write of events; `now` is the wall clock (s). */
export function eventsHook(opts: { onEvents?: OnEvents; now?: () => number } = {}): IndexerHook {
  const clock = opts.now ?? (() => Math.floor(Date.now() / 1000));
  const written = async (tx: Q, chainId: number, range: { fromSeq: bigint; toSeq: bigint } | null) => {
    if (range && opts.onEvents) await opts.onEvents(tx, { chainId, ...range });
  };
  return {
    name: "events",
    async onBatch(tx, ctx) {
      // COPY has no ON CONFLICT: only for batches of blocks never seen (not the re-ingest right after a rollback).
      const bulk = ctx.bulk && !ctx.reorg ? { from: ctx.fromBlock, to: ctx.toBlock } : undefined;
      await written(tx, ctx.chainId, await insertEvents(tx, ctx.chainId, await batchEvents(tx, ctx), bulk));
    },
    async onRollback(tx, ctx) {
      await written(tx, ctx.chainId, await withdrawAbove(tx, ctx.chainId, ctx.ancestor, ctx.ancestor ?? 0n));
    },
    async onIdle(sql, ctx) {
      if (ctx.indexedBlock === null || ctx.indexedTime === null) return;
      const now = clock();
      if (now <= ctx.indexedTime) return;
      await sql.begin(async (tx) => {
        const [hash] = await tx<{ hash: string }[]>`
          select indexed_hash as hash from chains where chain_id = ${ctx.chainId} and indexed_block = ${ctx.indexedBlock!.toString()}`;
        if (!hash) return; // the cursor moved meanwhile: the next idle poll tries again
        const due = await expiringBetween(tx, ctx.chainId, ctx.indexedTime!, now, []);
        const block = { number: ctx.indexedBlock!, hash: hash.hash };
        const events = sortEvents(dueExpiries(ctx.chainId, due, () => block, 2147483647));
        await written(tx, ctx.chainId, await insertEvents(tx, ctx.chainId, events));
      });
    },
  };
}
