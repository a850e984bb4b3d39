import type { PublicClient } from "viem";
import { defaultRetry, RangeSizer, type Header, type RetryPolicy } from "../chain/rpc";
import type { CuBudget } from "../chain/budget";
import type { Logger } from "../common/log";
import type { Sql } from "../db/client";
import type { Notifier } from "../db/notify";
import type { Known } from "./block-at";
import type { IndexerHook } from "./hooks";
import type { IndexerObserver, IndexerOptions } from "./options";
import { createIndexerState, type IndexerState } from "./state";
import { createSyncLog, type SyncLog } from "./sync-log";
import { createTokenBook } from "./token-book";
import { spendPermissionIndexing, type SpendPermissionIndexing } from "./spend-permission-source";

/** Whether an initial backfill's indexes are deferred (./deferral.ts): null until the leader looks (after each change). */
export type DeferralState = {
  enabled: boolean;
  pending: boolean | null;
  /** The indexes were built: the filled tables' statistics are taken once the index reaches the head. */
  statisticsDue?: boolean;
};

/** What the pipeline (and the rollback) work with. */
export type IndexerContext = {
  sql: Sql;
  client: PublicClient;
  chainId: number;
  /** The processor (lowercase); null on a chain that indexes only Spend Permissions (no module side at all). */
  processor: string | null;
  /** The Spend Permission source, when configured. */
  sp?: SpendPermissionIndexing;
  startBlock: bigint;
  confirmations: bigint;
  pollMs: number;
  /** RPC_WS_URL: heads pushed over WebSocket (./poll.ts); unset: the head is polled. */
  wsUrl?: string;
  /** Blocks below the head whose hashes are kept and checked for reorgs. */
  window: bigint;
  policy: RetryPolicy;
  sizer: RangeSizer;
  /**
   * Whether a span larger than any answered is fetched in four pieces (writing starts sooner): not when calls are
   * paced by a compute-unit budget, where every `eth_getLogs` is billed alike whatever its span.
   */
  explore: boolean;
  /** Logs per written batch. */
  batchLogs: number;
  addressLimit?: number;
  hooks: IndexerHook[];
  observer?: IndexerObserver;
  notifier?: Notifier;
  log: Logger;
  state: IndexerState;
  /** The backfill progress log, and the rate stored with each batch. */
  sync: SyncLog;
  /**
   * Transactions in flight during a backfill, whether rows go in by COPY, and whether backfill batches commit without
   * waiting for their WAL flush (set at start: a server only; PGlite's server is this process, its crash ours).
   */
  io: { depth: number; useCopy: boolean; asyncCommit: boolean };
  /** The initial backfill's deferred secondary indexes (./deferral.ts). */
  deferral: DeferralState;
  /**
   * Headers of final blocks (below the reorg window) fetched to place instants (`blockAt`), kept across batches:
   * several batches' instants fall in the same stretch of empty blocks. Cleared on a rollback.
   */
  finalHeaders: Map<bigint, Promise<Known>>;
  /** Headers read in the current poll (the head's, and those read for their blooms), reused within it. */
  polled: Map<bigint, Header>;
  stopping: () => boolean;
};

/** Logs an `eth_getLogs` answer aims at when calls are paced (under the 10,000 most providers cap). */
export const PACED_TARGET_LOGS = 8_000;

/** First `eth_getLogs` span in blocks when calls are paced; later spans follow the density of the last one. */
export const PACED_INITIAL_RANGE = 50n;

/** The context of one indexer from its options, with every tuning default applied. */
export function createContext(opts: IndexerOptions, stopping: () => boolean): IndexerContext {
  const { client, config } = opts;
  const log = opts.log ?? (() => {});
  const t = opts.tuning ?? {};
  const chainId = config.chainId;
  const confirmations = BigInt(config.CONFIRMATIONS ?? 0);
  const pollMs = Math.max(1, config.POLL_INTERVAL_MS ?? 1000);
  const policy = t.retry ?? defaultRetry;
  const tokens = createTokenBook({
    client,
    chainId,
    policy, // transport errors are retried within the deadline; a hang is cut by it
    timeoutMs: t.tokenTimeoutMs ?? 2_000,
    retryMs: t.tokenRetryMs ?? 1_000,
    maxRetryMs: t.tokenMaxRetryMs ?? 300_000,
    log,
  });
  const stallAfterMs = t.stallAfterMs ?? Math.max(120_000, pollMs * 30);
  const startBlock = BigInt(config.START_BLOCK ?? 0);
  // Paced by a compute-unit budget: few, well-filled `eth_getLogs` (each span sized from the last one's density, and
  // a provider's result cap, learned from its refusal, bounding it) instead of a span doubling up in four pieces.
  // The first span is short: a node without a result cap answers whatever it is asked, all of it held in memory.
  const budget = (client.transport as { budget?: CuBudget }).budget;
  const paced = (budget?.settings.cuPerSecond ?? 0) > 0 && t.initialRange === undefined;
  const maxRange = BigInt(t.maxRange ?? 100_000);
  const sync = createSyncLog({ chainId, startBlock, confirmations, log, intervalMs: t.progressIntervalMs });
  return {
    sql: opts.sql,
    client,
    chainId,
    processor: config.PROCESSOR_ADDRESS?.toLowerCase() || null,
    sp: spendPermissionIndexing(config.spendPermissions),
    startBlock,
    confirmations,
    pollMs,
    wsUrl: config.wsUrl,
    window: confirmations > 64n ? confirmations : 64n,
    policy,
    sizer: paced
      ? new RangeSizer(PACED_INITIAL_RANGE, maxRange, PACED_TARGET_LOGS, true)
      : new RangeSizer(BigInt(t.initialRange ?? 50), maxRange, t.targetLogs ?? 5_000),
    explore: !paced,
    batchLogs: t.targetLogs ?? 5_000,
    addressLimit: t.addressLimit,
    hooks: opts.hooks ?? [],
    observer: opts.observer,
    notifier: opts.notifier,
    log,
    state: createIndexerState({ chainId, stallAfterMs, tokens, log }),
    sync,
    io: { depth: 1, useCopy: false, asyncCommit: false },
    deferral: { enabled: t.deferIndexes ?? true, pending: null },
    finalHeaders: new Map(),
    polled: new Map(),
    stopping,
  };
}
