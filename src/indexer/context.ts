import type { PublicClient } from "viem";
import { defaultRetry, RangeSizer, type RetryPolicy } from "../chain/rpc";
import type { Logger } from "../common/log";
import type { Sql } from "../db/client";
import type { Notifier } from "../db/notify";
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
  processor: string;
  /** The Spend Permission source, when configured. */
  sp?: SpendPermissionIndexing;
  startBlock: bigint;
  confirmations: bigint;
  pollMs: number;
  /** Blocks below the head whose hashes are kept and checked for reorgs. */
  window: bigint;
  policy: RetryPolicy;
  sizer: RangeSizer;
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
  stopping: () => boolean;
};

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
  const sync = createSyncLog({ chainId, startBlock, confirmations, log, intervalMs: t.progressIntervalMs });
  return {
    sql: opts.sql,
    client,
    chainId,
    processor: config.PROCESSOR_ADDRESS?.toLowerCase() ?? "",
    sp: spendPermissionIndexing(config.spendPermissions),
    startBlock,
    confirmations,
    pollMs,
    window: confirmations > 64n ? confirmations : 64n,
    policy,
    sizer: new RangeSizer(BigInt(t.initialRange ?? 50), BigInt(t.maxRange ?? 100_000), t.targetLogs ?? 5_000),
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
    stopping,
  };
}
