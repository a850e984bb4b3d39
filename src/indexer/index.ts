import { createPollLoop, createWaker, type PollLoop } from "../common/async";
import { ConfigError } from "../common/config";
import { createContext } from "./context";
import { getHeaders } from "../chain/rpc";
import { ChainBehindError, ProcessorMismatchError } from "./errors";
import { createLeaderLock, type LeaderLock } from "./lock";
import type { Indexer, IndexerOptions } from "./options";
import { createPoll } from "./poll";
import { ensureChain } from "./store";
import { spendPermissionsAtStart } from "./spend-permission-catch-up";

export type { Indexer, IndexerOptions, IndexerTuning } from "./options";
export type { IndexerStatus } from "./state";

/**
 * Creates the chain → Postgres indexer: discovers modules from the processor, ingests every event of
 * docs/protocol.md into `events` and the derived tables, follows the head with reorg handling, and commits each
 * batch with its cursor in one transaction. One writer per chain (advisory lock); others wait as standby.
 */
export function createIndexer(opts: IndexerOptions): Indexer {
  const { sql } = opts;
  let stopping = false;
  const ctx = createContext(opts, () => stopping);
  const { chainId, state, log } = ctx;
  const waker = createWaker();
  let lock: LeaderLock | null = null;
  let loop: PollLoop | null = null;
  let poll: ReturnType<typeof createPoll> | null = null;

  /** Hashes of blocks, from the node. */
  async function blockHashes(numbers: bigint[]): Promise<Map<bigint, string>> {
    const headers = await getHeaders(ctx.client, numbers, ctx.policy);
    const out = new Map<bigint, string>();
    for (const n of numbers) {
      const h = headers.get(n);
      if (!h) throw new ChainBehindError(`block ${n} is not available from the node yet`);
      out.set(n, h.hash.toLowerCase());
    }
    return out;
  }

  /** Checks the chain row against the configuration and returns whether the database is a server. */
  async function prepare(): Promise<boolean> {
    if (!ctx.processor && !ctx.sp) {
      throw new ConfigError("PROCESSOR_ADDRESS or SPEND_PERMISSION_MANAGER is required to index");
    }
    const kind = opts.db?.kind ?? ((await sql`select version() as v`)[0]!.v.includes("PGlite") ? "pglite" : "postgres");
    const row = await ensureChain(sql, chainId, ctx.processor, ctx.startBlock);
    // A processor added to (or removed from) an index that did not (or did) follow one would leave its history out.
    if (row.processor !== ctx.processor) {
      const name = (p: string | null) => (p === null ? "no processor" : `processor ${p}`);
      const msg = `database indexes ${name(row.processor)} on chain ${chainId}, not ${name(ctx.processor)}`;
      throw new ProcessorMismatchError(msg);
    }
    if (row.startBlock !== ctx.startBlock) {
      const fields = { chainId, stored: row.startBlock, configured: ctx.startBlock };
      log("warn", "START_BLOCK differs from the indexed start; keeping the existing index", fields);
    }
    await spendPermissionsAtStart(ctx, row.cursor);
    for (const h of ctx.hooks) await h.onStart?.(sql, { chainId, blockHashes });
    state.setCursor(row.cursor);
    return kind === "postgres";
  }

  return {
    async start() {
      if (loop) return;
      const server = await prepare();
      // Reserving a connection for the lock needs a pool: PGlite (or a one-connection pool) has no second session.
      const poolSize = (sql as unknown as { options?: { max?: number } }).options?.max ?? 10;
      lock = createLeaderLock(sql, chainId, server && poolSize > 1);
      // Transactions in flight during a backfill: 2 on a server (a third measured no faster and holds a third batch in
      // memory), 1 on PGlite (one session).
      const depth = opts.tuning?.writeDepth ?? 2;
      ctx.io.depth = server && poolSize > 2 ? Math.max(1, Math.min(depth, poolSize - 2)) : 1;
      ctx.io.useCopy = server;
      ctx.io.asyncCommit = server;
      stopping = false;
      const deepReorgPolls = opts.tuning?.deepReorgPolls ?? 3;
      poll = createPoll(ctx, { lock, deepReorgPolls, waker });
      const maxBackoffMs = opts.tuning?.maxBackoffMs ?? 30_000;
      loop = createPollLoop({ intervalMs: ctx.pollMs, step: poll.step, maxBackoffMs, onError: poll.onError });
      loop.start();
    },
    async stop() {
      if (!loop) return;
      stopping = true;
      const stopped = loop.stop();
      waker.wake(); // a standby sleeps on its own waker
      await stopped;
      await poll?.settle();
      await lock?.release();
      state.leader = false;
      loop = null;
    },
    status: state.status,
    waitForBlock: state.waitForBlock,
    passes: () => loop?.passes() ?? 0,
  };
}
