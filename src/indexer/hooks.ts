import type { Sql } from "../db/client";
import type { Tx } from "../db/query";
import type { BatchRows } from "./write";
import type { PlanInfo } from "../domain/subscription";
import type { BlockRef } from "./block-at";

/** One indexed batch, as hooks see it. Times are unix seconds. */
export type BatchContext = {
  chainId: number;
  fromBlock: bigint;
  toBlock: bigint;
  /** Block timestamp of the indexed block before the batch (0 when there is none), and of `toBlock`. */
  fromTime: number;
  toTime: number;
  /** Chain head when the batch was fetched. */
  head: bigint;
  /** The batch's decoded events (`rows.batch.events`, chain order) and everything derived from them. */
  rows: BatchRows;
  /** True when the batch re-ingests the new branch right after a rollback. */
  reorg: boolean;
  /**
   * True for the catch-up of Spend Permission spenders added to the configuration (spend-permissions spec §6.4): the
   * batch holds only their logs, from the source's start block to the cursor, laid under an index that already covers
   * that range (`fromTime` 0, nothing in flight). Hooks make of those logs what a fresh index makes of them, and skip
   * what concerns the range as a whole (other allocations' expiries and notices, every activity row of its blocks):
   * that was done when the range was indexed. The cursor does not move.
   */
  catchUp?: boolean;
  /**
   * True when the batch's rows go in by COPY (Postgres): hooks may COPY their own rows too. Otherwise (PGlite) they
   * go in by plain multi-row inserts; either way without `on conflict` (the cursor check keeps a batch from being
   * applied twice).
   */
  copy: boolean;
  /** Batches written before this one by the same run that may not have committed yet, in chain order. */
  inFlight: readonly BatchRows[];
  /** Module address → merchant, and plans by `<module>:<planId>`: the indexer's caches, the batch's included. */
  merchants: ReadonlyMap<string, string>;
  plans: ReadonlyMap<string, PlanInfo>;
  /** The first block of the batch whose timestamp is at or after a unix second in `(fromTime, toTime]`. */
  blockAt: (t: number) => Promise<BlockRef>;
};

/** A rollback: rows of every block above `ancestor` were deleted (null: the whole chain was). */
export type RollbackContext = { chainId: number; ancestor: bigint | null };

/** The indexer starts: `blockHashes` reads the hashes of blocks from the node (every one asked, or it throws). */
export type StartContext = { chainId: number; blockHashes: (numbers: bigint[]) => Promise<Map<bigint, string>> };

/** The indexer caught up: nothing left below head − CONFIRMATIONS. */
export type IdleContext = { chainId: number; indexedBlock: bigint | null; indexedTime: number | null; head: bigint };

/**
 * Work that must commit atomically with the index (a transactional outbox, rollups). Hooks run inside the
 * indexer's transactions, in registration order; a hook that throws aborts the batch, which is then retried.
 */
export type IndexerHook = {
  name: string;
  /**
   * Inside the batch's transaction before its append-only rows are written, possibly while the batches in
   * `inFlight` are still committing: may annotate the rows about to be written, and write rows of its own if it
   * accounts for what those batches change (the state tables may not show it yet).
   */
  beforeBulk?(tx: Tx, ctx: BatchContext): Promise<void>;
  /** Right after the batch's append-only rows were written, under the same terms as `beforeBulk`. */
  afterBulk?(tx: Tx, ctx: BatchContext): Promise<void>;
  /**
   * Inside the batch's transaction, after the previous batch committed and this batch's `events` and `activity`
   * rows were written, but before the state tables (modules, plans, tokens, subscriptions, blocked_subscribers)
   * move to the batch's end: queried from `tx`, they still hold the state as of `fromBlock - 1`.
   */
  onBatch?(tx: Tx, ctx: BatchContext): Promise<void>;
  /**
   * After the batch's transaction committed (a rollback's re-ingested batch included), outside it; must not throw.
   * For effects that count a batch once: a batch that fails runs the hooks above again when it is retried.
   */
  afterCommit?(ctx: BatchContext): void;
  /** Inside the rollback's transaction, before the rows above the ancestor are deleted. */
  beforeRollback?(tx: Tx, ctx: RollbackContext): Promise<void>;
  /** Inside the rollback's transaction, after the rows above the ancestor were deleted and the state rebuilt. */
  onRollback?(tx: Tx, ctx: RollbackContext): Promise<void>;
  /** At start, before the first poll (leader or standby), outside any transaction (lock what you need). */
  onStart?(sql: Sql, ctx: StartContext): Promise<void>;
  /** After a poll that found nothing to index, outside any transaction (lock what you need). */
  onIdle?(sql: Sql, ctx: IdleContext): Promise<void>;
};
