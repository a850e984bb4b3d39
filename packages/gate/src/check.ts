/** The gate's answer for one wallet: the service's check, cached until it can change, with a fallback when down. */
import { Lru } from "./lru.js";

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
  /** `indexed` (default; cached until `validUntil`), `onchain` or `both` (the contract decides). */
  mode?: CheckMode;
  /** When the service cannot answer: false (default) refuses with 503; true serves the last known answer. */
  failOpen?: boolean;
  /** How old a last known answer may be to be served when the service is down (default 300,000 ms). */
  maxStaleMs?: number;
  /** How long a negative answer (or one without `validUntil`) is kept (default 5,000 ms). */
  negativeTtlMs?: number;
  /** Wallets kept in the cache (default 10,000; least recently used dropped first). */
  cacheSize?: number;
  /** Time limit of one call to the service (default 5,000 ms). */
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

/** The service could not answer (network error, timeout, 429 or 5xx) and no usable last answer exists. */
export class GateUnavailableError extends Error {
  override readonly name = "GateUnavailableError";
}

/** The service refused the question itself (400: e.g. a module it does not know on that chain). */
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

type Entry = {
  /** The answer as served from the cache (source "cache"), built once. */
  cached: CheckResult;
  api: CheckResult;
  /** Until when (clock ms) it is served from the cache. */
  freshUntil: number;
  /** Until when (clock ms) it may be served as stale. */
  staleUntil: number;
};

/** What the checker does. */
export type Checker = {
  check: (wallet: string) => Promise<CheckResult>;
  /** The cached answer when still valid, synchronously (the adapters' hot path); undefined otherwise. */
  peek: (wallet: string) => CheckResult | undefined;
  /** Drops a wallet's cached answer; an answer being fetched for it is not stored. */
  evict: (wallet: string) => boolean;
  /** Drops every cached answer. */
  evictAll: () => void;
  /** Cached wallets. */
  size: () => number;
};

type CheckBody = {
  authorized?: unknown;
  indexed?: { matching_plan_ids?: string[]; indexed_block?: string | null; valid_until?: string | null };
};

/** Builds the checker (see {@link CheckerOptions}). */
export function createChecker(opts: CheckerOptions): Checker {
  const now = opts.now ?? Date.now;
  const doFetch = opts.fetch ?? globalThis.fetch;
  const negativeTtl = opts.negativeTtlMs ?? 5_000;
  const maxStale = opts.maxStaleMs ?? 300_000;
  const timeoutMs = opts.timeoutMs ?? 5_000;
  const cache = new Lru<string, Entry>(opts.cacheSize ?? 10_000);
  const flights = new Map<string, Promise<CheckResult>>();

  const base = new URL(opts.baseUrl.replace(/\/*$/, "/"));
  const query = new URLSearchParams({
    module_address: opts.module.toLowerCase(),
    plan_ids: opts.plans.map(String).join(","),
    mode: opts.mode ?? "indexed",
  });
  if (opts.chainId !== undefined) query.set("chain_id", String(opts.chainId));
  const urlOf = (wallet: string) => `${new URL("v0/auth/check", base)}?${query}&wallet=${wallet}`;

  const ask = async (wallet: string): Promise<CheckResult> => {
    let res: Response;
    try {
      res = await doFetch(urlOf(wallet), { signal: AbortSignal.timeout(timeoutMs) });
    } catch (err) {
      throw new GateUnavailableError(`the subscription service did not answer: ${(err as Error).message}`);
    }
    if (res.status >= 400 && res.status < 500 && res.status !== 429) {
      const body = (await res.json().catch(() => ({}))) as { error?: { message?: string } };
      throw new GateRequestError(body.error?.message ?? `the subscription service answered ${res.status}`, res.status);
    }
    if (!res.ok) {
      await res.body?.cancel();
      throw new GateUnavailableError(`the subscription service answered ${res.status}`);
    }
    const body = (await res.json()) as CheckBody;
    const authorized = body.authorized === true;
    const validUntil = authorized && body.indexed?.valid_until ? new Date(body.indexed.valid_until) : null;
    return {
      authorized,
      matchingPlans: body.indexed?.matching_plan_ids ?? [],
      source: "api",
      indexedBlock: body.indexed?.indexed_block ?? null,
      validUntil,
    };
  };

  const store = (wallet: string, api: CheckResult) => {
    const t = now();
    const freshUntil = api.validUntil ? api.validUntil.getTime() : t + negativeTtl;
    cache.set(wallet, {
      api,
      cached: Object.freeze({ ...api, source: "cache" as const }),
      freshUntil,
      staleUntil: t + maxStale,
    });
  };

  const load = (wallet: string, previous: Entry | undefined): Promise<CheckResult> => {
    const flight: Promise<CheckResult> = ask(wallet)
      .then((api) => {
        // An eviction of this wallet while the answer was on its way dropped the flight: the answer may be older
        // than the change that evicted it, so it is not stored. Other wallets' evictions do not matter.
        if (flights.get(wallet) === flight) store(wallet, api);
        return api;
      })
      .catch((err) => {
        if (err instanceof GateUnavailableError && opts.failOpen && previous && now() < previous.staleUntil) {
          return { ...previous.api, source: "stale" as const };
        }
        throw err;
      })
      .finally(() => {
        if (flights.get(wallet) === flight) flights.delete(wallet);
      });
    flights.set(wallet, flight);
    return flight;
  };

  const peek = (wallet: string): Entry | undefined => {
    const e = cache.get(wallet);
    return e && now() < e.freshUntil ? e : undefined;
  };

  return {
    check: (raw) => {
      const wallet = raw.toLowerCase();
      const e = cache.get(wallet);
      // Only addresses reach the URL: a crafted string must not add or override query parameters.
      if (!e && !ADDRESS.test(wallet)) {
        return Promise.reject(new GateRequestError("wallet must be an address (0x and 40 hex digits)", 400));
      }
      if (e && now() < e.freshUntil) return Promise.resolve(e.cached);
      return flights.get(wallet) ?? load(wallet, e);
    },
    peek: (raw) => peek(raw.toLowerCase())?.cached,
    evict: (raw) => {
      const wallet = raw.toLowerCase();
      flights.delete(wallet);
      return cache.delete(wallet);
    },
    evictAll: () => {
      flights.clear();
      cache.clear();
    },
    size: () => cache.size,
  };
}
