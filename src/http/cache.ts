/**
 * In-process caches of the hot read paths (the indexed authorization check, activity pages). They hold data, never
 * decisions about the caller: rate limits and credentials are checked on every request before a cache is read.
 *
 * Invalidation: every entry belongs to one chain and carries that chain's generation, which the indexer's batch
 * notification (`Notifier`: LISTEN/NOTIFY on Postgres, in-process on PGlite) increments after each commit. A load
 * captures the generation BEFORE its query and is stored only if the generation is still the same afterwards, so a
 * query that read before a commit never stores its result after that commit's notification. Entries also end at a
 * time the loader gives (the check: the first moment a row turns EXPIRED with no event) and after `maxAgeMs`, which
 * bounds staleness when a notification is lost (a dropped LISTEN connection). A hit in the last quarter of an
 * entry's life reloads it in the background under the same rules (refresh ahead), so keys in steady use do not wait
 * for the database when their entry ends. Without a live subscription to the notifier nothing is cached.
 */
import type { Notifier } from "../db/notify";

/** Per-chain generations, moved by the indexer's batch notifications. */
export type ChainGenerations = {
  /** Whether invalidation is live (subscribed to the notifier); when false, caches pass every load through. */
  live: () => boolean;
  /** The current generation of `chainId`. */
  of: (chainId: number) => number;
  /** Starts a new generation of `chainId` (what a batch notification does). */
  bump: (chainId: number) => void;
  /** Resolves once the subscription is live (or failed, or there is no notifier). */
  ready: Promise<void>;
  /** Stops listening; caches then pass every load through. */
  stop: () => Promise<void>;
};

/** Subscribes to `notifier` and counts committed batches per chain; not live without a notifier. */
export function createChainGenerations(notifier: Notifier | undefined): ChainGenerations {
  const gens = new Map<number, number>();
  let live = false;
  let stopped = false;
  let unsubscribe: (() => Promise<void>) | undefined;
  const bump = (chainId: number) => {
    gens.set(chainId, (gens.get(chainId) ?? 0) + 1);
  };
  const ready = notifier
    ? notifier
        .subscribe((batch) => bump(Number(batch.chainId)))
        .then(async (unsub) => {
          if (stopped) return unsub();
          unsubscribe = unsub;
          live = true;
        })
        .catch(() => {
          // No notifications, no cache: every request reads the database.
        })
    : Promise.resolve();
  return {
    live: () => live,
    of: (chainId) => gens.get(chainId) ?? 0,
    bump,
    ready,
    stop: async () => {
      stopped = true;
      live = false;
      await unsubscribe?.();
    },
  };
}

/** What a loader returns: the value and, optionally, how long it stays true with no new batch (ms; default ∞). */
export type Loaded<V> = { value: V; ttlMs?: number };

/** Bounds and clock of a {@link ResponseCache}. */
export type ResponseCacheOptions<V> = {
  generations: ChainGenerations;
  /** Entry cap (LRU beyond it). Default 100,000. */
  maxEntries?: number;
  /** Cap on the summed {@link ResponseCacheOptions.sizeOf} of the entries (LRU beyond it). Default: none. */
  maxBytes?: number;
  /** Hard age limit of an entry, counted from before its query. Default 2,000 ms. */
  maxAgeMs?: number;
  /** Approximate size of a value in bytes (for `maxBytes`); the key is added. Default 0. */
  sizeOf?: (value: V) => number;
  /** Monotonic clock in ms (tests move it). Default `performance.now`. */
  now?: () => number;
};

/** Counters of a cache, for tests and benchmarks. */
export type CacheStats = {
  hits: number;
  misses: number;
  stores: number;
  races: number;
  /** Background reloads started by hits in the last quarter of an entry's life. */
  refreshes: number;
  /** Hits served after an `admit` said yes (the check's answers before routing). */
  admitted: number;
  entries: number;
  bytes: number;
};

/** A bounded, generation-checked LRU of loaded values. */
export type ResponseCache<V> = {
  /** The cached value of `key` (on `chainId`) when valid, else `load()`'s, stored when no batch committed meanwhile. */
  get: (key: string, chainId: number, load: () => Promise<Loaded<V>>) => Promise<V>;
  /**
   * The cached value of `key` when valid (counted as a hit, refreshed ahead with `load` near its end), else
   * undefined with nothing counted: the synchronous part of `get`, for a hot path that answers a hit without a
   * promise and calls `get` on undefined. With `admit`, a valid value is served only if `admit(value)` says so
   * (called once, after the validity checks and before anything is counted): false is undefined, nothing counted.
   */
  hit: (key: string, chainId: number, load: () => Promise<Loaded<V>>, admit?: (value: V) => boolean) => V | undefined;
  /** Counters since creation. */
  stats: () => CacheStats;
  /** Drops every entry. */
  clear: () => void;
};

type Entry<V> = { value: V; gen: number; expiresAt: number; size: number };

/** Default hard age of cached entries: the spec lets the indexed answer lag the chain by a few seconds. */
export const DEFAULT_CACHE_MAX_AGE_MS = 2_000;
/** Default entry cap of the authorization check cache. */
export const DEFAULT_CHECK_CACHE_ENTRIES = 100_000;
/** Default (estimated) byte cap of the authorization check cache. */
export const DEFAULT_CHECK_CACHE_BYTES = 64 * 1024 * 1024;
/** Default byte cap of the activity page cache. */
export const DEFAULT_ACTIVITY_CACHE_BYTES = 64 * 1024 * 1024;

/** Creates a cache (see the module comment for the rules). */
export function createResponseCache<V>(opts: ResponseCacheOptions<V>): ResponseCache<V> {
  const gens = opts.generations;
  const maxEntries = opts.maxEntries ?? DEFAULT_CHECK_CACHE_ENTRIES;
  const maxBytes = opts.maxBytes ?? Infinity;
  const maxAgeMs = opts.maxAgeMs ?? DEFAULT_CACHE_MAX_AGE_MS;
  const sizeOf = opts.sizeOf ?? (() => 0);
  const now = opts.now ?? (() => performance.now());
  const entries = new Map<string, Entry<V>>();
  const stats = { hits: 0, misses: 0, stores: 0, races: 0, refreshes: 0, admitted: 0 };
  const refreshing = new Set<string>();
  let bytes = 0;

  const drop = (key: string, e: Entry<V>) => {
    entries.delete(key);
    bytes -= e.size;
  };

  const store = (key: string, e: Entry<V>) => {
    const old = entries.get(key);
    if (old) drop(key, old);
    if (e.size > maxBytes) return;
    entries.set(key, e);
    bytes += e.size;
    stats.stores++;
    // Map order is insertion order: the first key is the least recently used.
    while (entries.size > maxEntries || bytes > maxBytes) {
      const [k, v] = entries.entries().next().value as [string, Entry<V>];
      drop(k, v);
    }
  };

  /** Loads and stores under the generation rule: captured before the query, unchanged after it, or not stored. */
  const fill = async (key: string, chainId: number, load: () => Promise<Loaded<V>>): Promise<V> => {
    const gen = gens.of(chainId);
    const started = now();
    const loaded = await load();
    if (!gens.live() || gens.of(chainId) !== gen) {
      stats.races++;
      return loaded.value;
    }
    const expiresAt = started + Math.min(maxAgeMs, loaded.ttlMs ?? Infinity);
    if (expiresAt > now()) {
      store(key, { value: loaded.value, gen, expiresAt, size: sizeOf(loaded.value) + key.length });
    }
    return loaded.value;
  };

  const hit = (
    key: string,
    chainId: number,
    load: () => Promise<Loaded<V>>,
    admit?: (value: V) => boolean,
  ): V | undefined => {
    if (!gens.live()) return undefined;
    const e = entries.get(key);
    if (!e) return undefined;
    const t = now();
    if (e.gen !== gens.of(chainId) || t >= e.expiresAt) {
      drop(key, e);
      return undefined;
    }
    if (admit) {
      if (!admit(e.value)) return undefined;
      stats.admitted++;
    }
    stats.hits++;
    entries.delete(key);
    entries.set(key, e);
    // Refresh ahead: a key in use is reloaded in the background in the last quarter of its life, so its
    // requests keep hitting instead of waiting for the database when it ends. The reload follows `fill`'s
    // rules; until it is stored, this (still valid) entry is served.
    if (e.expiresAt - t < maxAgeMs / 4 && !refreshing.has(key)) {
      refreshing.add(key);
      stats.refreshes++;
      fill(key, chainId, load)
        .catch(() => {}) // the next miss reports the error
        .finally(() => refreshing.delete(key));
    }
    return e.value;
  };

  return {
    get: async (key, chainId, load) => {
      if (!gens.live()) return (await load()).value;
      const value = hit(key, chainId, load);
      if (value !== undefined) return value;
      stats.misses++;
      return fill(key, chainId, load);
    },
    hit,
    stats: () => ({ ...stats, entries: entries.size, bytes }),
    clear: () => {
      entries.clear();
      bytes = 0;
    },
  };
}
