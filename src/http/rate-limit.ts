import type { Server } from "bun";

/** Outcome of one rate-limit check. */
export type RateDecision = { ok: true } | { ok: false; retryAfterSeconds: number };

/** A per-key limiter: `check(key)` counts one request for `key`. */
export type RateLimiter = { check: (key: string) => RateDecision; size: () => number };

/** Options of {@link createRateLimiter}. */
export type RateLimiterOptions = {
  /** Sustained requests per minute per key (the refill rate). */
  perMinute: number;
  /** Bucket size: requests a fresh key may make at once (default `perMinute`). */
  burst?: number;
  /** Most keys tracked at once; beyond it the least recently seen keys are dropped (default 100 000). */
  maxKeys?: number;
  /** Clock in milliseconds (default `Date.now`); injectable for tests. */
  now?: () => number;
};

type Bucket = { tokens: number; at: number };

/**
 * Creates a token-bucket limiter: each key holds up to `burst` tokens, refilled at `perMinute` per minute, and a
 * request spends one. A bucket idle long enough to be full again is forgotten (it behaves exactly like a new key),
 * so memory follows the keys active in the last refill period and never exceeds `maxKeys`.
 */
export function createRateLimiter(opts: RateLimiterOptions): RateLimiter {
  if (!(opts.perMinute > 0)) throw new RangeError(`perMinute must be positive: ${opts.perMinute}`);
  const burst = opts.burst ?? opts.perMinute;
  if (!(burst >= 1)) throw new RangeError(`burst must be at least 1: ${burst}`);
  const maxKeys = opts.maxKeys ?? 100_000;
  const now = opts.now ?? Date.now;
  const perMs = opts.perMinute / 60_000;
  const refillMs = burst / perMs; // an idle bucket is full again after this long
  // Map iteration order is insertion order; a key is re-inserted on each check, so the first keys are the idlest.
  const buckets = new Map<string, Bucket>();
  let lastSweep = now();

  function sweep(t: number): void {
    for (const [key, b] of buckets) {
      if (t - b.at < refillMs) break; // everything after this was seen more recently
      buckets.delete(key);
    }
    lastSweep = t;
  }

  return {
    check(key) {
      const t = now();
      if (t - lastSweep >= refillMs || buckets.size >= maxKeys) sweep(t);
      const prev = buckets.get(key);
      let tokens = burst;
      if (prev) {
        tokens = Math.min(burst, prev.tokens + Math.max(0, t - prev.at) * perMs);
        buckets.delete(key);
      } else if (buckets.size >= maxKeys) {
        // Still full after the sweep: drop the least recently seen key.
        buckets.delete(buckets.keys().next().value!);
      }
      if (tokens >= 1) {
        buckets.set(key, { tokens: tokens - 1, at: t });
        return { ok: true };
      }
      buckets.set(key, { tokens, at: t });
      return { ok: false, retryAfterSeconds: Math.max(1, Math.ceil((1 - tokens) / perMs / 1000)) };
    },
    size: () => buckets.size,
  };
}

/**
 * Rate-limit key of a request: the first X-Forwarded-For hop when present (the service is meant to run behind a
 * proxy that sets it), else the socket's address, else "unknown".
 */
export function clientKey(request: Request, server: Server<unknown> | null | undefined): string {
  const forwarded = request.headers.get("x-forwarded-for");
  if (forwarded) {
    const first = forwarded.split(",")[0].trim();
    if (first) return first;
  }
  try {
    return server?.requestIP(request)?.address ?? "unknown";
  } catch {
    return "unknown";
  }
}
