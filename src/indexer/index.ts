import type { PublicClient } from "viem";
import { ConfigError, type Config } from "../common/config";
import type { Db, Sql } from "../db/client";
import type { Notifier } from "../db/notify";
import type { Logger } from "../common/log";
import { deriveBatch, subscriptionsToLoad, type SubState } from "./derive";
import {
  CursorMovedError,
  LeadershipLostError,
  ProcessorMismatchError,
  RangeRefusedError,
  ReorgDetectedError,
  RpcUnavailableError,
  WaitTimeoutError,
} from "./errors";
import { fetchLogs, prepareBatch, splitFetched, type FetchedLogs, type PreparedBatch } from "./fetch";
import { createLeaderLock } from "./lock";
import { findAncestor, rollback } from "./reorg";
import { defaultRetry, getHead, getHeader, getHeaders, RangeSizer, type Header, type RetryPolicy } from "../chain/rpc";
import {
  ensureChain,
  loadBlocks,
  loadCaches,
  loadCursor,
  loadProgress,
  loadSubscriptions,
  moveCursor,
  saveBlocks,
  touchHead,
  type Cursor,
  type Tx,
} from "./store";
import { readTokenMeta, type TokenMeta } from "./tokens";
import { writeBulk, writeState, type BatchRows } from "./write";
import type { IndexerHook } from "./hooks";

/** One `eth_getLogs` range being fetched. */
type Piece = { from: bigint; to: bigint; promise: Promise<FetchedLogs> };

// Allocation states kept in memory between batches; past this the cache is dropped and reloaded on demand.
const SUB_CACHE_LIMIT = 200_000;

/** What `status()` reports; block numbers as decimal strings, times as ISO 8601. */
export type IndexerStatus = {
  chainId: number;
  leader: boolean;
  indexedBlock: string | null;
  headBlock: string | null;
  lastError: string | null;
  lastSuccessAt: string | null;
};

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
  /** Batch transactions in flight during a backfill on a server (default 3, at most pool size − 2; PGlite 1). */
  writeDepth?: number;
};

/** Options of {@link createIndexer}. */
export type IndexerOptions = {
  sql: Sql;
  db?: Pick<Db, "kind">;
  client: PublicClient;
  config: Pick<Config, "PROCESSOR_ADDRESS" | "START_BLOCK" | "CONFIRMATIONS" | "POLL_INTERVAL_MS"> & {
    chainId: number;
  };
  notifier?: Notifier;
  log?: Logger;
  tuning?: IndexerTuning;
  /** Work committed in the indexer's own transactions (webhook outbox, rollups). */
  hooks?: IndexerHook[];
};

/** A running indexer of one chain. */
export type Indexer = {
  start(): Promise<void>;
  stop(): Promise<void>;
  status(): IndexerStatus;
  waitForBlock(n: bigint, timeoutMs?: number): Promise<void>;
};

const sameCursor = (a: Cursor | null, b: Cursor | null) =>
  a === null || b === null ? a === b : a.block === b.block && a.hash === b.hash;

const describe = (err: unknown) => {
  const e = err as { shortMessage?: string; message?: string; name?: string };
  return `${e?.name ?? "Error"}: ${e?.shortMessage ?? e?.message ?? String(err)}`.slice(0, 500);
};

/**
 * Creates the chain → Postgres indexer: discovers modules from the processor, ingests every event of
 * docs/protocol.md into `events` and the derived tables, follows the head with reorg handling, and commits each
 * batch with its cursor in one transaction. One writer per chain (advisory lock); others wait as standby.
 */
export function createIndexer(opts: IndexerOptions): Indexer {
  const { sql, client, config, notifier } = opts;
  const log: Logger = opts.log ?? (() => {});
  const tuning = opts.tuning ?? {};
  const chainId = config.chainId;
  const startBlock = BigInt(config.START_BLOCK ?? 0);
  const confirmations = BigInt(config.CONFIRMATIONS ?? 0);
  const window = confirmations > 64n ? confirmations : 64n;
  const pollMs = Math.max(1, config.POLL_INTERVAL_MS ?? 1000);
  const policy = tuning.retry ?? defaultRetry;
  const stallAfterMs = tuning.stallAfterMs ?? Math.max(120_000, pollMs * 30);
  const maxBackoffMs = tuning.maxBackoffMs ?? 30_000;
  const batchLogs = tuning.targetLogs ?? 5_000;
  const sizer = new RangeSizer(BigInt(tuning.initialRange ?? 50), BigInt(tuning.maxRange ?? 100_000), batchLogs);
  const processor = config.PROCESSOR_ADDRESS?.toLowerCase() ?? "";
  const hooks = opts.hooks ?? [];
  const runBatchHooks = async (tx: Tx, rows: BatchRows, head: bigint, reorg: boolean) => {
    const { batch } = rows;
    const ctx = {
      chainId,
      fromBlock: batch.from,
      toBlock: batch.to,
      toTime: batch.toHeader.timestamp,
      head,
      rows,
      reorg,
    };
    for (const h of hooks) await h.onBatch?.(tx, ctx);
  };
  // Transactions in flight during a backfill: several on a server (the next batches' rows go in while one
  // commits), 1 on PGlite (one session).
  let depth = 1;
  let useCopy = false;

  let lock: ReturnType<typeof createLeaderLock> | null = null;
  let running = false;
  let stopping = false;
  let loopDone: Promise<void> = Promise.resolve();
  let leader = false;
  let needReload = true;
  let cursor: Cursor | null = null;
  let modules = new Map<string, string>();
  let plans = new Map<string, { token: string; interval: number }>();
  let tokens = new Set<string>();
  let subCache = new Map<string, SubState>();
  let headBlock: bigint | null = null;
  let headChangedAt = Date.now();
  let stalled = false;
  let lastError: string | null = null;
  let lastSuccessAt: string | null = null;
  const sleepers = new Set<() => void>();
  const waiters = new Set<{ n: bigint; resolve: () => void }>();

  const sleep = (ms: number) =>
    new Promise<void>((resolve) => {
      const done = () => {
        clearTimeout(timer);
        sleepers.delete(done);
        resolve();
      };
      const timer = setTimeout(done, ms);
      sleepers.add(done);
    });

  const setCursor = (c: Cursor | null) => {
    cursor = c;
    for (const w of waiters) if (c && c.block >= w.n) w.resolve();
  };

  const observeHead = (head: bigint) => {
    if (head !== headBlock) {
      headBlock = head;
      headChangedAt = Date.now();
      if (stalled) log("info", "indexer head moving again", { chainId, head });
      stalled = false;
    } else if (!stalled && Date.now() - headChangedAt > stallAfterMs) {
      stalled = true;
      log("warn", "indexer head stalled", { chainId, head, sinceMs: Date.now() - headChangedAt });
    }
  };

  const stallMessage = () =>
    stalled && headBlock !== null
      ? `head stalled at block ${headBlock} for ${Math.round((Date.now() - headChangedAt) / 1000)} s`
      : null;

  async function loadState(): Promise<void> {
    setCursor(await loadCursor(sql, chainId));
    const caches = await loadCaches(sql, chainId);
    modules = caches.modules;
    plans = caches.plans;
    tokens = caches.tokens;
    subCache = new Map();
    needReload = false;
  }

  /** Logs of exactly [from, to]: a refused range is fetched as two halves (never asked again as a whole). */
  async function fetchRange(from: bigint, to: bigint, known: string[]): Promise<FetchedLogs> {
    let hint = 0n;
    if (!sizer.wasRefused(from, to)) {
      try {
        return await fetchLogs(client, processor, known, from, to, policy, tuning.addressLimit);
      } catch (err) {
        if (!(err instanceof RangeRefusedError)) throw err;
        sizer.refusal(from, to, err);
        log("debug", "eth_getLogs range refused, splitting", { from, to, kind: err.kind, next: sizer.size });
        if (err.suggestedSize !== undefined && err.suggestedSize < to - from + 1n) hint = err.suggestedSize;
      }
    }
    if (to <= from) throw new RpcUnavailableError(`eth_getLogs refused the single block ${from}`);
    const mid = hint > 0n ? from + hint - 1n : (from + to) / 2n;
    const left = await fetchRange(from, mid, known);
    const right = await fetchRange(mid + 1n, to, known);
    return {
      from,
      to,
      processorLogs: left.processorLogs.concat(right.processorLogs),
      moduleLogs: left.moduleLogs.concat(right.moduleLogs),
      queried: left.queried,
    };
  }

  /**
   * Starts fetching the next range from `from` (span from the adaptive sizer). A span larger than any answered
   * so far may reach a much denser stretch of chain: it is fetched as four pieces, consumed in order — the first
   * alone, the rest in parallel once it is in — so writing starts while the node still works on the rest.
   */
  function fetchAhead(from: bigint, target: bigint, known: Iterable<string>): Piece[] {
    const list = [...known];
    const to = sizer.nextTo(from, target);
    const span = to - from + 1n;
    const count = sizer.exploring(span) && span >= 8n ? 4n : 1n;
    const pieces: Piece[] = [];
    let first: Promise<unknown> | null = null;
    for (let i = 0n; i < count; i++) {
      const pFrom = from + (span * i) / count;
      const pTo = i + 1n === count ? to : from + (span * (i + 1n)) / count - 1n;
      const promise: Promise<FetchedLogs> = first
        ? first.then(
            () => fetchRange(pFrom, pTo, list),
            () => fetchRange(pFrom, pTo, list),
          )
        : fetchRange(pFrom, pTo, list);
      first ??= promise;
      promise.catch(() => {});
      pieces.push({ from: pFrom, to: pTo, promise });
    }
    void Promise.all(pieces.map((p) => p.promise)).then(
      (all) =>
        sizer.success(
          span,
          all.reduce((n, f) => n + f.processorLogs.length + f.moduleLogs.length, 0),
        ),
      () => {},
    );
    return pieces;
  }

  /** Metadata of tokens first seen in `batch` (all of its plan tokens when `all`). */
  async function tokenMetas(batch: PreparedBatch | null, all = false): Promise<TokenMeta[]> {
    if (!batch) return [];
    const wanted = new Set<string>();
    for (const ev of batch.events) {
      const token = String(ev.args.token);
      if (ev.name === "PlanCreated" && (all || !tokens.has(token))) wanted.add(token);
    }
    return Promise.all([...wanted].map((t) => readTokenMeta(client, t, policy)));
  }

  /**
   * Derives a batch's rows from the cached state (allocations not cached are loaded first). Caches move
   * forward at once, so the next batch can be derived while this one is still being written; any failed
   * write reloads them from the database.
   */
  async function derive(batch: PreparedBatch): Promise<BatchRows> {
    const metas = await tokenMetas(batch);
    const missing = subscriptionsToLoad(batch.events).filter((id) => !subCache.has(id));
    for (const [id, sub] of await loadSubscriptions(sql, chainId, missing)) subCache.set(id, sub);
    const derived = deriveBatch(batch.events, modules, plans, subCache);
    for (const m of metas) tokens.add(m.address);
    return { batch, derived, tokens: metas };
  }

  const verifyCursor = async (tx: Tx, expected: Cursor | null) => {
    const current = await loadCursor(tx, chainId, true);
    if (!sameCursor(current, expected)) {
      throw new CursorMovedError(
        `cursor is ${current?.block ?? "empty"}, batch expected ${expected?.block ?? "empty"}`,
      );
    }
  };

  const announce = (rows: BatchRows | null, fromBlock: bigint, toBlock: bigint, reorg: boolean, ms: number) => {
    const orphans = rows?.derived.orphans ?? 0;
    if (orphans > 0) log("warn", "events of unknown modules or subscriptions skipped", { chainId, orphans });
    const events = rows?.batch.events.length ?? 0;
    log("debug", "indexed batch", { chainId, fromBlock, toBlock, events, reorg, writeMs: Math.round(ms) });
    if (notifier) {
      notifier
        .publish({ chainId, fromBlock: fromBlock.toString(), toBlock: toBlock.toString(), reorg })
        .catch((err) => log("warn", "batch notification failed", { chainId, error: describe(err) }));
    }
  };

  /**
   * Writes one batch and moves the cursor in one transaction. The append-only rows go first; then, once the
   * previous batch (`after`) has committed, the transaction locks the cursor row and checks that it is the
   * one this batch was built on — so a replayed or concurrent batch aborts instead of applying twice.
   */
  async function write(rows: BatchRows, expected: Cursor | null, head: bigint, after: Promise<void> | null) {
    const { batch } = rows;
    const next: Cursor = { block: batch.to, hash: batch.toHeader.hash, time: batch.toHeader.timestamp };
    const started = performance.now();
    await sql.begin(async (tx) => {
      await writeBulk(tx, chainId, rows, useCopy);
      if (after) await after.catch(() => Promise.reject(new CursorMovedError("the previous batch did not commit")));
      await verifyCursor(tx, expected);
      await runBatchHooks(tx, rows, head, false);
      await writeState(tx, chainId, rows, window);
      await moveCursor(tx, chainId, next, head);
    });
    setCursor(next);
    announce(rows, batch.from, batch.to, false, performance.now() - started);
  }

  /** Rolls back to the newest block both the index and the chain share, and re-ingests from there, atomically. */
  async function handleReorg(head: bigint, target: bigint): Promise<void> {
    const old = cursor!;
    const ancestor = await findAncestor(sql, client, chainId, old, head, policy);
    if (ancestor) log("warn", "reorg detected", { chainId, indexed: old.block, ancestor: ancestor.block, head });
    else
      log("error", "reorg deeper than the stored window: reindexing from START_BLOCK", { chainId, indexed: old.block });
    const from = ancestor ? ancestor.block + 1n : startBlock;
    let batch: PreparedBatch | null = null;
    if (from <= target) {
      // Modules as of the ancestor: those created in orphaned blocks are not known on the new branch.
      const rows = await sql<{ address: string; merchant: string }[]>`
        select address, merchant from modules where chain_id = ${chainId} and block_number < ${from.toString()}`;
      const atAncestor = new Map(rows.map((r) => [r.address, r.merchant]));
      const fetched = await fetchRange(from, sizer.nextTo(from, target), [...atAncestor.keys()]);
      batch = await prepareBatch({ client, fetched, modules: atAncestor, base: ancestor, target, window, policy });
    }
    // Tokens deleted with orphaned plans may come back: read every plan token of the new branch's range.
    const metas = await tokenMetas(batch, true);
    const next: Cursor | null = batch
      ? { block: batch.to, hash: batch.toHeader.hash, time: batch.toHeader.timestamp }
      : ancestor;
    // Hashes of the window below the ancestor may have been pruned while the index stood higher: fetch them back.
    let refill: Header[] = [];
    if (ancestor && next) {
      const low = next.block - window + 1n > startBlock ? next.block - window + 1n : startBlock;
      const stored = new Set((await loadBlocks(sql, chainId)).map((b) => b.number));
      const missing: bigint[] = [];
      for (let n = low; n <= ancestor.block; n++) if (!stored.has(n)) missing.push(n);
      const headers = await getHeaders(client, missing, policy);
      refill = [...headers.values()].filter((h): h is Header => h !== null);
      if (refill.length !== missing.length) throw new ReorgDetectedError("blocks below the ancestor vanished");
    }
    let batchRows: BatchRows | null = null;
    needReload = true; // caches are rebuilt from the rolled-back tables below, and reloaded if this fails
    const started = performance.now();
    await sql.begin(async (tx) => {
      await verifyCursor(tx, old);
      const { events } = await rollback(tx, chainId, ancestor);
      log("warn", "indexer rolled back", { chainId, to: ancestor?.block ?? null, removedEvents: events });
      for (const h of hooks) await h.onRollback?.(tx, { chainId, ancestor: ancestor?.block ?? null });
      const caches = await loadCaches(tx, chainId);
      modules = caches.modules;
      plans = caches.plans;
      tokens = caches.tokens;
      subCache = new Map();
      if (batch) {
        const subs = await loadSubscriptions(tx, chainId, subscriptionsToLoad(batch.events));
        batchRows = { batch, derived: deriveBatch(batch.events, modules, plans, subs), tokens: metas };
        await writeBulk(tx, chainId, batchRows, useCopy);
        await runBatchHooks(tx, batchRows, head, true);
        await writeState(tx, chainId, batchRows, window);
      }
      if (refill.length > 0) await saveBlocks(tx, chainId, refill, (next?.block ?? 0n) - window);
      await moveCursor(tx, chainId, next, head);
    });
    for (const m of metas) tokens.add(m.address);
    needReload = false;
    setCursor(next);
    announce(batchRows, from, batch?.to ?? next?.block ?? startBlock - 1n, true, performance.now() - started);
  }

  /** One poll: check for a reorg, then index everything up to head − CONFIRMATIONS. Returns true if behind. */
  async function step(): Promise<boolean> {
    if (needReload || subCache.size > SUB_CACHE_LIMIT) await loadState();
    const head = await getHead(client, policy);
    observeHead(head);
    const target = head - confirmations;
    if (cursor && (head < cursor.block || cursor.block + window > head)) {
      const h = head >= cursor.block ? await getHeader(client, cursor.block, policy) : null;
      if (!h || h.hash !== cursor.hash) {
        await handleReorg(head, target);
        return true;
      }
    }
    let pending: Piece[] = [];
    const queue: Promise<void>[] = [];
    let expected = cursor;
    try {
      while (!stopping) {
        const from: bigint = expected ? expected.block + 1n : startBlock;
        if (from > target) break;
        if (pending[0]?.from !== from) pending = fetchAhead(from, target, modules.keys());
        const fetched = await pending.shift()!.promise;
        // Deep ranges (final by the reorg window) are fetched one ahead while this one is written.
        const nextFrom = fetched.to + 1n;
        if (pending.length === 0 && nextFrom <= target && nextFrom + sizer.size + window <= head) {
          pending = fetchAhead(nextFrom, target, modules.keys());
        }
        for (const part of splitFetched(fetched, batchLogs)) {
          const batch = await prepareBatch({ client, fetched: part, modules, base: expected, target, window, policy });
          const rows = await derive(batch);
          const committed = write(rows, expected, head, queue.at(-1) ?? null);
          committed.catch(() => {});
          queue.push(committed);
          expected = { block: batch.to, hash: batch.toHeader.hash, time: batch.toHeader.timestamp };
          // Up to `depth` transactions in flight: the next batch's rows go in while this one commits.
          while (queue.length >= depth) await queue.shift();
          if (stopping) break;
        }
      }
      while (queue.length > 0) await queue.shift();
    } catch (err) {
      needReload = true;
      await Promise.allSettled(queue);
      throw err;
    }
    if (expected === cursor) {
      await touchHead(sql, chainId, head);
      const idle = { chainId, indexedBlock: cursor?.block ?? null, indexedTime: cursor?.time ?? null, head };
      for (const h of hooks) await h.onIdle?.(sql, idle);
    }
    const from = cursor ? cursor.block + 1n : startBlock;
    return from <= target;
  }

  async function loop(): Promise<void> {
    let failures = 0;
    while (!stopping) {
      try {
        if (!leader) {
          leader = await lock!.acquire();
          if (!leader) {
            // Standby: follow the leader's progress from the database.
            const progress = await loadProgress(sql, chainId);
            setCursor(progress.cursor);
            headBlock = progress.head;
            await sleep(Math.min(Math.max(pollMs, 100), 1000));
            continue;
          }
          log("info", "indexer is the leader", { chainId });
          needReload = true;
        } else if (!(await lock!.check())) {
          leader = false;
          throw new LeadershipLostError("the session holding the indexer lock was lost");
        }
        const behind = await step();
        failures = 0;
        lastError = stallMessage();
        lastSuccessAt = new Date().toISOString();
        if (!behind && !stopping) await sleep(pollMs);
      } catch (err) {
        if (stopping) break;
        failures++;
        needReload = true;
        if (err instanceof ReorgDetectedError && failures < 5) {
          // The chain moved under this poll (a reorg in progress): look again at once.
          log("info", "chain changed during a poll, retrying", { chainId, reason: err.message });
          await sleep(Math.min(pollMs, 50));
          continue;
        }
        lastError = describe(err);
        const delay = Math.min(maxBackoffMs, Math.max(pollMs, 100) * 2 ** Math.min(failures - 1, 10));
        log(failures > 3 ? "error" : "warn", "indexer poll failed", { chainId, error: lastError, retryInMs: delay });
        await sleep(delay);
      }
    }
  }

  return {
    async start() {
      if (running) return;
      if (!processor) throw new ConfigError("PROCESSOR_ADDRESS is required to index");
      const kind =
        opts.db?.kind ?? ((await sql`select version() as v`)[0]!.v.includes("PGlite") ? "pglite" : "postgres");
      const row = await ensureChain(sql, chainId, processor, startBlock);
      if (row.processor !== processor) {
        throw new ProcessorMismatchError(
          `database indexes processor ${row.processor} on chain ${chainId}, not ${processor}`,
        );
      }
      if (row.startBlock !== startBlock) {
        log("warn", "START_BLOCK differs from the indexed start; keeping the existing index", {
          chainId,
          stored: row.startBlock,
          configured: startBlock,
        });
      }
      setCursor(row.cursor);
      // Reserving a connection for the lock needs a pool: PGlite (or a one-connection pool) has no second session.
      const poolSize = (sql as unknown as { options?: { max?: number } }).options?.max ?? 10;
      lock = createLeaderLock(sql, chainId, kind === "postgres" && poolSize > 1);
      depth = kind === "postgres" && poolSize > 2 ? Math.max(1, Math.min(tuning.writeDepth ?? 3, poolSize - 2)) : 1;
      useCopy = kind === "postgres";
      running = true;
      stopping = false;
      loopDone = loop();
    },
    async stop() {
      if (!running) return;
      stopping = true;
      for (const wake of [...sleepers]) wake();
      await loopDone;
      await lock?.release();
      leader = false;
      running = false;
    },
    status: () => ({
      chainId,
      leader,
      indexedBlock: cursor ? cursor.block.toString() : null,
      headBlock: headBlock === null ? null : headBlock.toString(),
      lastError,
      lastSuccessAt,
    }),
    waitForBlock(n: bigint, timeoutMs = 30_000) {
      if (cursor && cursor.block >= n) return Promise.resolve();
      return new Promise<void>((resolve, reject) => {
        const w = {
          n,
          resolve: () => {
            clearTimeout(timer);
            waiters.delete(w);
            resolve();
          },
        };
        const timer = setTimeout(() => {
          waiters.delete(w);
          reject(
            new WaitTimeoutError(`block ${n} not indexed within ${timeoutMs} ms (indexed: ${cursor?.block ?? "none"})`),
          );
        }, timeoutMs);
        waiters.add(w);
      });
    },
  };
}
