/** The HTTP app's caches: the indexed authorization check and activity pages, over one notifier subscription. */
import type { Notifier } from "../db/notify";
import {
  createChainGenerations,
  createResponseCache,
  DEFAULT_ACTIVITY_CACHE_BYTES,
  DEFAULT_CHECK_CACHE_BYTES,
  DEFAULT_CHECK_CACHE_ENTRIES,
  type ChainGenerations,
  type ResponseCache,
} from "./cache";
import type { CheckEntry } from "./features/check/service";
import type { ActivityPage } from "./features/activity/service";

/** Options of the API's caches (code defaults; no environment variable sets them). */
export type ApiCacheOptions = {
  /** Source of invalidations; without one nothing is cached. */
  notifier?: Notifier;
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
  const generations = createChainGenerations(opts.notifier);
  const checkEntries = opts.checkEntries ?? DEFAULT_CHECK_CACHE_ENTRIES;
  const activityBytes = opts.activityBytes ?? DEFAULT_ACTIVITY_CACHE_BYTES;
  return {
    generations,
    check: createResponseCache<CheckEntry>({
      generations,
      maxEntries: checkEntries,
      maxBytes: checkEntries > 0 ? (opts.checkBytes ?? DEFAULT_CHECK_CACHE_BYTES) : 0,
      maxAgeMs: opts.maxAgeMs,
      // Measured: about 1 KB of heap for an answer with three allocations, its rendered body and headers included.
      sizeOf: (entry) => 400 + 220 * entry.answer.result.details.length,
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
