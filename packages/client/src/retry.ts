/**
 * The client's transport: a timeout per attempt, an `Idempotency-Key` on every POST, and retries with exponential
 * backoff and jitter of the failures a second attempt may fix, only where a second attempt cannot act twice.
 */
import { ConnectionError, TimeoutError } from "./errors.js";

/** Retry bounds. */
export type RetryOptions = {
  /** Retries after the first attempt (default 2; 0 disables). */
  maxRetries?: number;
  /** Longest wait before one retry, in ms (default 10,000): a longer `Retry-After` is not waited for. */
  maxDelayMs?: number;
  /** First backoff without `Retry-After`, in ms (default 500), doubling each retry, jittered to 50–100 %. */
  initialDelayMs?: number;
};

/** Transport options. */
export type TransportOptions = {
  retry?: RetryOptions;
  /** Longest wait for one attempt's answer, body included, in ms (default 80,000). */
  timeoutMs?: number;
};

/** Default time one attempt may take: as long as the service's slowest answer, with room. */
export const DEFAULT_TIMEOUT_MS = 80_000;

/** The request header that makes a POST safe to retry. */
export const IDEMPOTENCY_KEY_HEADER = "Idempotency-Key";

/** Statuses where the service did not finish the request, so an attempt again may succeed. */
const RETRIED_STATUSES = new Set([429, 502, 503, 504]);

/** Methods that mean the same when sent twice (RFC 9110 §9.2.2). */
const IDEMPOTENT_METHODS = new Set(["GET", "HEAD", "OPTIONS", "PUT", "DELETE"]);

/** Milliseconds a `Retry-After` value asks for (delta-seconds or an HTTP date); undefined when absent or invalid. */
export function retryAfterMs(value: string | null, now = Date.now()): number | undefined {
  if (value === null) return undefined;
  const trimmed = value.trim();
  if (/^\d+$/.test(trimmed)) return Number(trimmed) * 1000;
  const at = Date.parse(trimmed);
  return Number.isNaN(at) ? undefined : Math.max(0, at - now);
}

/** The backoff before retry number `attempt` (0-based): `initial · 2^attempt`, times a random 50–100 %. */
export function backoffMs(attempt: number, initialMs = 500, random = Math.random): number {
  return Math.round(initialMs * 2 ** attempt * (0.5 + random() / 2));
}

/**
 * Whether a request may be sent again after `failure`. A 429 was refused before anything ran: always. Otherwise only
 * a request that cannot act twice: an idempotent method, or a POST carrying an `Idempotency-Key` (the service then
 * answers a second attempt with the first one's answer, or 409 `idempotency_key_in_use` while the first still runs).
 */
export function mayRetry(request: Request, failure: { status: number; code?: string }): boolean {
  if (failure.status === 429) return true;
  const safe = IDEMPOTENT_METHODS.has(request.method) || request.headers.has(IDEMPOTENCY_KEY_HEADER);
  if (!safe) return false;
  if (failure.status === 0 || RETRIED_STATUSES.has(failure.status)) return true;
  return failure.status === 409 && request.headers.has(IDEMPOTENCY_KEY_HEADER);
}

/** A new idempotency key (a random UUID). */
export const newIdempotencyKey = () => globalThis.crypto.randomUUID();

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

/**
 * A fetch that adds an `Idempotency-Key` to a POST that has none (the same on each attempt), bounds each attempt by
 * `timeoutMs` (answer and body), and sends the request again after a network error, a timeout, 429, 502, 503, 504 or
 * 409 `idempotency_key_in_use` where {@link mayRetry} allows, waiting `Retry-After` or a jittered backoff. It gives
 * up after `maxRetries` retries or when the wait asked for exceeds `maxDelayMs`, returning the last answer or throwing
 * {@link ConnectionError} / {@link TimeoutError}. A caller's abort signal stops it at once.
 */
export function retryingFetch(
  base: typeof fetch,
  opts: TransportOptions = {},
): (request: Request) => Promise<Response> {
  const maxRetries = opts.retry?.maxRetries ?? 2;
  const maxDelayMs = opts.retry?.maxDelayMs ?? 10_000;
  const initialDelayMs = opts.retry?.initialDelayMs ?? 500;
  const timeoutMs = opts.timeoutMs ?? DEFAULT_TIMEOUT_MS;
  return async (input) => {
    let request = input;
    if (request.method === "POST" && !request.headers.has(IDEMPOTENCY_KEY_HEADER)) {
      const headers = new Headers(request.headers);
      headers.set(IDEMPOTENCY_KEY_HEADER, newIdempotencyKey());
      request = new Request(request, { headers });
    }
    for (let attempt = 0; ; attempt++) {
      const last = attempt >= maxRetries;
      const timeout = AbortSignal.timeout(timeoutMs);
      const signal = AbortSignal.any([request.signal, timeout]);
      let res: Response;
      try {
        res = await base(new Request(last ? request : request.clone(), { signal }));
      } catch (err) {
        if (request.signal.aborted) throw err;
        const failure = timeout.aborted ? new TimeoutError(timeoutMs, err) : new ConnectionError(messageOf(err), err);
        if (last || !mayRetry(request, { status: 0 })) throw failure;
        await sleep(backoffMs(attempt, initialDelayMs));
        continue;
      }
      const code = res.status === 409 ? await peekCode(res) : undefined;
      const retried = RETRIED_STATUSES.has(res.status) || code === "idempotency_key_in_use";
      if (!retried || last || !mayRetry(request, { status: res.status, code })) return bounded(res, timeout, timeoutMs);
      const wait = retryAfterMs(res.headers.get("retry-after")) ?? backoffMs(attempt, initialDelayMs);
      if (wait > maxDelayMs) return bounded(res, timeout, timeoutMs);
      await res.body?.cancel().catch(() => {});
      await sleep(wait);
    }
  };
}

/** The `error.code` of a 409 answer, read from a copy (the answer itself is returned unread). */
async function peekCode(res: Response): Promise<string | undefined> {
  try {
    const body = (await res.clone().json()) as { error?: { code?: unknown } };
    return typeof body?.error?.code === "string" ? body.error.code : undefined;
  } catch {
    return undefined;
  }
}

/** The answer, whose body read turns a timeout (the attempt's signal) into {@link TimeoutError}. */
function bounded(res: Response, timeout: AbortSignal, timeoutMs: number): Response {
  if (!res.body) return res;
  const reader = res.body.getReader();
  const body = new ReadableStream<Uint8Array>({
    async pull(controller) {
      try {
        const { done, value } = await reader.read();
        if (done) controller.close();
        else controller.enqueue(value);
      } catch (err) {
        controller.error(timeout.aborted ? new TimeoutError(timeoutMs, err) : new ConnectionError(messageOf(err), err));
      }
    },
    cancel: (reason) => reader.cancel(reason),
  });
  return new Response(body, { status: res.status, statusText: res.statusText, headers: res.headers });
}

function messageOf(err: unknown): string {
  return err instanceof Error ? `request failed: ${err.message}` : "request failed";
}
