import type { PublicClient } from "viem";
import type { Config, SpendPermissionSource } from "../common/config";
import type { Db, Sql } from "../db/client";
import type { Notifier } from "../db/notify";
import type { Logger } from "../common/log";
import type { RetryPolicy } from "../chain/rpc";
import type { IndexerHook } from "./hooks";
import type { IndexerStatus } from "./state";

/** Knobs with sensible defaults; tests and the benchmark tune them. */
export type IndexerTuning = {
  /** First `eth_getLogs` span in blocks (default 50; it doubles while answers stay small). */
  initialRange?: number;
  /** Largest span (default 100000). */
  maxRange?: number;
  /** Logs per batch: the span adapts toward it; a bigger answer is written in batches this size (default 5000). */
  targetLogs?: number;
  /** Per-call RPC retry policy. */
  retry?: RetryPolicy;
  /** Head unchanged this long counts as stalled (default max(120 s, 30 polls)). */
  stallAfterMs?: number;
  /** Longest pause between failed polls (default 30 s). */
  maxBackoffMs?: number;
  /** Past this many modules, their logs are fetched by event topic instead of an address list (default 500). */
  addressLimit?: number;
  /** Batch transactions in flight during a backfill on a server (default 2, at most pool size − 2; PGlite 1). */
  writeDepth?: number;
  /** Consecutive polls that must see the same deep reorg before the index is rebuilt (default 3). */
  deepReorgPolls?: number;
  /** Deadline of a token's `symbol()` + `decimals()` read (default 2 s). */
  tokenTimeoutMs?: number;
  /** First pause before a token that timed out is read again; doubles per failure (default 1 s). */
  tokenRetryMs?: number;
  /** Longest pause between reads of such a token (default 5 min). */
  tokenMaxRetryMs?: number;
  /** Between backfill progress lines, and the window their rate is measured over (default 10 s). */
  progressIntervalMs?: number;
  /** Leave the secondary indexes out of an initial backfill and build them at the head (default true). */
  deferIndexes?: boolean;
};

/** Options of `createIndexer`. */
export type IndexerOptions = {
  sql: Sql;
  db?: Pick<Db, "kind">;
  client: PublicClient;
  config: Pick<Config, "START_BLOCK" | "CONFIRMATIONS" | "POLL_INTERVAL_MS"> & {
    /** The processor; unset on a chain that indexes only Spend Permissions (then `spendPermissions` is required). */
    PROCESSOR_ADDRESS?: string;
    chainId: number;
    /** Base Spend Permissions indexed beside the processor (unset: not indexed). */
    spendPermissions?: SpendPermissionSource;
    /** A WebSocket URL whose `newHeads` the leader follows, polling over HTTP only while it is down (RPC_WS_URL). */
    wsUrl?: string;
  };
  notifier?: Notifier;
  log?: Logger;
  tuning?: IndexerTuning;
  /** Work committed in the indexer's own transactions (webhook outbox, rollups). */
  hooks?: IndexerHook[];
  /** Told of each committed batch and rollback (metrics). */
  observer?: IndexerObserver;
};

/** What the indexer reports after each commit. */
export type IndexerObserver = {
  batch: (events: number, seconds: number) => void;
  rollback: () => void;
};

/** A running indexer of one chain. */
export type Indexer = {
  start(): Promise<void>;
  stop(): Promise<void>;
  status(): IndexerStatus;
  waitForBlock(n: bigint, timeoutMs?: number): Promise<void>;
  /** Poll passes finished since `start` (tests wait for N more instead of sleeping). */
  passes(): number;
};
