/** The HTTP app's caches: the indexed authorization check and activity pages, over one notifier subscription. */
import type { Notifier } from "../db/notify";
import type { Sql } from "../db/client";
import {
  createChainGenerations,
  createResponseCache,
  DEFAULT_ACTIVITY_CACHE_BYTES,
  DEFAULT_CHECK_CACHE_BYTES,
  DEFAULT_CHECK_CACHE_ENTRIES,
  DEFAULT_CONFIRM_EVERY_MS,
  type ChainGenerations,
  type ResponseCache,
} from "./cache";
import type { CheckEntry } from "./features/check/service";
import type { ActivityPage } from "./features/activity/service";

/** Options of the API's caches (code defaults; no environment variable sets them). */
export type ApiCacheOptions = {
  /** Source of invalidations; without one nothing is cached. */
  notifier?: Notifier;
  /**
   * The database the cached answers are read from: its chains' cursors are polled (src/http/cache.ts), which also
   * lets a check entry's max age count from the latest poll that saw no batch. Without it, no polls.
   */
  sql?: Sql;
  /** Milliseconds between cursor polls (default {@link DEFAULT_CONFIRM_EVERY_MS}). */
  confirmEveryMs?: number;
  /** Hard age limit of every entry (default {@link DEFAULT_CACHE_MAX_AGE_MS}). */
  maxAgeMs?: number;
  /** Entry cap of the authorization check cache (default {@link DEFAULT_CHECK_CACHE_ENTRIES}); 0 disables it. */
  checkEntries?: number;
  /** Estimated heap cap of the authorization check cache (default {@link DEFAULT_CHECK_CACHE_BYTES}). */
  checkBytes?: number;
  /** Byte cap of the activity page cache (default {@link DEFAULT_ACTIVITY_CACHE_BYTES}); 0 disables it. */
  activityBytes?: number;
  /** Monotonic clock in ms (tests move it). */
  now?: () => number;
};

/** The caches of the HTTP app. */
export type ApiCaches = {
  generations: ChainGenerations;
  /** Indexed authorization answers, by (chain, module, wallet, plan ids in request order). */
  check: ResponseCache<CheckEntry>;
  /** Serialized activity pages, by merchant and normalized query. */
  activity: ResponseCache<ActivityPage>;
  /** Stops listening to the notifier. */
  stop: () => Promise<void>;
};

/** Creates the caches of the HTTP app over one subscription to the notifier. */
export function createApiCaches(opts: ApiCacheOptions = {}): ApiCaches {
  const generations = createChainGenerations(
    opts.notifier,
    opts.sql ? { sql: opts.sql, everyMs: opts.confirmEveryMs, now: opts.now } : undefined,
  );
  const checkEntries = opts.checkEntries ?? DEFAULT_CHECK_CACHE_ENTRIES;
  const activityBytes = opts.activityBytes ?? DEFAULT_ACTIVITY_CACHE_BYTES;
  return {
    generations,
    check: createResponseCache<CheckEntry>({
      generations,
      maxEntries: checkEntries,
      maxBytes: checkEntries > 0 ? (opts.checkBytes ?? DEFAULT_CHECK_CACHE_BYTES) : 0,
      maxAgeMs: opts.maxAgeMs,
      confirmed: true,
      // Measured: about 1 KB of heap for an answer with three allocations, its rendered body and headers included,
      // plus about 280 B for the entry's `Headers` (bun:jsc heapStats over 50,000 of them).
      sizeOf: (entry) => 680 + 220 * entry.answer.result.details.length,
      now: opts.now,
    }),
    activity: createResponseCache<ActivityPage>({
      generations,
      maxEntries: Infinity,
      maxBytes: activityBytes,
      maxAgeMs: opts.maxAgeMs,
      // The UTF-8 body, plus its freshness row and cursor.
      sizeOf: (page) => page.body.length + 128,
      now: opts.now,
    }),
    stop: () => generations.stop(),
  };
}
