import type { Logger } from "../common/log";
import type { Q } from "../db/query";
import type { PlanInfo, SubState } from "../domain/subscription";
import { WaitTimeoutError } from "./errors";
import { loadCaches, loadCursor, type Cursor } from "./store";
import { loadIncompleteTokens, type TokenBook } from "./token-book";

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
  /** Every stored recent block has another hash on the chain: a deep reorg, acted on once several polls agree. */
  deepReorgSuspected: boolean;
  /** Tokens whose `symbol()`/`decimals()` did not answer yet and are read again with backoff. */
  tokensPending: number;
};

/**
 * The indexer's in-memory state: the cursor (and who waits for it), caches of the small tables, the head seen
 * and whether it stalled, and what `status()` reports.
 */
export function createIndexerState(opts: { chainId: number; stallAfterMs: number; tokens: TokenBook; log: Logger }) {
  const { chainId, stallAfterMs, log } = opts;
  const waiters = new Set<{ n: bigint; resolve: () => void }>();
  let headChangedAt = Date.now();
  let stalled = false;

  const state = {
    cursor: null as Cursor | null,
    modules: new Map<string, string>(),
    plans: new Map<string, PlanInfo>(),
    subCache: new Map<string, SubState>(),
    tokens: opts.tokens,
    /** Caches must be reloaded from the database before the next batch (a write failed, leadership changed). */
    needReload: true,
    leader: false,
    headBlock: null as bigint | null,
    lastError: null as string | null,
    /** Why the last poll waited (a lagging node, a suspected deep reorg): reported as `lastError`. */
    notice: null as string | null,
    lastSuccessAt: null as string | null,
    deepReorgSuspected: false,

    setCursor(c: Cursor | null) {
      state.cursor = c;
      for (const w of waiters) if (c && c.block >= w.n) w.resolve();
    },

    /** Whether the caches must be (re)loaded before the next poll. */
    stale: () => state.needReload || state.subCache.size > SUB_CACHE_LIMIT,

    /** Reloads the cursor and caches from `q` (pool or rollback transaction); the caller clears `needReload`. */
    async reload(q: Q, cursorToo = true) {
      if (cursorToo) state.setCursor(await loadCursor(q, chainId));
      const caches = await loadCaches(q, chainId);
      state.modules = caches.modules;
      state.plans = caches.plans;
      state.tokens.reset(caches.tokens, await loadIncompleteTokens(q, chainId));
      state.subCache = new Map();
    },

    /**
     * Records the head a poll saw. A head below the highest seen (a lagging backend) changes nothing: the head
     * only moves forward, and stalls are measured against its last forward move.
     */
    observeHead(head: bigint) {
      if (state.headBlock === null || head > state.headBlock) {
        state.headBlock = head;
        headChangedAt = Date.now();
        if (stalled) log("info", "indexer head moving again", { chainId, head });
        stalled = false;
      } else if (!stalled && Date.now() - headChangedAt > stallAfterMs) {
        stalled = true;
        log("warn", "indexer head stalled", { chainId, head, sinceMs: Date.now() - headChangedAt });
      }
    },

    /** After a rollback the chain's head may truly be lower: take what the node says. */
    resetHead(head: bigint) {
      state.headBlock = head;
      headChangedAt = Date.now();
    },

    stallMessage: () =>
      stalled && state.headBlock !== null
        ? `head stalled at block ${state.headBlock} for ${Math.round((Date.now() - headChangedAt) / 1000)} s`
        : null,

    status: (): IndexerStatus => ({
      chainId,
      leader: state.leader,
      indexedBlock: state.cursor ? state.cursor.block.toString() : null,
      headBlock: state.headBlock === null ? null : state.headBlock.toString(),
      lastError: state.lastError,
      lastSuccessAt: state.lastSuccessAt,
      deepReorgSuspected: state.deepReorgSuspected,
      tokensPending: state.tokens.pending(),
    }),

    waitForBlock(n: bigint, timeoutMs = 30_000): Promise<void> {
      if (state.cursor && state.cursor.block >= n) return Promise.resolve();
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
          const indexed = state.cursor?.block ?? "none";
          reject(new WaitTimeoutError(`block ${n} not indexed within ${timeoutMs} ms (indexed: ${indexed})`));
        }, timeoutMs);
        waiters.add(w);
      });
    },
  };
  return state;
}

/** The indexer's state object. */
export type IndexerState = ReturnType<typeof createIndexerState>;
