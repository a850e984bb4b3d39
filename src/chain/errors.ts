/**
 * Errors of the chain layer (JSON-RPC calls) and how a failure is read: retryable or not, a refused
 * `eth_getLogs` range, a revert. Causes are walked with viem's `walk()`; providers' free-text messages are matched
 * by regular expressions only here, where the text is the only signal a provider gives.
 */
import { BaseError, HttpRequestError } from "viem";
import { AppError, type AppErrorOptions } from "../common/errors";

/** The provider refused an `eth_getLogs` range (block span or result size); the range must shrink. */
export class RangeRefusedError extends AppError {
  constructor(
    message: string,
    /** "blocks" when the span itself is limited (a lasting cap), "results" when the answer was too big. */
    readonly kind: "blocks" | "results",
    /** A span the provider said would work, when its message names one. */
    readonly suggestedSize?: bigint,
    opts: AppErrorOptions = {},
  ) {
    // Never retried as is: the caller asks smaller ranges.
    super(message, { ...opts, retryable: false });
  }
}

/** An RPC call still failed after its retries (unreachable node, 429s, timeouts, server errors). */
export class RpcUnavailableError extends AppError {
  constructor(message: string, opts: AppErrorOptions = {}) {
    super(message, { retryable: true, ...opts });
  }
}

/** A provider refused a JSON-RPC batch for its size: sent again as smaller batches, never as is. */
export class BatchTooLargeError extends AppError {
  constructor(message: string) {
    super(`batch refused: ${message}`, { retryable: false });
  }
}

/** A JSON-RPC node answered with an HTTP error status (413 says the request was too big: not retryable). */
export class RpcHttpError extends AppError {
  constructor(
    readonly status: number,
    body: string,
  ) {
    super(`HTTP ${status}: ${body}`, { retryable: status !== 413, fields: { status } });
  }
}

/** A JSON-RPC node answered with a JSON-RPC error object. */
export class RpcResponseError extends AppError {
  constructor(
    readonly code: number,
    message: string,
    readonly status?: number,
  ) {
    super(message, { retryable: !isRevertText(code, message), fields: { code, status } });
  }
}

/** An answer larger than the reader accepts (treated like a provider's size refusal). */
export class ResponseTooLargeError extends AppError {
  constructor(
    readonly size: number,
    readonly maxSize: number,
  ) {
    super(`response of ${size} bytes exceeds ${maxSize} bytes`, { fields: { size, maxSize } });
  }
}

/** A call that did not answer within its deadline. */
export class CallTimeoutError extends AppError {
  constructor(message: string) {
    super(message, { retryable: true });
  }
}

type Walk = (this: unknown, fn: (err: unknown) => boolean) => unknown;

/** The first error along `err`'s cause chain (itself included) that `pred` accepts, by viem's `walk()`. */
export function findCause<T = unknown>(err: unknown, pred: (e: unknown) => boolean): T | null {
  if (!err || typeof err !== "object") return null;
  return ((BaseError.prototype.walk as unknown as Walk).call(err, pred) as T | null) ?? null;
}

/** The JSON-RPC error code along the cause chain. */
export function rpcCodeOf(err: unknown): number | undefined {
  return findCause<{ code: number }>(err, (e) => typeof (e as { code?: unknown }).code === "number")?.code;
}

/** The HTTP status of a failed call along the cause chain. */
export function httpStatusOf(err: unknown): number | undefined {
  const e = findCause<{ status?: number }>(
    err,
    (e) => e instanceof RpcHttpError || e instanceof RpcResponseError || e instanceof HttpRequestError,
  );
  return e?.status;
}

/** Whether a call timed out somewhere along the cause chain (viem's TimeoutError, an aborted fetch, ours). */
export function isTimeout(err: unknown): boolean {
  return (
    findCause(err, (e) => {
      const name = (e as { name?: string }).name;
      return name === "TimeoutError" || name === "CallTimeoutError";
    }) !== null
  );
}

/** Every short message and detail along an error's cause chain, lowercased, for provider-specific matching. */
export function errorText(err: unknown): string {
  const parts: string[] = [];
  findCause(err, (e) => {
    const x = e as { message?: string; details?: string; shortMessage?: string };
    // viem's full `message` repeats the request body (hex numbers, addresses): match on the short parts only.
    if (x.shortMessage !== undefined || x.details !== undefined) parts.push(x.shortMessage ?? "", x.details ?? "");
    else parts.push(x.message ?? String(e));
    return parts.length > 16;
  });
  return parts.join(" | ").toLowerCase();
}

// ---- Providers' free text: the only signal some of them give. ----

const RATE_LIMIT = /rate limit|too many requests|request count|requests per|capacity|throughput/;
const RANGE_WORDS = new RegExp(
  [
    "block range",
    "range too (large|wide|big)",
    "range is too",
    "too (many|large|wide)",
    "exceed",
    "limited to",
    "max(imum)? (block )?range",
    "more than \\d[\\d,]* (results|logs|blocks)",
    "response size",
    "payload too large",
    "query timeout",
    "returned too many",
  ].join("|"),
);
const RESULT_WORDS = /result|\blogs\b|response size|size limit|payload/;
const SPAN_WORDS = /block range (is )?too/;
const SPAN_HINT = /\[\s*(0x[0-9a-f]+)\s*,\s*(0x[0-9a-f]+)\s*\]/;
const SPAN_CAP = /(?:max(?:imum)?|limit(?:ed)? to|up to|at most)[^0-9]{0,24}([0-9][0-9,_]*)/;
const REVERT = /execution reverted|revert|invalid opcode|out of gas/;

/** JSON-RPC error 3 (geth, anvil) or a provider's "execution reverted" wording. */
function isRevertText(code: number | undefined, text: string): boolean {
  return code === 3 || REVERT.test(text.toLowerCase());
}

/** Whether the call itself was refused by the contract (a revert): asking again gives the same answer. */
export function isRevert(err: unknown): boolean {
  return isRevertText(rpcCodeOf(err), errorText(err));
}

/** Whether a failure says the provider rate-limited us (retry later, never shrink a range for it). */
export function isRateLimit(err: unknown): boolean {
  return httpStatusOf(err) === 429 || RATE_LIMIT.test(errorText(err));
}

/** Whether a failed call is worth retrying as is: our errors say so themselves; a revert never is. */
export function isRetryableRpcError(err: unknown): boolean {
  if (err instanceof AppError) return err.retryable;
  return !isRevert(err);
}

/**
 * Reads an `eth_getLogs` failure as a refused range when it is one: provider-specific messages
 * ("block range too large", "query returned more than 10000 results", "Log response size exceeded …
 * this block range should work: [0x…, 0x…]"), codes -32005 (limit exceeded) and -32602 (invalid params)
 * with range wording, HTTP 413, and a response-size guard. Rate limits are not range errors.
 */
export function asRangeRefusal(err: unknown, from: bigint, span?: bigint): RangeRefusedError | null {
  if (err instanceof RangeRefusedError) return err;
  if (isRateLimit(err)) return null;
  const text = errorText(err);
  const tooLarge = findTooLarge(err);
  const isRange =
    tooLarge !== null ||
    text.includes("exceeded the size limit") ||
    httpStatusOf(err) === 413 ||
    rpcCodeOf(err) === -32005 ||
    RANGE_WORDS.test(text);
  if (!isRange) return null;
  const kind = RESULT_WORDS.test(text) && !SPAN_WORDS.test(text) ? "results" : "blocks";
  return new RangeRefusedError(text.slice(0, 300), kind, suggestedSpan(tooLarge, text, kind, from, span), {
    cause: err,
  });
}

/** viem's or our response-size guard along the cause chain. */
function findTooLarge(err: unknown): { size: number; maxSize: number } | null {
  return findCause(err, (e) => {
    const x = e as { name?: string; size?: unknown; maxSize?: unknown };
    const named = x.name === "ResponseBodyTooLargeError" || x.name === "ResponseTooLargeError";
    return named && typeof x.size === "number" && typeof x.maxSize === "number";
  });
}

/** The span a refusal suggests: from a size report, a provider's "[0x…, 0x…]" hint, or a stated maximum. */
function suggestedSpan(
  tooLarge: { size: number; maxSize: number } | null,
  text: string,
  kind: string,
  from: bigint,
  span?: bigint,
): bigint | undefined {
  if (tooLarge && span !== undefined && tooLarge.size > 0) {
    // Shrink to half of what would have fitted, to leave room for denser blocks.
    const fit = (span * BigInt(Math.floor((tooLarge.maxSize / tooLarge.size) * 1000))) / 2000n;
    return fit > 0n ? fit : 1n;
  }
  const bracket = SPAN_HINT.exec(text);
  if (bracket) {
    const to = BigInt(bracket[2]!);
    return to >= from ? to - from + 1n : undefined;
  }
  if (kind !== "blocks") return undefined;
  const cap = SPAN_CAP.exec(text);
  const n = cap ? BigInt(cap[1]!.replace(/[,_]/g, "")) : 0n;
  return n > 0n ? n : undefined;
}
