/** Outcome of one rate-limit check. */
export type RateDecision = { ok: true } | { ok: false; retryAfterSeconds: number };

/** A per-key limiter: `check(key)` counts one request for `key`. */
export type RateLimiter = { check: (key: string) => RateDecision };

/** Creates a limiter allowing `perMinute` requests per key (placeholder: allows everything). */
export function createRateLimiter(opts: { perMinute: number }): RateLimiter {
  return { check: () => ({ ok: true }) };
}
