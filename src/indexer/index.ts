import { ConfigError } from "../common/config";
import { createPollLoop, createWaker, type PollLoop } from "../common/async";
import { defaultRetry, RangeSizer } from "../chain/rpc";
import { ProcessorMismatchError } from "./errors";
import { createLeaderLock, type LeaderLock } from "./lock";
import type { Indexer, IndexerOptions } from "./options";
import { createPipeline, type IndexerContext } from "./pipeline";
import { createPoll } from "./poll";
import { createIndexerState } from "./state";
import { ensureChain } from "./store";
import { createTokenBook } from "./token-book";

export type { Indexer, IndexerOptions, IndexerTuning } from "./options";
export type { IndexerStatus } from "./state";

/**
 * Creates the chain → Postgres indexer: discovers modules from the processor, ingests every event of
 * contracts.md into `events` and the derived tables, follows the head with reorg handling, and commits each
 * batch with its cursor in one transaction. One writer per chain (advisory lock); others wait as standby.
 */
export function createIndexer(opts: IndexerOptions): Indexer {
  const { sql, client, config } = opts;
  const log = opts.log ?? (() => {});
  const t = opts.tuning ?? {};
  const chainId = config.chainId;
  const confirmations = BigInt(config.CONFIRMATIONS ?? 0);
  const pollMs = Math.max(1, config.POLL_INTERVAL_MS ?? 1000);
  const policy = t.retry ?? defaultRetry;
  const tokens = createTokenBook({
    client,
    chainId,
    policy: { ...policy, attempts: Math.min(policy.attempts, 2) },
    timeoutMs: t.tokenTimeoutMs ?? 2_000,
    retryMs: t.tokenRetryMs ?? 2_000,
    maxRetryMs: t.tokenMaxRetryMs ?? 300_000,
    log,
  });
  const state = createIndexerState({
    chainId,
    stallAfterMs: t.stallAfterMs ?? Math.max(120_000, pollMs * 30),
    tokens,
    log,
  });
  let stopping = false;
  const ctx: IndexerContext = {
    sql,
    client,
    chainId,
    processor: config.PROCESSOR_ADDRESS?.toLowerCase() ?? "",
    startBlock: BigInt(config.START_BLOCK ?? 0),
    window: confirmations > 64n ? confirmations : 64n,
    policy,
    sizer: new RangeSizer(BigInt(t.initialRange ?? 50), BigInt(t.maxRange ?? 100_000), t.targetLogs ?? 5_000),
    batchLogs: t.targetLogs ?? 5_000,
    addressLimit: t.addressLimit,
    hooks: opts.hooks ?? [],
    notifier: opts.notifier,
    log,
    state,
    io: { depth: 1, useCopy: false },
    stopping: () => stopping,
  };
  const pipeline = createPipeline(ctx);
  const waker = createWaker();
  let lock: LeaderLock | null = null;
  let loop: PollLoop | null = null;
  let poll: ReturnType<typeof createPoll> | null = null;

  return {
    async start() {
      if (loop) return;
      if (!ctx.processor) throw new ConfigError("PROCESSOR_ADDRESS is required to index");
      const kind =
        opts.db?.kind ?? ((await sql`select version() as v`)[0]!.v.includes("PGlite") ? "pglite" : "postgres");
      const row = await ensureChain(sql, chainId, ctx.processor, ctx.startBlock);
      if (row.processor !== ctx.processor) {
        throw new ProcessorMismatchError(
          `database indexes processor ${row.processor} on chain ${chainId}, not ${ctx.processor}`,
        );
      }
      if (row.startBlock !== ctx.startBlock) {
        log("warn", "START_BLOCK differs from the indexed start; keeping the existing index", {
          chainId,
          stored: row.startBlock,
          configured: ctx.startBlock,
        });
      }
      state.setCursor(row.cursor);
      // Reserving a connection for the lock needs a pool: PGlite (or a one-connection pool) has no second session.
      const poolSize = (sql as unknown as { options?: { max?: number } }).options?.max ?? 10;
      const server = kind === "postgres";
      lock = createLeaderLock(sql, chainId, server && poolSize > 1);
      // Transactions in flight during a backfill: several on a server, 1 on PGlite (one session).
      ctx.io.depth = server && poolSize > 2 ? Math.max(1, Math.min(t.writeDepth ?? 3, poolSize - 2)) : 1;
      ctx.io.useCopy = server;
      stopping = false;
      poll = createPoll(ctx, pipeline, { lock, confirmations, pollMs, deepReorgPolls: t.deepReorgPolls ?? 3, waker });
      loop = createPollLoop({
        intervalMs: pollMs,
        step: poll.step,
        maxBackoffMs: t.maxBackoffMs ?? 30_000,
        onError: poll.onError,
      });
      loop.start();
    },
    async stop() {
      if (!loop) return;
      stopping = true;
      const stopped = loop.stop();
      waker.wake();
      await stopped;
      await poll?.settle();
      await lock?.release();
      state.leader = false;
      loop = null;
    },
    status: state.status,
    waitForBlock: state.waitForBlock,
  };
}
