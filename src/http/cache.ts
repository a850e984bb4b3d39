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
 *
 * Cursor polls (when given a database): every `confirmEveryMs` one statement reads every chain's cursor (indexed
 * block, hash and `updated_at`, which every committed batch and rollback sets in its transaction: moveCursor). A
 * cursor that differs from the previous poll's starts a new generation of its chain, as its notification would have
 * (one lost with a dropped LISTEN connection, or never sent by an indexer that died between its commit and its
 * NOTIFY), so such a loss costs at most one poll of staleness. A batch's notification carries its cursor's stamp, so
 * a commit starts one generation whichever of its notification and a poll finds it first (both come after the
 * commit, so either invalidates what was read before it). When the polled database is a streaming replica
 * (DATABASE_READ_URL), a notification only says that the primary committed: a load that follows it may read the
 * replica before it applied that commit, so there every poll that sees a cursor move starts a generation, whether
 * or not a notification carried its stamp (what the replica applied drives invalidation). A poll that saw no cursor move confirms that nothing
 * committed on any chain between the previous poll and its own start: in a cache with `confirmed`, the max age then
 * counts from that start for every entry loaded before it (`max(loaded, confirmed) + maxAgeMs`), so hot entries are
 * not reloaded every `maxAgeMs` while no batch commits. A failed or stalled poll confirms nothing: entries then end
 * at their max age, as without polls.
 */
import { cursorStamp, type Notifier } from "../db/notify";
import type { Sql } from "../db/client";
import { DEADLINE_FAST_MS, withDeadline } from "./deadline";

/** Per-chain generations, moved by the indexer's batch notifications. */
export type ChainGenerations = {
  /** Whether invalidation is live (subscribed to the notifier); when false, caches pass every load through. */
  live: () => boolean;
  /** The current generation of `chainId`. */
  of: (chainId: number) => number;
  /** Starts a new generation of `chainId` (what a batch notification does). */
  bump: (chainId: number) => void;
  /**
   * The start (on the caches' clock) of the latest cursor poll that found no cursor moved since the previous one:
   * nothing committed before it went unseen. -Infinity before the first such poll or without polls.
   */
  confirmedAt: () => number;
  /** Resolves once the subscription is live (or failed, or there is no notifier). */
  ready: Promise<void>;
  /** Stops listening and polling; caches then pass every load through. */
  stop: () => Promise<void>;
};

/** Cursor polls of {@link createChainGenerations}. */
export type CursorPollOptions = {
  /** Where the cursors are read: the database the cached answers are read from. */
  sql: Sql;
  /** Milliseconds between the end of a poll and the start of the next (default 500). */
  everyMs?: number;
  /** The caches' monotonic clock in ms (default `performance.now`). */
  now?: () => number;
};

/** Default interval of the cursor polls. */
export const DEFAULT_CONFIRM_EVERY_MS = 500;

/**
 * Subscribes to `notifier` and counts committed batches per chain; not live without a notifier. With `poll`, also
 * reads the chains' cursors every `everyMs` (see the module comment).
 */
export function createChainGenerations(notifier: Notifier | undefined, poll?: CursorPollOptions): ChainGenerations {
  const gens = new Map<number, number>();
  let live = false;
  let stopped = false;
  let unsubscribe: (() => Promise<void>) | undefined;
  let confirmedAt = -Infinity;
  let timer: ReturnType<typeof setTimeout> | undefined;
  const bump = (chainId: number) => {
    gens.set(chainId, (gens.get(chainId) ?? 0) + 1);
  };

  /** The previous poll's cursor stamp of each chain; undefined before a first successful poll. */
  let previous: Map<number, string> | undefined;
  /** The cursor stamp of each chain whose commit started the latest generation (by its notification or a poll). */
  const generationStamp = new Map<number, string>();
  /**
   * Whether the polled database is a streaming replica (`pg_is_in_recovery()`, read by every poll). A notification
   * then says the primary committed, not that the replica applied it: a load after the notification may still read
   * the replica's older rows, so the poll that sees the replica apply the commit starts its own generation.
   */
  let standby = false;
  const bumpFor = (chainId: number, stamp: string | undefined, fromPoll: boolean) => {
    if (!fromPoll && standby) {
      bump(chainId);
      return;
    }
    if (stamp !== undefined && generationStamp.get(chainId) === stamp) return;
    if (stamp !== undefined) generationStamp.set(chainId, stamp);
    bump(chainId);
  };
  const readCursors = async (sql: Sql, now: () => number) => {
    const started = now();
    const rows = await withDeadline(
      sql<{ chain_id: string; cursor: string; standby: boolean }[]>`
        select chain_id, ${cursorStamp(sql)} as cursor, pg_is_in_recovery() as standby from chains`,
      DEADLINE_FAST_MS,
    );
    if (rows.length > 0) standby = rows[0]!.standby === true;
    const cursors = new Map(rows.map((r) => [Number(r.chain_id), r.cursor]));
    if (previous) {
      let moved = false;
      for (const id of new Set([...previous.keys(), ...cursors.keys()])) {
        if (previous.get(id) !== cursors.get(id)) {
          bumpFor(id, cursors.get(id), true);
          moved = true;
        }
      }
      // Nothing committed between the previous poll and this one: every commit before `started` has been seen.
      if (!moved) confirmedAt = started;
    }
    previous = cursors;
  };
  const schedule = (p: CursorPollOptions) => {
    if (stopped) return;
    timer = setTimeout(() => {
      // A failed poll confirms nothing; the next one compares with the last poll that did read the cursors.
      readCursors(p.sql, p.now ?? (() => performance.now()))
        .catch(() => {})
        .finally(() => schedule(p));
    }, p.everyMs ?? DEFAULT_CONFIRM_EVERY_MS);
    timer.unref?.();
  };
  const ready = notifier
    ? notifier
        .subscribe((batch) => bumpFor(batch.chainId, batch.stamp, false))
        .then(async (unsub) => {
          if (stopped) return unsub();
          unsubscribe = unsub;
          // A first poll before going live: it tells whether the polled database is a replica.
          if (poll) await readCursors(poll.sql, poll.now ?? (() => performance.now())).catch(() => {});
          if (stopped) return;
          live = true;
          if (poll) schedule(poll);
        })
        .catch(() => {
          // No notifications, no cache: every request reads the database.
        })
    : Promise.resolve();
  return {
    live: () => live,
    of: (chainId) => gens.get(chainId) ?? 0,
    bump,
    confirmedAt: () => confirmedAt,
    ready,
    stop: async () => {
      stopped = true;
      live = false;
      clearTimeout(timer);
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
  /**
   * Count the max age from the generations' latest cursor confirmation when it is later than the entry's query
   * (see the module comment). Default false.
   */
  confirmed?: boolean;
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

/** A value with its generation, the start of its query, where its own validity ends (ms) and its size. */
type Entry<V> = { value: V; gen: number; started: number; validUntil: number; size: number };

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
  const confirmed = opts.confirmed ?? false;
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
    const entry = { value: loaded.value, gen, started, validUntil: started + (loaded.ttlMs ?? Infinity), size: 0 };
    if (expiresAt(entry) > now()) store(key, { ...entry, size: sizeOf(loaded.value) + key.length });
    return loaded.value;
  };

  /** When an entry ends: its own validity, or its max age from its query or from a later confirmation. */
  const expiresAt = (e: Entry<V>) =>
    Math.min(e.validUntil, (confirmed ? Math.max(e.started, gens.confirmedAt()) : e.started) + maxAgeMs);

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
    const end = expiresAt(e);
    if (e.gen !== gens.of(chainId) || t >= end) {
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
    if (end - t < maxAgeMs / 4 && !refreshing.has(key)) {
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
