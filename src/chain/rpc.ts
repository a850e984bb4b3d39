import { BaseError, HttpRequestError, type PublicClient } from "viem";
import type { RawLog } from "../indexer/decode";
import { RangeRefusedError, RpcHttpError, RpcResponseError, RpcUnavailableError } from "../indexer/errors";

/** A block header reduced to what the indexer keeps. */
export type Header = { number: bigint; hash: string; parentHash: string; timestamp: number };

type RawBlock = { number: string; hash: string; parentHash: string; timestamp: string } | null;

/** Retry policy for one RPC call: `attempts` tries, exponential delays from `baseMs` up to `maxMs`. */
export type RetryPolicy = { attempts: number; baseMs: number; maxMs: number };

/** Default per-call policy: a handful of quick retries; the poll loop backs off further on top. */
export const defaultRetry: RetryPolicy = { attempts: 5, baseMs: 100, maxMs: 2_000 };

const hex = (n: bigint) => `0x${n.toString(16)}`;

/** Every message and detail along an error's cause chain, lowercased, for provider-specific matching. */
function errorText(err: unknown): string {
  const parts: string[] = [];
  let e: unknown = err;
  for (let depth = 0; e && depth < 8; depth++) {
    const x = e as { message?: string; details?: string; shortMessage?: string; cause?: unknown };
    // viem's full `message` repeats the request body (hex numbers, addresses): match on the short parts only.
    if (x.shortMessage !== undefined || x.details !== undefined) parts.push(x.shortMessage ?? "", x.details ?? "");
    else parts.push(x.message ?? "");
    e = x.cause;
  }
  return parts.join(" | ").toLowerCase();
}

function rpcCode(err: unknown): number | undefined {
  let e: unknown = err;
  for (let depth = 0; e && depth < 8; depth++) {
    const code = (e as { code?: unknown }).code;
    if (typeof code === "number") return code;
    e = (e as { cause?: unknown }).cause;
  }
  return undefined;
}

function findTooLarge(err: unknown): { size: number; maxSize: number } | null {
  let e: unknown = err;
  for (let depth = 0; e && depth < 8; depth++) {
    const x = e as { name?: string; size?: unknown; maxSize?: unknown; cause?: unknown };
    const named = x.name === "ResponseBodyTooLargeError" || x.name === "ResponseTooLargeError";
    if (named && typeof x.size === "number" && typeof x.maxSize === "number") {
      return { size: x.size, maxSize: x.maxSize };
    }
    e = x.cause;
  }
  return null;
}

function httpStatus(err: unknown): number | undefined {
  if (err instanceof RpcHttpError || err instanceof RpcResponseError) return err.status;
  if (err instanceof BaseError) {
    const http = err.walk((e) => e instanceof HttpRequestError) as HttpRequestError | null;
    return http?.status;
  }
  return undefined;
}

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

/**
 * Reads an `eth_getLogs` failure as a refused range when it is one: provider-specific messages
 * ("block range too large", "query returned more than 10000 results", "Log response size exceeded …
 * this block range should work: [0x…, 0x…]"), codes -32005 (limit exceeded) and -32602 (invalid params)
 * with range wording, HTTP 413, and viem's response-size guard. Rate limits are not range errors.
 */
export function asRangeRefusal(err: unknown, from: bigint, span?: bigint): RangeRefusedError | null {
  if (err instanceof RangeRefusedError) return err;
  const text = errorText(err);
  const code = rpcCode(err);
  const status = httpStatus(err);
  if (status === 429 || RATE_LIMIT.test(text)) return null;
  const bodyTooLarge = findTooLarge(err) !== null || text.includes("exceeded the size limit");
  const isRange =
    bodyTooLarge || status === 413 || (code === -32005 && !RATE_LIMIT.test(text)) || RANGE_WORDS.test(text);
  if (!isRange) return null;
  const resultWords = /result|\blogs\b|response size|size limit|payload/;
  const kind = resultWords.test(text) && !/block range (is )?too/.test(text) ? "results" : "blocks";
  return new RangeRefusedError(text.slice(0, 300), kind, suggestedSpan(err, text, kind, from, span));
}

/** The span a refusal suggests: from viem's size report, a provider's "[0x…, 0x…]" hint, or a stated maximum. */
function suggestedSpan(err: unknown, text: string, kind: string, from: bigint, span?: bigint): bigint | undefined {
  const tooLarge = findTooLarge(err);
  if (tooLarge && span !== undefined && tooLarge.size > 0) {
    // Shrink to half of what would have fitted, to leave room for denser blocks.
    const fit = (span * BigInt(Math.floor((tooLarge.maxSize / tooLarge.size) * 1000))) / 2000n;
    return fit > 0n ? fit : 1n;
  }
  const bracket = /\[\s*(0x[0-9a-f]+)\s*,\s*(0x[0-9a-f]+)\s*\]/.exec(text);
  if (bracket) {
    const to = BigInt(bracket[2]!);
    return to >= from ? to - from + 1n : undefined;
  }
  if (kind !== "blocks") return undefined;
  const cap = /(?:max(?:imum)?|limit(?:ed)? to|up to|at most)[^0-9]{0,24}([0-9][0-9,_]*)/.exec(text);
  const n = cap ? BigInt(cap[1]!.replace(/[,_]/g, "")) : 0n;
  return n > 0n ? n : undefined;
}

/** Whether a failed call is worth retrying as is (anything but a refused range or a reverted call). */
function retryable(err: unknown): boolean {
  if (err instanceof RangeRefusedError) return false;
  const text = errorText(err);
  return !/execution reverted|revert/.test(text);
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** Runs `fn`, retrying transient failures (network, timeouts, 429, 5xx, JSON-RPC server errors) with backoff. */
export async function withRetry<T>(
  label: string,
  fn: () => Promise<T>,
  policy: RetryPolicy = defaultRetry,
): Promise<T> {
  let last: unknown;
  for (let attempt = 0; attempt < policy.attempts; attempt++) {
    try {
      return await fn();
    } catch (err) {
      if (!retryable(err)) throw err;
      last = err;
      if (attempt + 1 < policy.attempts) {
        const delay = Math.min(policy.maxMs, policy.baseMs * 2 ** attempt);
        await sleep(delay / 2 + Math.random() * (delay / 2));
      }
    }
  }
  const msg = last instanceof BaseError ? last.shortMessage : (last as Error)?.message;
  throw new RpcUnavailableError(`${label} failed after ${policy.attempts} attempts: ${msg}`, { cause: last });
}

/** Largest `eth_getLogs` answer read over the direct path (a bigger one is refused like a provider would). */
export const MAX_LOGS_RESPONSE_BYTES = 256 * 1024 * 1024;

/** An answer larger than the reader accepts. */
class ResponseTooLargeError extends Error {
  override name = "ResponseTooLargeError";
  constructor(
    readonly size: number,
    readonly maxSize: number,
  ) {
    super(`response of ${size} bytes exceeds ${maxSize} bytes`);
  }
}

type Endpoint = { url: string; headers: Record<string, string>; timeoutMs: number };
const endpoints = new WeakMap<object, Endpoint | null>();
let nextId = 1;

/**
 * The URL behind a plain viem `http` transport, for the hot `eth_getLogs` path: posting there directly and
 * parsing with `Response.json()` costs a fraction of viem's request pipeline, and viem's 10 MB answer cap does
 * not turn a dense range into a refused (but fully computed) request. Other transports go through viem.
 */
function endpointOf(client: PublicClient): Endpoint | null {
  let ep = endpoints.get(client);
  if (ep !== undefined) return ep;
  const t = client.transport as {
    type?: string;
    url?: unknown;
    timeout?: unknown;
    fetchOptions?: { headers?: unknown };
  };
  ep = null;
  if (t?.type === "http" && typeof t.url === "string") {
    const headers: Record<string, string> = {};
    new Headers((t.fetchOptions?.headers ?? {}) as HeadersInit).forEach((v, k) => (headers[k] = v));
    ep = { url: t.url, headers, timeoutMs: typeof t.timeout === "number" ? t.timeout : 10_000 };
  }
  endpoints.set(client, ep);
  return ep;
}

async function postRpc(ep: Endpoint, method: string, params: unknown[]): Promise<unknown> {
  const res = await fetch(ep.url, {
    method: "POST",
    headers: { "content-type": "application/json", ...ep.headers },
    body: JSON.stringify({ jsonrpc: "2.0", id: nextId++, method, params }),
    signal: AbortSignal.timeout(ep.timeoutMs),
  });
  if (!res.ok) {
    const text = await res.text().catch(() => "");
    let error: { code?: unknown; message?: unknown } | undefined;
    try {
      error = (JSON.parse(text) as { error?: { code?: unknown; message?: unknown } }).error;
    } catch {
      // not a JSON-RPC error body
    }
    if (error && typeof error.code === "number")
      throw new RpcResponseError(error.code, String(error.message), res.status);
    throw new RpcHttpError(res.status, text.slice(0, 300));
  }
  const size = Number(res.headers.get("content-length") ?? 0);
  if (size > MAX_LOGS_RESPONSE_BYTES) {
    await res.body?.cancel();
    throw new ResponseTooLargeError(size, MAX_LOGS_RESPONSE_BYTES);
  }
  const body = (await res.json()) as { result?: unknown; error?: { code: number; message: string } };
  if (body.error) throw new RpcResponseError(body.error.code, body.error.message);
  return body.result;
}

/** Latest block number. */
export async function getHead(client: PublicClient, policy?: RetryPolicy): Promise<bigint> {
  return withRetry("eth_blockNumber", async () => BigInt(await client.request({ method: "eth_blockNumber" })), policy);
}

/** Raw `eth_getLogs` for one range; a refused range throws RangeRefusedError (never retried as is). */
export async function getLogs(
  client: PublicClient,
  filter: { address?: string[]; topics?: (string[] | null)[] },
  from: bigint,
  to: bigint,
  policy?: RetryPolicy,
): Promise<RawLog[]> {
  let timeouts = 0;
  return withRetry(
    "eth_getLogs",
    async () => {
      try {
        const params = { fromBlock: hex(from), toBlock: hex(to), ...filter };
        const ep = endpointOf(client);
        const logs = ep
          ? await postRpc(ep, "eth_getLogs", [params])
          : await client.request({ method: "eth_getLogs", params: [params as never] });
        if (!Array.isArray(logs)) throw new RpcResponseError(-32603, "eth_getLogs answered without a list of logs");
        return logs as RawLog[];
      } catch (err) {
        // A range that times out twice is treated as too heavy for the node: the caller asks a smaller one.
        if (isTimeout(err) && ++timeouts >= 2 && to > from) {
          throw new RangeRefusedError("eth_getLogs timed out twice", "results", (to - from + 1n) / 2n);
        }
        throw asRangeRefusal(err, from, to - from + 1n) ?? err;
      }
    },
    policy,
  );
}

function isTimeout(err: unknown): boolean {
  let e: unknown = err;
  for (let depth = 0; e && depth < 8; depth++) {
    if ((e as { name?: string }).name === "TimeoutError") return true;
    e = (e as { cause?: unknown }).cause;
  }
  return false;
}

/** One block header by number; null when the node does not have that block. */
export async function getHeader(client: PublicClient, n: bigint, policy?: RetryPolicy): Promise<Header | null> {
  const block = (await withRetry(
    "eth_getBlockByNumber",
    () => client.request({ method: "eth_getBlockByNumber", params: [hex(n) as `0x${string}`, false] }),
    policy,
  )) as unknown as RawBlock;
  if (!block) return null;
  return {
    number: BigInt(block.number),
    hash: block.hash.toLowerCase(),
    parentHash: block.parentHash.toLowerCase(),
    timestamp: Number(block.timestamp),
  };
}

/** Headers of many blocks, `concurrency` requests at a time; a missing block gives null in its place. */
export async function getHeaders(
  client: PublicClient,
  numbers: bigint[],
  policy?: RetryPolicy,
  concurrency = 16,
): Promise<Map<bigint, Header | null>> {
  const out = new Map<bigint, Header | null>();
  let next = 0;
  const worker = async () => {
    while (next < numbers.length) {
      const n = numbers[next++]!;
      out.set(n, await getHeader(client, n, policy));
    }
  };
  await Promise.all(Array.from({ length: Math.min(concurrency, numbers.length) }, worker));
  return out;
}

/**
 * Adaptive `eth_getLogs` span: grows while answers are small, shrinks toward `targetLogs` when they are big,
 * halves (or follows the provider's hint) on a refusal, and never grows back to a span the provider refused.
 */
export class RangeSizer {
  size: bigint;
  /** Smallest span refused for its block count; later growth stays below it. */
  private refused: bigint | null = null;
  /** Recently refused ranges ("from-to"), never asked again. */
  private readonly refusedRanges = new Set<string>();
  /** Largest span answered so far. */
  private largestOk = 0n;

  constructor(
    initial: bigint,
    private readonly max: bigint,
    private readonly targetLogs: number,
  ) {
    this.size = initial;
  }

  /** End of the next range from `from`: the current span, capped at `target`, avoiding refused ranges. */
  nextTo(from: bigint, target: bigint): bigint {
    let to = from + this.size - 1n < target ? from + this.size - 1n : target;
    while (to > from && this.refusedRanges.has(`${from}-${to}`)) to = from + (to - from) / 2n;
    return to;
  }

  /** Records a successful span of `span` blocks that returned `logs` logs. */
  success(span: bigint, logs: number): void {
    if (span > this.largestOk) this.largestOk = span;
    let next = this.size;
    if (logs > this.targetLogs) {
      next = (span * BigInt(this.targetLogs)) / BigInt(logs);
    } else if (span < this.size) {
      return; // a short final range with few logs says nothing about the next one
    } else if (logs < this.targetLogs / 2) {
      next = this.size * 2n;
    }
    if (this.refused !== null && next >= this.refused) next = (this.size + this.refused) / 2n;
    if (next > this.max) next = this.max;
    this.size = next < 1n ? 1n : next;
  }

  /** Whether this exact range was refused before (it is then split without asking again). */
  wasRefused(from: bigint, to: bigint): boolean {
    return this.refusedRanges.has(`${from}-${to}`);
  }

  /** Whether a span goes past every span answered so far (unknown density: worth fetching in pieces). */
  exploring(span: bigint): boolean {
    return span > this.largestOk;
  }

  /** Records a refused range; the next span is strictly smaller. */
  refusal(from: bigint, to: bigint, err: RangeRefusedError): void {
    const span = to - from + 1n;
    if (this.refusedRanges.size >= 1000) this.refusedRanges.clear();
    this.refusedRanges.add(`${from}-${to}`);
    if (err.kind === "blocks") this.refused = this.refused === null || span < this.refused ? span : this.refused;
    let next = err.suggestedSize !== undefined && err.suggestedSize < span ? err.suggestedSize : span / 2n;
    if (next < 1n) next = 1n;
    if (next >= span && span > 1n) next = span - 1n;
    this.size = next;
  }
}
