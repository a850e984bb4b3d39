/**
 * The gate's answer for one wallet: the service's check, kept for a bounded time (positive answers `maxAgeMs`,
 * refreshed in the background while served), never older than what a webhook said, with a fallback when down.
 */
import { memoryStore, type GateStore, type StoredAnswer, type StoredEntry } from "./store.js";

/** How the service is asked (`mode` of `GET /v0/auth/check`). */
export type CheckMode = "indexed" | "onchain" | "both";

/** Options of {@link createChecker}. */
export type CheckerOptions = {
  /** The service's base URL. */
  baseUrl: string;
  /** The subscription module (any letter case). */
  module: string;
  /** On-chain plan ids; a wallet paid up on any of them passes. */
  plans: readonly (number | string)[];
  /** The chain (default: the service's indexed chain). */
  chainId?: number;
  /** `indexed` (default), `onchain` or `both` (the contract decides). */
  mode?: CheckMode;
  /**
   * An API key of the merchant (`sk_…`): checks are then counted against the merchant's own limit instead of the
   * rate limit of this server's address (shared with everyone behind the same NAT or serverless egress).
   */
  apiKey?: string;
  /** When the service cannot answer: false (default) refuses with 503; true serves the last known answer. */
  failOpen?: boolean;
  /** How old a last known answer may be to be served when the service is down (default 300,000 ms). */
  maxStaleMs?: number;
  /**
   * How long a positive answer is served (default 60,000 ms; never past its `validUntil`). From half that age on it
   * is refreshed in the background while still served (one request per wallet at a time).
   */
  maxAgeMs?: number;
  /** How long a negative answer (or one without `validUntil`) is kept (default 5,000 ms). */
  negativeTtlMs?: number;
  /** Wallets kept by the default in-memory store (default 10,000; least recently used dropped first). */
  cacheSize?: number;
  /** Where answers and webhook floors are kept (default: in this process). Share one between replicas. */
  store?: GateStore;
  /** Time limit of one call to the service, body included (default 5,000 ms). */
  timeoutMs?: number;
  /** The fetch to use (default: the global one). */
  fetch?: typeof fetch;
  /** Clock in ms since the epoch (default `Date.now`), compared with `validUntil`. */
  now?: () => number;
};

/** What the gate knows about a wallet. */
export type CheckResult = {
  /** Paid up on at least one of the plans. */
  authorized: boolean;
  /** The plans the wallet is paid up on (mode `onchain`: empty, the contract does not say which). */
  matchingPlans: string[];
  /** `cache`: a cached answer still valid; `api`: asked just now; `stale`: the service is down, the last known one. */
  source: "cache" | "api" | "stale";
  /** Newest block the index had committed when it answered (null before its first batch, or in mode onchain). */
  indexedBlock: string | null;
  /** When a positive answer stops being true with no event (the allocation's expiry); null when not authorized. */
  validUntil: Date | null;
};

/**
 * The service could not answer (network error, timeout, a body that stalls, breaks or is not JSON, 429 or 5xx) and
 * no usable last answer exists.
 */
export class GateUnavailableError extends Error {
  override readonly name = "GateUnavailableError";
}

/** The service refused the question itself (4xx: e.g. a module it does not know on that chain). */
export class GateRequestError extends Error {
  override readonly name = "GateRequestError";
  constructor(
    message: string,
    readonly status: number,
  ) {
    super(message);
  }
}

const ADDRESS = /^0x[0-9a-f]{40}$/;

/** What the checker does. */
export type Checker = {
  check: (wallet: string) => Promise<CheckResult>;
  /** The cached answer when still valid and the store answers synchronously (the adapters' hot path). */
  peek: (wallet: string) => CheckResult | undefined;
  /** Drops a wallet's cached answer; an answer being fetched for it is not stored. */
  evict: (wallet: string) => Promise<void>;
  /**
   * Drops a wallet's cached answer and raises its floor to `block`: from now on no answer of an index below it is
   * stored or served (the next check asks the service with `min_block`).
   */
  invalidate: (wallet: string, block: string) => Promise<void>;
  /** GET a path of the service (with the API key), as JSON; the errors of a check. */
  getJson: (path: string, query: URLSearchParams) => Promise<unknown>;
};

type CheckBody = {
  authorized?: unknown;
  indexed?: { matching_plan_ids?: string[]; indexed_block?: string | null; valid_until?: string | null };
};

/** Whether `answer` may be served under `floor`: its index reached the floor's block (or, on-chain, it is newer). */
function meets(answer: StoredAnswer, floor: StoredEntry["floor"]): boolean {
  if (!floor) return true;
  if (answer.indexedBlock === null) return answer.at > floor.at;
  return BigInt(answer.indexedBlock) >= BigInt(floor.block);
}

const toResult = (a: StoredAnswer, source: CheckResult["source"]): CheckResult => ({
  authorized: a.authorized,
  matchingPlans: a.matchingPlans,
  source,
  indexedBlock: a.indexedBlock,
  validUntil: a.validUntil ? new Date(a.validUntil) : null,
});

const isPromise = <T>(v: T | Promise<T>): v is Promise<T> => typeof (v as { then?: unknown })?.then === "function";

/** Builds the checker (see {@link CheckerOptions}). */
export function createChecker(opts: CheckerOptions): Checker {
  const now = opts.now ?? Date.now;
  const doFetch = opts.fetch ?? globalThis.fetch;
  const negativeTtl = opts.negativeTtlMs ?? 5_000;
  const maxAge = opts.maxAgeMs ?? 60_000;
  const maxStale = opts.maxStaleMs ?? 300_000;
  const timeoutMs = opts.timeoutMs ?? 5_000;
  const store = opts.store ?? memoryStore(opts.cacheSize ?? 10_000, now);
  // An entry is kept for the stale fallback, and a floor long enough for any answer in flight to meet it.
  const keepMs = Math.max(maxStale, maxAge, 600_000);
  const flights = new Map<string, Promise<CheckResult>>();
  /** Whether the store answered `get` with a promise once (then `peek` stops asking it). */
  let asyncStore = false;
  const headers: Record<string, string> = opts.apiKey ? { authorization: `Bearer ${opts.apiKey}` } : {};

  const base = new URL(opts.baseUrl.replace(/\/*$/, "/"));
  const plans = opts.plans.map(String).join(",");
  const query = new URLSearchParams({ module_address: opts.module.toLowerCase(), plan_ids: plans });
  if (opts.chainId !== undefined) query.set("chain_id", String(opts.chainId));
  const checkQuery = new URLSearchParams(query);
  checkQuery.set("mode", opts.mode ?? "indexed");
  // One gate's answers under its own keys: several gates (other plans, modules) may share a store.
  const prefix = `gate:${opts.chainId ?? ""}:${opts.module.toLowerCase()}:${plans}:${opts.mode ?? "indexed"}:`;
  const keyOf = (wallet: string) => prefix + wallet;

  /** GETs `path?query` as JSON: a 4xx is a GateRequestError, anything else that is not a JSON 200 is unavailable. */
  const getJson = async (path: string, q: URLSearchParams): Promise<unknown> => {
    const signal = AbortSignal.timeout(timeoutMs);
    try {
      const res = await doFetch(`${new URL(path, base)}?${q}`, { signal, headers });
      if (res.status >= 400 && res.status < 500 && res.status !== 429) {
        const body = (await res.json().catch(() => ({}))) as { error?: { message?: string } };
        throw new GateRequestError(
          body.error?.message ?? `the subscription service answered ${res.status}`,
          res.status,
        );
      }
      if (!res.ok) {
        await res.body?.cancel().catch(() => {});
        throw new GateUnavailableError(`the subscription service answered ${res.status}`);
      }
      // The body is read under the same time limit: a stalled or broken body, or a proxy's HTML page, is an outage.
      return await res.json();
    } catch (err) {
      if (err instanceof GateRequestError || err instanceof GateUnavailableError) throw err;
      throw new GateUnavailableError(`the subscription service did not answer: ${(err as Error).message}`);
    }
  };

  const ask = async (wallet: string, minBlock: string | undefined): Promise<StoredAnswer> => {
    const q = new URLSearchParams(checkQuery);
    q.set("wallet", wallet);
    if (minBlock !== undefined && opts.mode !== "onchain") q.set("min_block", minBlock);
    const body = (await getJson("v0/auth/check", q)) as CheckBody | null;
    if (typeof body !== "object" || body === null || typeof body.authorized !== "boolean") {
      throw new GateUnavailableError("the subscription service answered something that is not a check result");
    }
    const authorized = body.authorized;
    return {
      authorized,
      matchingPlans: body.indexed?.matching_plan_ids ?? [],
      indexedBlock: body.indexed?.indexed_block ?? null,
      validUntil: authorized ? (body.indexed?.valid_until ?? null) : null,
      at: now(),
    };
  };

  /** Until when (clock ms) an answer is served from the store. */
  const freshUntil = (a: StoredAnswer) => {
    if (!a.authorized || !a.validUntil) return a.at + negativeTtl;
    return Math.min(a.at + maxAge, Date.parse(a.validUntil));
  };

  /** What a stored answer gives, computed once per answer object (the in-memory store hands back the same one). */
  type Derived = { result: CheckResult; freshUntil: number; refreshAt: number };
  const derived = new WeakMap<StoredAnswer, Derived>();
  const derive = (a: StoredAnswer): Derived => {
    let d = derived.get(a);
    if (!d) {
      const result = Object.freeze(toResult(a, "cache"));
      d = { result, freshUntil: freshUntil(a), refreshAt: a.authorized ? a.at + maxAge / 2 : Infinity };
      derived.set(a, d);
    }
    return d;
  };

  /**
   * The entry's answer as served now, or undefined when it may not be (too old, or below the wallet's floor); from
   * half a positive answer's age on, one background refresh of the wallet is started.
   */
  const served = (wallet: string, e: StoredEntry | undefined): CheckResult | undefined => {
    const a = e?.answer;
    if (!a) return undefined;
    const d = derive(a);
    const t = now();
    if (t >= d.freshUntil || (e!.floor !== undefined && !meets(a, e!.floor))) return undefined;
    if (t >= d.refreshAt && !flights.has(wallet)) load(wallet, e).catch(() => {});
    return d.result;
  };

  /**
   * Asks the service (with the wallet's floor as `min_block`) and stores the answer unless a floor set meanwhile
   * (by a webhook here or in another replica) is above it; then asks once more with that floor. The answer served
   * always meets the newest floor seen.
   */
  const fetchAndStore = async (wallet: string, entry: StoredEntry | undefined, flight: () => unknown) => {
    let floor = entry?.floor;
    for (let attempt = 0; ; attempt++) {
      const answer = await ask(wallet, floor?.block);
      if (!meets(answer, floor)) throw new GateUnavailableError("the service answered from an index behind a webhook");
      const current = await store.get(keyOf(wallet));
      if (meets(answer, current?.floor)) {
        // An eviction of this wallet while the answer was on its way dropped the flight: not stored.
        if (flights.get(wallet) === flight()) await store.set(keyOf(wallet), { ...current, answer }, keepMs);
        return answer;
      }
      if (attempt > 0) throw new GateUnavailableError("the index stays behind the webhooks of this wallet");
      floor = current!.floor;
    }
  };

  /** What a failure is to the caller: a store's own error (a shared one can be down) is an outage. */
  const asGateError = (err: unknown): Error =>
    err instanceof GateUnavailableError || err instanceof GateRequestError
      ? err
      : new GateUnavailableError(`the gate's store failed: ${(err as Error).message}`);

  const load = (wallet: string, entry: StoredEntry | undefined): Promise<CheckResult> => {
    const flight: Promise<CheckResult> = fetchAndStore(wallet, entry, () => flight)
      .then((a) => toResult(a, "api"))
      .catch((raw) => {
        const err = asGateError(raw);
        const last = entry?.answer;
        if (err instanceof GateUnavailableError && opts.failOpen && last && now() < last.at + maxStale) {
          if (meets(last, entry!.floor)) return toResult(last, "stale");
        }
        throw err;
      })
      .finally(() => {
        if (flights.get(wallet) === flight) flights.delete(wallet);
      });
    flights.set(wallet, flight);
    return flight;
  };

  /** Serves a stored answer, refreshing it in the background once past half its age (one flight per wallet). */
  /** Results served from the store, one per stored answer (the in-memory store hands back the same object). */
  const fromEntry = (wallet: string, e: StoredEntry | undefined): CheckResult | Promise<CheckResult> =>
    served(wallet, e) ?? flights.get(wallet) ?? load(wallet, e);

  return {
    check: (raw) => {
      const wallet = raw.toLowerCase();
      try {
        const e = store.get(keyOf(wallet));
        if (!isPromise(e)) {
          // A synchronous store (the default): a cached answer costs one resolved promise. Only addresses are
          // stored, so a hit needs no validation.
          const hit = served(wallet, e);
          if (hit) return Promise.resolve(hit);
        }
        // Only addresses reach the URL: a crafted string must not add or override query parameters.
        if (!ADDRESS.test(wallet)) {
          return Promise.reject(new GateRequestError("wallet must be an address (0x and 40 hex digits)", 400));
        }
        if (!isPromise(e)) return flights.get(wallet) ?? load(wallet, e);
        return e.then(
          (entry) => fromEntry(wallet, entry),
          (err) => Promise.reject(asGateError(err)),
        );
      } catch (err) {
        return Promise.reject(asGateError(err));
      }
    },
    peek: (raw) => {
      if (asyncStore) return undefined;
      const wallet = raw.toLowerCase();
      const e = store.get(keyOf(wallet));
      if (isPromise(e)) {
        // An asynchronous store: no synchronous answer, now or later; `check` reads it (and reports its failure).
        asyncStore = true;
        e.catch(() => {});
        return undefined;
      }
      return served(wallet, e);
    },
    evict: async (raw) => {
      const wallet = raw.toLowerCase();
      flights.delete(wallet);
      await store.delete(keyOf(wallet));
    },
    invalidate: async (raw, block) => {
      const wallet = raw.toLowerCase();
      flights.delete(wallet);
      const key = keyOf(wallet);
      const e = await store.get(key);
      // Monotonic: a floor never goes down (deliveries come in any order).
      const kept = e?.floor && BigInt(e.floor.block) >= BigInt(block) ? e.floor.block : block;
      await store.set(key, { floor: { block: kept, at: now() } }, keepMs);
    },
    getJson: (path, q) => getJson(path, q),
  };
}
