/**
 * The initial backfill's secondary indexes, from the indexer's side (the indexes and their bookkeeping are in
 * src/db/deferred-indexes.ts): dropped when the leader starts a chain on empty tables with more than the reorg window
 * to index, built before the batch that reaches the target or the window, so the cursor never shows the head while
 * an index is missing. A deferral left by a run that died is built by the next leader the same way.
 */
import { analyzeFilledTables, buildDeferredIndexes, deferIndexes, indexesDeferred } from "../db/deferred-indexes";
import type { IndexerContext } from "./context";

/** On a leader's poll: defers the indexes for a fresh chain's backfill, or finds a deferral already running. */
export async function beginDeferral(ctx: IndexerContext, target: bigint): Promise<void> {
  const d = ctx.deferral;
  if (d.pending !== null) return;
  if (d.enabled && ctx.state.cursor === null && target - ctx.startBlock >= ctx.window) {
    const names = await deferIndexes(ctx.sql);
    if (names.length > 0) {
      ctx.log("info", "secondary indexes deferred for the initial backfill", { chainId: ctx.chainId, indexes: names });
      d.pending = true;
      return;
    }
  }
  d.pending = await indexesDeferred(ctx.sql);
}

/** Whether the batch ending at `to` must wait for the deferred indexes: it reaches the target or the reorg window. */
export const buildDue = (ctx: IndexerContext, to: bigint, head: bigint, target: bigint) =>
  ctx.deferral.pending === true && (to >= target || to + ctx.window >= head);

/**
 * Builds the deferred indexes (any chain's); logs what it built and how long it took. A failure fails the poll (and
 * is reported as its error): the next poll builds again before writing on.
 */
export async function buildDeferral(ctx: IndexerContext): Promise<void> {
  const started = performance.now();
  const built = await buildDeferredIndexes(ctx.sql);
  ctx.deferral.pending = false;
  if (built.length > 0) {
    const ms = Math.round(performance.now() - started);
    ctx.log("info", "secondary indexes built", { chainId: ctx.chainId, indexes: built, ms });
    ctx.deferral.statisticsDue = true;
  }
}

/**
 * Takes the planner's statistics of the tables the initial backfill filled, at the first idle poll at the head (no
 * batch waits for it; on PGlite it holds the one connection for about a second per 50,000 logs): PGlite runs no
 * autovacuum, a server's may come minutes later, and the API's plans need them from now on. Once; a failure is
 * logged, not retried (autovacuum, where there is one, takes them later).
 */
export async function takeStatistics(ctx: IndexerContext): Promise<void> {
  ctx.deferral.statisticsDue = false;
  const started = performance.now();
  try {
    await analyzeFilledTables(ctx.sql);
    ctx.log("info", "statistics taken after the initial backfill", {
      chainId: ctx.chainId,
      ms: Math.round(performance.now() - started),
    });
  } catch (err) {
    ctx.log("warn", "statistics not taken after the initial backfill", { chainId: ctx.chainId, error: String(err) });
  }
}
