/** Retries of 429 and 503 answers after `Retry-After`, bounded in count and in delay. */

/** Retry bounds. */
export type RetryOptions = {
  /** Retries after the first attempt (default 2; 0 disables). */
  maxRetries?: number;
  /** Longest wait before one retry, in ms (default 10,000): a longer `Retry-After` is not waited for. */
  maxDelayMs?: number;
};

const RETRIED = new Set([429, 503]);

/** Milliseconds a `Retry-After` value asks for (delta-seconds or an HTTP date); undefined when absent or invalid. */
export function retryAfterMs(value: string | null, now = Date.now()): number | undefined {
  if (value === null) return undefined;
  const trimmed = value.trim();
  if (/^\d+$/.test(trimmed)) return Number(trimmed) * 1000;
  const at = Date.parse(trimmed);
  return Number.isNaN(at) ? undefined : Math.max(0, at - now);
}

/**
 * A fetch that sends `request` again when the answer is 429 or 503, after its `Retry-After` (500 ms, then doubling,
 * when it has none). It gives up, returning the last answer, after `maxRetries` retries or when the wait asked for
 * exceeds `maxDelayMs`. Both statuses mean the service did not act on the request, so a retried POST is safe.
 */
export function retryingFetch(base: typeof fetch, opts: RetryOptions = {}): (request: Request) => Promise<Response> {
  const maxRetries = opts.maxRetries ?? 2;
  const maxDelayMs = opts.maxDelayMs ?? 10_000;
  return async (request) => {
    for (let attempt = 0; ; attempt++) {
      const res = await base(attempt < maxRetries ? request.clone() : request);
      if (!RETRIED.has(res.status) || attempt >= maxRetries) return res;
      const wait = retryAfterMs(res.headers.get("retry-after")) ?? 500 * 2 ** attempt;
      if (wait > maxDelayMs) return res;
      await res.body?.cancel();
      await new Promise((resolve) => setTimeout(resolve, wait));
    }
  };
}
