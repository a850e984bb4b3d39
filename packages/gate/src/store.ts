/** Where the gate keeps its answers: in this process (the default) or shared between replicas (Redis, a KV…). */
import { Lru } from "./lru.js";

/** A cached answer as stored (JSON-serializable, so a shared store can keep it as a string). */
export type StoredAnswer = {
  authorized: boolean;
  matchingPlans: string[];
  indexedBlock: string | null;
  /** ISO 8601, or null. */
  validUntil: string | null;
  /** When it was fetched (ms since the epoch, the gate's clock). */
  at: number;
};

/**
 * What the gate stores per wallet: the last answer, and the floor a webhook set — the block of the newest event seen
 * for the wallet; no answer of an index below it is stored or served.
 */
export type StoredEntry = {
  answer?: StoredAnswer;
  floor?: { block: string; at: number };
};

/**
 * A store of entries by key; every method may be synchronous or return a promise. `set` gives a time to live the
 * store should honour (it may drop an entry earlier). Share one store between replicas to share answers and
 * evictions (see the Redis example in the README).
 */
export type GateStore = {
  get: (key: string) => StoredEntry | undefined | Promise<StoredEntry | undefined>;
  set: (key: string, value: StoredEntry, ttlMs: number) => void | Promise<void>;
  delete: (key: string) => void | Promise<void>;
};

/** The default store: a bounded map in this process (least recently used dropped first), honouring the TTLs. */
export function memoryStore(maxEntries = 10_000, now: () => number = Date.now): GateStore & { size: () => number } {
  const lru = new Lru<string, { value: StoredEntry; until: number }>(maxEntries);
  return {
    get: (key) => {
      const e = lru.get(key);
      if (!e) return undefined;
      if (now() >= e.until) {
        lru.delete(key);
        return undefined;
      }
      return e.value;
    },
    set: (key, value, ttlMs) => {
      lru.set(key, { value, until: now() + ttlMs });
    },
    delete: (key) => {
      lru.delete(key);
    },
    size: () => lru.size,
  };
}
