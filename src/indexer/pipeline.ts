/**
 * The indexing pipeline: adaptive `eth_getLogs` ranges fetched ahead, dense answers split into bounded batches,
 * rows derived from cached state, and batch transactions pipelined (the next batch's rows go in while one commits).
 */
import { describeError } from "../common/errors";
import { createBlockAt } from "./block-at";
import { deriveBatch, statesBefore, subscriptionsToLoad } from "./derive";
import { CursorMovedError, RangeRefusedError, RpcUnavailableError } from "./errors";
import { getHeaders, getLogs } from "../chain/rpc";
import { bloomMayContain } from "./bloom";
import { moduleOfEvent } from "../domain/attribution";
import { decodeLog, moduleCreatedTopic } from "./decode";
import {
  fetchLogs,
  logCount,
  prepareBatch,
  readHeadersAhead,
  splitFetched,
  type BatchEvent,
  type FetchedLogs,
  type PreparedBatch,
} from "./fetch";
import type { IndexerContext } from "./context";
import type { Tx } from "../db/query";
import { loadCursor, loadSubscriptions, moveCursor, type Cursor } from "./store";
import type { TokenMeta } from "./tokens";
import { writeBulk, writeState, type BatchRows } from "./write";
import type { BatchContext } from "./hooks";
import { buildDeferral, buildDue } from "./deferral";
import { fetchEarlierApprovals, permissionTokens, withSpendPermissionEvents } from "./spend-permission-source";
import { derivePermissionRows } from "./spend-permission-state";

/** A batch whose transaction was started: when its hooks' `beforeBulk` ran (or it failed), and its commit. */
type Written = { rows: BatchRows; begun: Promise<void>; committed: Promise<void> };

/** Milliseconds a batch spent in each stage, in order (the debug line "indexed batch" carries them). */
export type StageMs = Record<string, number>;

/** Times consecutive stages: `mark(name)` adds the time since the previous mark to `name`. */
function stageClock(into: StageMs = {}) {
  let last = performance.now();
  return {
    stages: into,
    mark(name: string) {
      const t = performance.now();
      into[name] = Math.round(((into[name] ?? 0) + t - last) * 10) / 10;
      last = t;
    },
  };
}

/** One `eth_getLogs` range being fetched; `done` holds its logs once they are in. */
export type Piece = { from: bigint; to: bigint; promise: Promise<FetchedLogs>; done?: FetchedLogs };

/**
 * `fetched` joined by the pieces after it that are already in, while the whole stays within `maxLogs`: the four
 * pieces of an exploring range (a few hundred logs each at the start of a backfill) go in as one batch when they
 * arrived together, instead of paying a batch's fixed costs four times.
 */
export function joinArrived(fetched: FetchedLogs, pending: Piece[], maxLogs: number): FetchedLogs {
  let joined = fetched;
  while (
    pending[0]?.done &&
    pending[0].from === joined.to + 1n &&
    logCount(joined) + logCount(pending[0].done) <= maxLogs
  ) {
    const next = pending.shift()!.done!;
    joined = {
      from: joined.from,
      to: next.to,
      processorLogs: joined.processorLogs.concat(next.processorLogs),
      moduleLogs: joined.moduleLogs.concat(next.moduleLogs),
      queried: joined.queried,
      headers: joinHeaders(joined.headers, next.headers),
    };
  }
  return joined;
}

/** The headers read ahead for two joined ranges. */
function joinHeaders(a: FetchedLogs["headers"], b: FetchedLogs["headers"]): FetchedLogs["headers"] {
  if (!a || !b) return a ?? b;
  const joined = Promise.all([a, b]).then(([x, y]) => new Map([...x, ...y]));
  joined.catch(() => {});
  return joined;
}

const sameCursor = (a: Cursor | null, b: Cursor | null) =>
  a === null || b === null ? a === b : a.block === b.block && a.hash === b.hash;

/** The cursor a batch leaves behind. */
export const cursorOf = (batch: PreparedBatch): Cursor => ({
  block: batch.to,
  hash: batch.toHeader.hash,
  time: batch.toHeader.timestamp,
});

/** Widest range whose blocks' headers are read to skip its `eth_getLogs` (16 CU a header against 75 for the logs). */
export const BLOOM_SPAN = 4n;

/**
 * Whether the headers' `logsBloom` of a short range near the head show that no block of it holds a log of the
 * processor or a module, so its `eth_getLogs` can be skipped. A bloom has false positives, never false negatives.
 * The headers read stay in `ctx.polled` for the batch's checks.
 */
async function bloomsRuleOut(ctx: IndexerContext, from: bigint, to: bigint, known: string[]): Promise<boolean> {
  const head = ctx.state.headBlock;
  if (to - from + 1n > BLOOM_SPAN || head === null || to + ctx.window < head) return false;
  const wanted: bigint[] = [];
  for (let n = from; n <= to; n++) if (!ctx.polled.has(n)) wanted.push(n);
  if (wanted.length > 0) {
    for (const [n, h] of await getHeaders(ctx.client, wanted, ctx.policy)) if (h) ctx.polled.set(n, h);
  }
  const addresses = [ctx.processor!, ...known, ...ctx.state.modules.keys()];
  for (let n = from; n <= to; n++) {
    const bloom = ctx.polled.get(n)?.logsBloom;
    if (!bloom || addresses.some((a) => bloomMayContain(bloom, a))) return false;
  }
  return true;
}

/** Logs of exactly [from, to]: a refused range is fetched as two halves (never asked again as a whole). */
export async function fetchRange(ctx: IndexerContext, from: bigint, to: bigint, known: string[]): Promise<FetchedLogs> {
  const { sizer, log } = ctx;
  let hint = 0n;
  // A permission-only chain has no processor and no modules: its logs are the manager's, fetched per batch.
  if (!ctx.processor) return { from, to, processorLogs: [], moduleLogs: [], queried: new Set() };
  if (await bloomsRuleOut(ctx, from, to, known)) {
    return { from, to, processorLogs: [], moduleLogs: [], queried: new Set(known) };
  }
  if (!sizer.wasRefused(from, to)) {
    try {
      return await fetchLogs(ctx.client, ctx.processor, known, from, to, ctx.policy, ctx.addressLimit);
    } catch (err) {
      if (!(err instanceof RangeRefusedError)) throw err;
      sizer.refusal(from, to, err);
      log("debug", "eth_getLogs range refused, splitting", { from, to, kind: err.kind, next: sizer.size });
      if (err.suggestedSize !== undefined && err.suggestedSize < to - from + 1n) hint = err.suggestedSize;
    }
  }
  if (to <= from) throw new RpcUnavailableError(`eth_getLogs refused the single block ${from}`);
  const mid = hint > 0n ? from + hint - 1n : (from + to) / 2n;
  const parts = [await fetchRange(ctx, from, mid, known)];
  // The rest in spans the sizer now allows (a provider's hint is what fits), not as one range refused again.
  for (let at = mid + 1n; at <= to;) {
    const end = hint > 0n && at + sizer.size - 1n < to ? at + sizer.size - 1n : to;
    parts.push(await fetchRange(ctx, at, end, known));
    at = end + 1n;
  }
  return {
    from,
    to,
    processorLogs: parts.flatMap((p) => p.processorLogs),
    moduleLogs: parts.flatMap((p) => p.moduleLogs),
    queried: parts[0]!.queried,
  };
}

/**
 * Before a backfill: the modules created up to `target`, from one `eth_getLogs` of the processor's ModuleCreated
 * over the whole range (refusals split it), so every range is fetched with every address once instead of asking
 * again, range by range, for modules created after the fetch was issued.
 */
async function modulesAhead(ctx: IndexerContext, from: bigint, target: bigint): Promise<string[]> {
  const out: string[] = [];
  const processor = ctx.processor;
  if (!processor) return out;
  const walk = async (a: bigint, b: bigint): Promise<void> => {
    try {
      const logs = await getLogs(
        ctx.client,
        { address: [processor], topics: [[moduleCreatedTopic]] },
        a,
        b,
        ctx.policy,
      );
      for (const log of logs) {
        const ev = decodeLog(log, "processor");
        const m = ev && moduleOfEvent(ev);
        if (m) out.push(m);
      }
    } catch (err) {
      if (!(err instanceof RangeRefusedError) || a === b) throw err;
      const mid =
        err.suggestedSize !== undefined && err.suggestedSize < b - a + 1n ? a + err.suggestedSize - 1n : (a + b) / 2n;
      await walk(a, mid);
      await walk(mid + 1n, b);
    }
  };
  await walk(from, target);
  return out;
}

/**
 * Starts fetching the next range from `from` (span from the adaptive sizer). A span larger than any answered
 * so far may reach a much denser stretch of chain: it is fetched as four pieces, consumed in order — the first
 * alone, the rest in parallel once it is in — so writing starts while the node still works on the rest.
 */
function fetchAhead(ctx: IndexerContext, from: bigint, target: bigint, upcoming: readonly string[] = []): Piece[] {
  const { sizer } = ctx;
  const list = [...new Set([...ctx.state.modules.keys(), ...upcoming])];
  const to = sizer.nextTo(from, target);
  const span = to - from + 1n;
  const count = ctx.explore && sizer.exploring(span) && span >= 8n ? 4n : 1n;
  const pieces: Piece[] = [];
  let first: Promise<unknown> | null = null;
  for (let i = 0n; i < count; i++) {
    const pFrom = from + (span * i) / count;
    const pTo = i + 1n === count ? to : from + (span * (i + 1n)) / count - 1n;
    // Deep ranges read their headers (where logs lack timestamps) as soon as their logs are in.
    const deep = pTo + ctx.window < target;
    const fetch = () =>
      fetchRange(ctx, pFrom, pTo, list).then((f) => {
        if (deep) readHeadersAhead(ctx.client, f, ctx.policy);
        return f;
      });
    const promise: Promise<FetchedLogs> = first ? first.then(fetch, fetch) : fetch();
    first ??= promise;
    const piece: Piece = { from: pFrom, to: pTo, promise };
    promise.then(
      (f) => (piece.done = f),
      () => {},
    );
    pieces.push(piece);
  }
  void Promise.all(pieces.map((p) => p.promise)).then(
    (all) =>
      sizer.success(
        span,
        all.reduce((n, f) => n + logCount(f), 0),
      ),
    () => {},
  );
  return pieces;
}

/** Metadata of the plan tokens of `batch` not recorded yet (all of them when `all`). */
export async function tokenMetas(ctx: IndexerContext, batch: PreparedBatch | null, all = false): Promise<TokenMeta[]> {
  const { state } = ctx;
  if (!batch) return [];
  const wanted = new Set<string>();
  for (const ev of batch.events) {
    const token = String(ev.args.token);
    if (ev.name === "PlanCreated" && (all || !state.tokens.known.has(token))) wanted.add(token);
  }
  const native = permissionTokens(ctx.sp, ctx.client, batch.events, wanted, all ? null : state.tokens.known);
  return wanted.size === 0 ? native : [...native, ...(await state.tokens.read(wanted))];
}

/**
 * Derives a batch's rows from the cached state (allocations not cached are loaded first). Caches move
 * forward at once, so the next batch can be derived while this one is still being written; any failed
 * write reloads them from the database.
 */
async function derive(ctx: IndexerContext, batch: PreparedBatch): Promise<BatchRows> {
  const { state } = ctx;
  const metas = await tokenMetas(ctx, batch);
  const ids = subscriptionsToLoad(batch.events);
  const missing = ids.filter((id) => !state.subCache.has(id));
  for (const [id, sub] of await loadSubscriptions(ctx.sql, ctx.chainId, missing)) state.subCache.set(id, sub);
  const before = statesBefore(state.subCache, ids);
  const derived = deriveBatch(batch.events, state.modules, state.plans, state.subCache);
  for (const m of metas) state.tokens.known.add(m.address);
  const permissions = await derivePermissionRows(
    ctx.sql,
    ctx.chainId,
    state.subCache,
    batch.events,
    (hashes) => fetchEarlierApprovals(ctx.client, ctx.sp!, hashes, ctx.policy) as Promise<BatchEvent[]>,
  );
  if (permissions) derived.activity.push(...permissions.activity);
  return { batch, before, derived, tokens: metas, permissions };
}

/** Inside a transaction: the cursor row, locked, must be the one the work was built on. */
export async function verifyCursor(ctx: IndexerContext, tx: Tx, expected: Cursor | null) {
  const current = await loadCursor(tx, ctx.chainId, true);
  if (!sameCursor(current, expected)) {
    throw new CursorMovedError(`cursor is ${current?.block ?? "empty"}, batch expected ${expected?.block ?? "empty"}`);
  }
}

/** What the hooks see of a batch. */
export function batchContext(
  ctx: IndexerContext,
  rows: BatchRows,
  prev: Cursor | null,
  head: bigint,
  reorg: boolean,
  inFlight: readonly BatchRows[] = [],
): BatchContext {
  const { batch } = rows;
  const toTime = batch.toHeader.timestamp;
  return {
    chainId: ctx.chainId,
    fromTime: prev?.time ?? 0,
    fromBlock: batch.from,
    toBlock: batch.to,
    toTime,
    head,
    rows,
    reorg,
    copy: ctx.io.useCopy,
    inFlight,
    merchants: ctx.state.modules,
    plans: ctx.state.plans,
    blockAt: createBlockAt(ctx.client, ctx.policy, batch, prev, ctx.finalHeaders),
  };
}

/** Writes a batch's append-only rows between the hooks' `beforeBulk` and `afterBulk` (`begun` after `beforeBulk`). */
export async function writeBatchBulk(
  ctx: IndexerContext,
  tx: Tx,
  bctx: BatchContext,
  begun?: () => void,
  stages?: StageMs,
) {
  const clock = stageClock(stages);
  for (const h of ctx.hooks) {
    await h.beforeBulk?.(tx, bctx);
    clock.mark(`bulk.${h.name}.before`);
  }
  begun?.();
  await writeBulk(tx, ctx.chainId, bctx.rows, ctx.io.useCopy);
  clock.mark("bulk.rows");
  for (const h of ctx.hooks) {
    await h.afterBulk?.(tx, bctx);
    clock.mark(`bulk.${h.name}.after`);
  }
}

/** Runs the hooks' `onBatch` inside the batch's transaction. */
export async function runBatchHooks(ctx: IndexerContext, tx: Tx, bctx: BatchContext, stages?: StageMs) {
  const clock = stageClock(stages);
  for (const h of ctx.hooks) {
    await h.onBatch?.(tx, bctx);
    clock.mark(`hooks.${h.name}`);
  }
}

/** Runs the hooks' `afterCommit` once the batch's transaction committed. */
export function runCommitHooks(ctx: IndexerContext, bctx: BatchContext) {
  for (const h of ctx.hooks) h.afterCommit?.(bctx);
}

/** Logs and publishes a committed batch or rollback; `stamp` is the cursor's as it committed (`moveCursor`). */
export function announce(
  ctx: IndexerContext,
  rows: BatchRows | null,
  range: { fromBlock: bigint; toBlock: bigint; reorg: boolean; stamp: string },
  ms: number,
  stages?: StageMs,
) {
  const { fromBlock, toBlock, reorg, stamp } = range;
  const { chainId, log } = ctx;
  const orphans = rows?.derived.orphans ?? 0;
  if (orphans > 0) log("warn", "events of unknown modules or subscriptions skipped", { chainId, orphans });
  const events = rows?.batch.events.length ?? 0;
  if (rows === null && reorg) ctx.observer?.rollback();
  else ctx.observer?.batch(events, ms / 1000);
  log("debug", "indexed batch", { chainId, fromBlock, toBlock, events, reorg, writeMs: Math.round(ms), stages });
  ctx.notifier
    ?.publish({ chainId, fromBlock: fromBlock.toString(), toBlock: toBlock.toString(), reorg, stamp })
    .catch((err) => log("warn", "batch notification failed", { chainId, error: describeError(err) }));
}

/**
 * Writes one batch and moves the cursor in one transaction. The append-only rows go first (the hooks' `beforeBulk`
 * in chain order: after the previous batch's); then, once the previous batch has committed, the transaction locks
 * the cursor row and checks that it is the one this batch was built on — so a replayed or concurrent batch aborts
 * instead of applying twice.
 */
function write(
  ctx: IndexerContext,
  rows: BatchRows,
  expected: Cursor | null,
  head: bigint,
  ahead: readonly Written[],
  stages: StageMs,
) {
  let markBegun = () => {};
  const begun = new Promise<void>((resolve) => (markBegun = resolve));
  const committed = writeBatch(ctx, rows, expected, head, ahead, markBegun, stages);
  committed.then(markBegun, markBegun);
  return { rows, begun, committed };
}

async function writeBatch(
  ctx: IndexerContext,
  rows: BatchRows,
  expected: Cursor | null,
  head: bigint,
  ahead: readonly Written[],
  begun: () => void,
  stages: StageMs,
) {
  const { batch } = rows;
  const { chainId } = ctx;
  const next = cursorOf(batch);
  const started = performance.now();
  const clock = stageClock(stages);
  const prev = ahead.at(-1);
  const bctx = batchContext(
    ctx,
    rows,
    expected,
    head,
    false,
    ahead.map((w) => w.rows),
  );
  let stamp = "";
  await ctx.sql.begin(async (tx) => {
    // A backfill batch (every block deeper than the reorg window) need not wait for its WAL flush on a server: its
    // crash can only take the cursor back to an earlier batch, which is indexed again to the same rows and events.
    if (ctx.io.asyncCommit && batch.to + ctx.window < head) await tx`set local synchronous_commit = off`;
    clock.mark("begin");
    if (prev) await prev.begun;
    clock.mark("waitPrevBulk");
    const bulk: StageMs = {};
    await writeBatchBulk(ctx, tx, bctx, begun, bulk);
    clock.mark("bulk");
    Object.assign(stages, bulk);
    if (prev)
      await prev.committed.catch(() => Promise.reject(new CursorMovedError("the previous batch did not commit")));
    clock.mark("waitPrevCommit");
    await verifyCursor(ctx, tx, expected);
    clock.mark("verifyCursor");
    const hooks: StageMs = {};
    await runBatchHooks(ctx, tx, bctx, hooks);
    clock.mark("hooks");
    Object.assign(stages, hooks);
    await writeState(tx, chainId, rows, ctx.window);
    stamp = await moveCursor(tx, chainId, next, head, {
      blocksPerSec: ctx.sync.blocksPerSec(),
      // Short of the head this run aims for (head − CONFIRMATIONS): the webhook fan-out holds the chain's ranges.
      catchingUp: batch.to + ctx.confirmations < head,
    });
    clock.mark("state");
  });
  clock.mark("commit");
  runCommitHooks(ctx, bctx);
  ctx.state.setCursor(next);
  ctx.sync.committed(batch.to, batch.events.length, head);
  announce(
    ctx,
    rows,
    { fromBlock: batch.from, toBlock: batch.to, reorg: false, stamp },
    performance.now() - started,
    stages,
  );
}

/** Indexes everything from the cursor up to `target` (head − CONFIRMATIONS); true when it wrote something. */
export async function catchUp(ctx: IndexerContext, head: bigint, target: bigint): Promise<boolean> {
  const { state } = ctx;
  let pending: Piece[] = [];
  const queue: Written[] = [];
  const start = state.cursor;
  let expected = start;
  // Last block whose logs went into a batch: past the cursor when a final batch ended at its last event.
  let covered: bigint | null = null;
  // A backfill (a range deeper than the reorg window) learns its modules first.
  const first = start ? start.block + 1n : ctx.startBlock;
  let upcoming: string[] = [];
  try {
    if (target - first + 1n > ctx.window) upcoming = await modulesAhead(ctx, first, target);
    while (!ctx.stopping()) {
      const next: bigint = expected ? expected.block + 1n : ctx.startBlock;
      const from = covered !== null && covered >= next ? covered + 1n : next;
      if (from > target) break;
      if (pending[0]?.from !== from) pending = fetchAhead(ctx, from, target, upcoming);
      const fetchClock = stageClock();
      // Parts are taken off the list as they are written, so a dense answer's logs are freed batch by batch.
      const parts = splitFetched(joinArrived(await pending.shift()!.promise, pending, ctx.batchLogs), ctx.batchLogs);
      fetchClock.mark("waitFetch");
      // Deep ranges (final by the reorg window) are fetched one ahead while this one is written.
      const nextFrom = parts.at(-1)!.to + 1n;
      if (pending.length === 0 && nextFrom <= target && nextFrom + ctx.sizer.size + ctx.window <= head) {
        pending = fetchAhead(ctx, nextFrom, target, upcoming);
      }
      let first = true;
      for (let piece = parts.shift(); piece; piece = parts.shift()) {
        const want = expected ? expected.block + 1n : ctx.startBlock;
        // Blocks between the cursor and the piece hold no log: they join it.
        const part =
          covered !== null && covered >= want && piece.from === covered + 1n ? { ...piece, from: want } : piece;
        if (part.from !== want) break; // the batch before ended early
        // The first batch of a range carries the wait for its logs.
        const clock = stageClock(first ? { ...fetchClock.stages } : {});
        first = false;
        const prepared = await prepareBatch({
          client: ctx.client,
          fetched: part,
          modules: state.modules,
          base: expected,
          target,
          window: ctx.window,
          processor: ctx.processor,
          policy: ctx.policy,
          known: ctx.polled,
        });
        const batch = await withSpendPermissionEvents(ctx.client, ctx.sp, prepared, ctx.policy, ctx.polled);
        clock.mark("prepare");
        const rows = await derive(ctx, batch);
        clock.mark("derive");
        if (buildDue(ctx, batch.to, head, target)) {
          // The deferred indexes go in before the batch that reaches the head, once the batches ahead committed.
          while (queue.length > 0) await queue.shift()!.committed;
          await buildDeferral(ctx);
          clock.mark("buildIndexes");
        }
        const written = write(ctx, rows, expected, head, [...queue], clock.stages);
        written.committed.catch(() => {});
        queue.push(written);
        expected = cursorOf(batch);
        covered = batch.covered;
        // Up to `depth` transactions in flight: the next batch's rows go in while this one commits.
        while (queue.length >= ctx.io.depth) {
          const waited = stageClock();
          await queue.shift()!.committed;
          waited.mark("pipelineFull");
          clock.stages.pipelineFull = waited.stages.pipelineFull! + (clock.stages.pipelineFull ?? 0);
        }
        if (ctx.stopping()) break;
      }
    }
    while (queue.length > 0) await queue.shift()!.committed;
  } catch (err) {
    state.needReload = true;
    await Promise.allSettled(queue.map((w) => w.committed));
    throw err;
  }
  return expected !== start;
}
