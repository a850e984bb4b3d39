/**
 * The event log's indexer hook (webhooks.md §1): writes a batch's events inside the batch's own transaction (a
 * transactional outbox), withdraws the events of rolled-back blocks, and announces expiries that became final
 * while the chain was idle. An activity event is its activity row (given a seq before the rows are copied; its id is
 * derived); the subscription events are folded and stored before the batches ahead of it commit (after a rollback,
 * once the previous batch has committed).
 */
import { moduleOfEvent } from "../domain/attribution";
import type { IndexerHook } from "../indexer/hooks";
import type { Q } from "../db/query";
import type { BatchContext } from "../indexer/hooks";
import {
  expiringBetween,
  insertEvents,
  keepActivityEvents,
  loadBlocked,
  loadAnnounced,
  loadPairSubscriptions,
  reserveSeqBlock,
  SEQ_BLOCK,
  withdrawAbove,
} from "./queries";
import { SeqOrderError } from "./errors";
import { planKey, type SubState } from "../domain/subscription";
import { leftInFlight, type BatchRows } from "../indexer/write";
import {
  activitySeqs,
  blockFinder,
  dueExpiries,
  placeExpiries,
  expiringIn,
  numberEvents,
  sortEvents,
  subscriptionEvents,
  type NewEvent,
  type TimelineInput,
} from "./timeline";

/**
 * Seqs of events one transaction wrote; the range may also hold seqs of other transactions running at once.
 * `withdrawals`: the events are a rollback's `event.reverted` (no other writer stores any). `merchants`: whose events
 * the transaction wrote, when known.
 */
export type EventRange = {
  chainId: number;
  fromSeq: bigint;
  toSeq: bigint;
  withdrawals: boolean;
  merchants?: readonly string[];
};

/** More events derived from a batch (placed in their blocks), stored and numbered with the batch's own. */
export type ExtraEvents = (tx: Q, ctx: BatchContext, inFlight: readonly BatchRows[]) => Promise<NewEvent[]>;

/**
 * Events derived from a set of events before they are stored (the MRR movements' customer events): a batch's, its
 * extra ones included (`batch` its context, `inFlight` the batches written before it that may not have committed),
 * or the expiries an idle poll announces (`batch` null). `hashOf` gives the hash of the block an event belongs to.
 */
export type DerivedEvents = (
  tx: Q,
  input: {
    chainId: number;
    events: readonly NewEvent[];
    batch: BatchContext | null;
    inFlight: readonly BatchRows[];
    hashOf: (blockNumber: bigint, ts: number) => Promise<string>;
  },
) => Promise<NewEvent[]>;

/** The hash of the block a batch's event belongs to: a log's own, else (an expiry) the block placed at its instant. */
function batchHashes(ctx: BatchContext) {
  const hashes = new Map<bigint, string>([[ctx.rows.batch.to, ctx.rows.batch.toHeader.hash]]);
  for (const ev of ctx.rows.batch.events) hashes.set(ev.blockNumber, ev.blockHash);
  return async (blockNumber: bigint, ts: number) => hashes.get(blockNumber) ?? (await ctx.blockAt(ts)).hash;
}

/** Called inside the writing transaction after events were inserted (the webhook fan-out). */
export type OnEvents = (tx: Q, range: EventRange) => Promise<unknown>;

/**
 * Loads what the fold of one batch needs and runs it. The touched allocations' states before the batch, plan terms
 * and merchants come from the indexer's memory; the database gives block flags, the other allocations of
 * subscribers whose block changes, announced expiries and the expiries due among untouched allocations. The
 * batches in `inFlight` (written, maybe not committed) are laid over what the database shows: their allocations'
 * states and their block flags, so the fold sees exactly the state before this batch whether or not they committed.
 */
async function batchEvents(tx: Q, ctx: BatchContext, inFlight: readonly BatchRows[]): Promise<NewEvent[]> {
  // A Spend Permission catch-up holds no module log; the range's module expiries were announced when it was indexed.
  if (ctx.catchUp) return [];
  const { batch, before } = ctx.rows;
  const { chainId } = ctx;
  const pairOf = (module: string, subscriber: string) => `${module}:${subscriber}`;
  const created = new Set<string>();
  const pairs = new Map<string, [string, string]>();
  const blockChanges = new Map<string, [string, string]>();
  const addPair = (to: Map<string, [string, string]>, module: string, subscriber: string) =>
    to.set(pairOf(module, subscriber), [module, subscriber]);
  for (const ev of batch.events) {
    if (ev.name === "SubscriptionCreated") created.add(ev.subscriptionId!);
    if (ev.name === "SubscriberBlocked" || ev.name === "SubscriberUnblocked" || ev.name === "SubscriptionCreated") {
      addPair(pairs, moduleOfEvent(ev)!, String(ev.args.subscriber));
      if (ev.name !== "SubscriptionCreated") addPair(blockChanges, moduleOfEvent(ev)!, String(ev.args.subscriber));
    }
  }
  // What the batches in flight leave behind, the latest of them last: allocation states and block flags.
  const { subs: pending, flags: flagsInFlight } = leftInFlight(inFlight);
  const current = (s: SubState) => pending.get(s.subscriptionId) ?? s;
  const subs = new Map(before);
  // Allocations of pairs whose flag changes: in this batch (the fold walks them), or in flight (their expiry may
  // now be due, or no longer, while the database may still show the old flag).
  const inFlightPairs = new Map<string, [string, string]>();
  for (const [k, b] of flagsInFlight) if (!blockChanges.has(k)) inFlightPairs.set(k, [b.module, b.subscriber]);
  const outside = new Map<string, SubState>();
  if (blockChanges.size + inFlightPairs.size > 0) {
    const loaded = await loadPairSubscriptions(tx, chainId, [...blockChanges.values(), ...inFlightPairs.values()]);
    for (const [id, s] of loaded) {
      if (subs.has(id)) continue;
      if (blockChanges.has(pairOf(s.module, s.subscriber))) subs.set(id, current(s));
      else outside.set(id, current(s));
    }
  }
  // Allocations created in flight are not in the database yet.
  for (const s of pending.values()) {
    if (subs.has(s.subscriptionId) || created.has(s.subscriptionId)) continue;
    if (blockChanges.has(pairOf(s.module, s.subscriber))) subs.set(s.subscriptionId, s);
    else outside.set(s.subscriptionId, s);
  }
  for (const s of subs.values()) addPair(pairs, s.module, s.subscriber);
  const existing = [...subs.keys()];
  // Allocations this batch does not touch whose state or flag the batches in flight changed: judged here for expiry.
  for (const id of [...existing, ...created]) outside.delete(id);
  for (const s of outside.values()) addPair(pairs, s.module, s.subscriber);
  // Independent reads, pipelined on the transaction's connection.
  const [blocked, announced, due] = await Promise.all([
    loadBlocked(tx, chainId, [...pairs.values()]),
    loadAnnounced(tx, chainId, ctx.fromTime),
    expiringBetween(tx, chainId, ctx.fromTime, ctx.toTime, new Set([...existing, ...created, ...outside.keys()])),
  ]);
  for (const [k, b] of flagsInFlight) blocked.set(k, b.blocked);
  for (const s of outside.values()) {
    const key = planKey(s.module, s.planId);
    const terms = ctx.plans.get(key);
    const instant = expiringIn(
      s,
      blocked.get(pairOf(s.module, s.subscriber)) ?? false,
      terms,
      ctx.fromTime,
      ctx.toTime,
    );
    if (instant === undefined || announced.has(`${s.subscriptionId}:${instant}`)) continue;
    due.subs.set(s.subscriptionId, s);
    if (terms) due.plans.set(key, terms);
  }
  const input: TimelineInput = {
    chainId,
    events: batch.events,
    before: subs,
    blocked,
    plans: ctx.plans,
    announced,
    prevTime: ctx.fromTime,
    toBlock: batch.to,
    toHash: batch.toHeader.hash,
    toTime: ctx.toTime,
  };
  const out = [...subscriptionEvents(input, ctx.merchants), ...dueExpiries(chainId, due, blockFinder(input), -1)];
  return sortEvents(await placeExpiries(chainId, out, ctx.blockAt));
}

/** A batch's events with the extra ones merged in their place. */
const withExtra = (events: NewEvent[], extra: NewEvent[] | undefined) =>
  extra?.length ? sortEvents([...events, ...extra]) : events;

/**
 * Whether a batch's events are folded and stored before the batches in flight commit (their changes laid over the
 * database, see `batchEvents`): all but the re-ingest after a rollback, which folds in `onBatch` on committed state.
 */
const foldsEarly = (ctx: BatchContext) => !ctx.reorg;

/** The hook; `onEvents` runs in the same transaction after each write of events; `now` is the wall clock (s). */
export function eventsHook(
  opts: { onEvents?: OnEvents; now?: () => number; extra?: ExtraEvents; derive?: DerivedEvents } = {},
): IndexerHook {
  const clock = opts.now ?? (() => Math.floor(Date.now() / 1000));
  const written = async (
    tx: Q,
    chainId: number,
    range: { fromSeq: bigint; toSeq: bigint; merchants?: readonly string[] } | null,
    withdrawals = false,
  ) => {
    if (range && opts.onEvents) await opts.onEvents(tx, { chainId, ...range, withdrawals });
  };
  /** A batch's events and those derived from them. */
  const withDerived = async (tx: Q, ctx: BatchContext, inFlight: readonly BatchRows[], events: NewEvent[]) =>
    opts.derive
      ? withExtra(
          events,
          await opts.derive(tx, { chainId: ctx.chainId, events, batch: ctx, inFlight, hashOf: batchHashes(ctx) }),
        )
      : events;
  // The base of each batch's block of seqs, from `beforeBulk` to `onBatch` (the same rows object).
  const bases = new WeakMap<object, bigint>();
  // The fold of each batch that folds early, started by `beforeBulk`, stored by `afterBulk`.
  const early = new WeakMap<object, Promise<NewEvent[]>>();
  /**
   * Blocks of seqs must follow chain order (a reader paging the log must never see a batch's events after a later
   * batch's): a batch that took its block before the batch in flight ahead of it took its own fails and is retried.
   */
  const checkOrder = (ctx: BatchContext, base: bigint) => {
    const prev = ctx.inFlight.at(-1);
    const prevBase = prev && bases.get(prev);
    if (prev && (prevBase === undefined || prevBase > base)) {
      throw new SeqOrderError(`batch at block ${ctx.fromBlock} took its seqs before the batch ahead of it`);
    }
  };

  /** Numbers and stores a batch's events; returns the range of seqs they may hold, or null. */
  const store = async (tx: Q, ctx: BatchContext, base: bigint, events: NewEvent[]) => {
    numberEvents(base, SEQ_BLOCK, ctx.rows.derived.activity, events);
    // In bulk (COPY on a server) only for batches of blocks never seen (not the re-ingest right after a rollback).
    const stored = await insertEvents(tx, ctx.chainId, events, !ctx.reorg && (ctx.copy ? "copy" : "insert"));
    // The batch's events lie in its block of seqs, but for any that did not fit in their gap (numbered after it).
    const end = base + SEQ_BLOCK - 1n;
    const { activity } = ctx.rows.derived;
    if (stored === null && activity.length === 0) return null;
    const merchants = new Set(events.map((e) => e.merchant));
    for (const a of activity) merchants.add(a.merchant);
    return { fromSeq: base, toSeq: stored && stored.toSeq > end ? stored.toSeq : end, merchants: [...merchants] };
  };
  return {
    name: "events",
    async beforeBulk(tx, ctx) {
      // The fold's reads (when the batch folds early) go out with the block of seqs: one round trip. Only the block
      // is awaited here, as the next batch's `beforeBulk` waits for this one; the fold is stored by `afterBulk`.
      if (foldsEarly(ctx)) {
        const events = batchEvents(tx, ctx, ctx.inFlight);
        events.catch(() => {}); // awaited by afterBulk, unless the transaction fails first
        early.set(ctx.rows, events);
      }
      const base = await reserveSeqBlock(tx);
      bases.set(ctx.rows, base);
      checkOrder(ctx, base);
      const { activity } = ctx.rows.derived;
      const seqs = activitySeqs(base, SEQ_BLOCK, activity.length);
      for (let i = 0; i < activity.length; i++) activity[i]!.eventSeq = seqs[i];
    },
    async afterBulk(tx, ctx) {
      const events = early.get(ctx.rows);
      // The activity rows are in: the batch's events can be stored and fanned out.
      if (events) {
        // `extra` reads only now: during the bulk rows' COPY the connection takes no other query. What is derived
        // (the customer events) follows from the batch's own events and the extra ones (a permission's status).
        const own = withExtra(await events, opts.extra && (await opts.extra(tx, ctx, ctx.inFlight)));
        const all = await withDerived(tx, ctx, ctx.inFlight, own);
        await written(tx, ctx.chainId, await store(tx, ctx, bases.get(ctx.rows)!, all));
      }
    },
    async onBatch(tx, ctx) {
      if (early.delete(ctx.rows)) return;
      const own = withExtra(await batchEvents(tx, ctx, []), opts.extra && (await opts.extra(tx, ctx, [])));
      const events = await withDerived(tx, ctx, [], own);
      await written(tx, ctx.chainId, await store(tx, ctx, bases.get(ctx.rows)!, events));
    },
    async beforeRollback(tx, ctx) {
      await keepActivityEvents(tx, ctx.chainId, ctx.ancestor);
    },
    async onRollback(tx, ctx) {
      await written(tx, ctx.chainId, await withdrawAbove(tx, ctx.chainId, ctx.ancestor), true);
    },
    async onIdle(sql, ctx) {
      if (ctx.indexedBlock === null || ctx.indexedTime === null) return;
      const now = clock();
      if (now <= ctx.indexedTime) return;
      await sql.begin(async (tx) => {
        const [hash] = await tx<{ hash: string }[]>`
          select indexed_hash as hash from chains where chain_id = ${ctx.chainId} and indexed_block = ${ctx.indexedBlock!.toString()}`;
        if (!hash) return; // the cursor moved meanwhile: the next idle poll tries again
        const due = await expiringBetween(tx, ctx.chainId, ctx.indexedTime!, now, new Set());
        const block = { number: ctx.indexedBlock!, hash: hash.hash };
        let events = sortEvents(dueExpiries(ctx.chainId, due, () => block, 2147483647));
        if (opts.derive && events.length > 0) {
          const input = { chainId: ctx.chainId, events, batch: null, inFlight: [], hashOf: async () => block.hash };
          events = withExtra(events, await opts.derive(tx, input));
        }
        await written(tx, ctx.chainId, await insertEvents(tx, ctx.chainId, events));
      });
    },
  };
}
