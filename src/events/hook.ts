/**
 * The event log's indexer hook (webhooks.md §1): writes a batch's events inside the batch's own transaction (a
 * transactional outbox), withdraws the events of rolled-back blocks, and announces expiries that became final
 * while the chain was idle. An activity event is its activity row (given a seq and an id before the rows are
 * copied); the subscription events are folded and stored once the previous batch has committed.
 */
import { moduleOfEvent } from "../domain/attribution";
import type { IndexerHook } from "../indexer/hooks";
import type { Q } from "../indexer/store";
import type { BatchContext } from "../indexer/hooks";
import {
  expiringBetween,
  indexedTime,
  insertEvents,
  keepActivityEvents,
  loadBlocked,
  loadAnnounced,
  loadRefs,
  loadTouched,
  reserveSeqBlock,
  SEQ_BLOCK,
  withdrawAbove,
} from "./queries";
import { activityEventId } from "./ids";
import {
  expiryEvent,
  numberEvents,
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
  const { batch, derived } = ctx.rows;
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
  const modules = new Set([...pairs.values()].map((p) => p[0]));
  for (const ev of batch.events) if (ev.name === "SubscriptionCreated") modules.add(moduleOfEvent(ev)!);
  // Independent reads, pipelined on the transaction's connection.
  const [prevTime, touched, refs, blocked] = await Promise.all([
    indexedTime(tx, ctx.chainId),
    loadTouched(tx, ctx.chainId, [...ids], [...pairs.values()]),
    loadRefs(tx, ctx.chainId, [...modules]),
    loadBlocked(tx, ctx.chainId, [...pairs.values()]),
  ]);
  for (const m of derived.modules) refs.merchants.set(m.address, m.merchant);
  for (const p of derived.plans)
    refs.plans.set(`${p.module}:${p.planId}`, { interval: p.interval, grace: p.grace, token: p.token });
  const existing = [...touched.subs.keys()];
  const [announced, due] = await Promise.all([
    loadAnnounced(tx, ctx.chainId, existing, prevTime),
    expiringBetween(tx, ctx.chainId, prevTime, ctx.toTime, [...existing, ...created]),
  ]);
  const input: TimelineInput = {
    chainId: ctx.chainId,
    events: batch.events,
    before: touched.subs,
    blocked: new Map([...blocked, ...touched.blocked]),
    plans: new Map([...refs.plans, ...touched.plans]),
    announced,
    prevTime,
    toBlock: batch.to,
    toHash: batch.toHeader.hash,
    toTime: ctx.toTime,
  };
  const out = subscriptionEvents(input, refs.merchants);
  const findBlock = (t: number) => {
    for (const ev of batch.events) if (ev.blockTime >= t) return { number: ev.blockNumber, hash: ev.blockHash };
    return { number: batch.to, hash: batch.toHeader.hash };
  };
  for (const s of due.subs.values()) {
    const terms = due.plans.get(`${s.module}:${s.planId}`)!;
    const instant = s.lastPaidAt + terms.interval + terms.grace + 1;
    out.push(expiryEvent(ctx.chainId, s, false, instant, findBlock(instant), -1));
  }
  return sortEvents(out);
}

/** The hook; `onEvents` runs in the same transaction after each write of events; `now` is the wall clock (s). */
export function eventsHook(opts: { onEvents?: OnEvents; now?: () => number } = {}): IndexerHook {
  const clock = opts.now ?? (() => Math.floor(Date.now() / 1000));
  const written = async (tx: Q, chainId: number, range: { fromSeq: bigint; toSeq: bigint } | null) => {
    if (range && opts.onEvents) await opts.onEvents(tx, { chainId, ...range });
  };
  // The base of each batch's block of seqs, from `beforeBulk` to `onBatch` (the same rows object).
  const bases = new WeakMap<object, bigint>();
  return {
    name: "events",
    async beforeBulk(tx, ctx) {
      const base = await reserveSeqBlock(tx);
      bases.set(ctx.rows, base);
      const { activity } = ctx.rows.derived;
      const hashes = new Map(ctx.rows.batch.events.map((e) => [e.blockNumber, e.blockHash]));
      numberEvents(base, SEQ_BLOCK, activity, []).forEach((seq, i) => {
        const a = activity[i]!;
        a.event = {
          seq: seq.toString(),
          id: activityEventId(ctx.chainId, a.blockNumber, a.logIndex, hashes.get(a.blockNumber)!),
        };
      });
    },
    async onBatch(tx, ctx) {
      const base = bases.get(ctx.rows)!;
      const events = await batchEvents(tx, ctx);
      numberEvents(base, SEQ_BLOCK, ctx.rows.derived.activity, events);
      // COPY has no ON CONFLICT: only for batches of blocks never seen (not the re-ingest right after a rollback).
      const stored = await insertEvents(tx, ctx.chainId, events, ctx.bulk && !ctx.reorg);
      // The batch's events lie in its block of seqs, but for any that did not fit in their gap (numbered after it).
      const end = base + SEQ_BLOCK - 1n;
      const any = stored !== null || ctx.rows.derived.activity.length > 0;
      const range = any ? { fromSeq: base, toSeq: stored && stored.toSeq > end ? stored.toSeq : end } : null;
      await written(tx, ctx.chainId, range);
    },
    async beforeRollback(tx, ctx) {
      await keepActivityEvents(tx, ctx.chainId, ctx.ancestor);
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
        const events = [...due.subs.values()].map((s) => {
          const terms = due.plans.get(`${s.module}:${s.planId}`)!;
          return expiryEvent(ctx.chainId, s, false, s.lastPaidAt + terms.interval + terms.grace + 1, block, 2147483647);
        });
        await written(tx, ctx.chainId, await insertEvents(tx, ctx.chainId, sortEvents(events)));
      });
    },
  };
}
