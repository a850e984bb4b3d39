import { BaseError, type PublicClient } from "viem";
import { eachBounded } from "../common/async";
import { budgetFor, retryAfterSeconds, type CuBudget } from "./budget";
import {
  BatchTooLargeError,
  asRangeRefusal,
  isRateLimit,
  isRetryableRpcError,
  isTimeout,
  RangeRefusedError,
  ResponseTooLargeError,
  RpcHttpError,
  RpcResponseError,
  RpcUnavailableError,
} from "./errors";

/** A log exactly as `eth_getLogs` returns it (hex quantities). */
export type RawLog = {
  address: string;
  topics: string[];
  data: string;
  blockNumber: string | null;
  blockHash: string | null;
  blockTimestamp?: string | null;
  transactionHash: string | null;
  logIndex: string | null;
  removed?: boolean;
};

/** A block header reduced to what the indexer keeps (`logsBloom` is checked, never stored). */
export type Header = { number: bigint; hash: string; parentHash: string; timestamp: number; logsBloom?: string };

/** A block (or `newHeads` header) as the node returns it: hex quantities. */
export type RawBlock = {
  number: string;
  hash: string;
  parentHash: string;
  timestamp: string;
  logsBloom?: string;
} | null;

/**
 * Retry policy for one RPC call: `attempts` tries, exponential delays from `baseMs` up to `maxMs`; `throttles`
 * 429s sat out on top, which cost no attempt (default MAX_THROTTLES).
 */
export type RetryPolicy = { attempts: number; baseMs: number; maxMs: number; throttles?: number };

/** Default per-call policy: a handful of quick retries; the poll loop backs off further on top. */
export const defaultRetry: RetryPolicy = { attempts: 5, baseMs: 100, maxMs: 2_000 };

const hex = (n: bigint) => `0x${n.toString(16)}`;

/** Whether a failed call is worth retrying as is (anything but a refused range or a reverted call). */
const retryable = isRetryableRpcError;

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/**
 * 429s a call sits out before it fails: a throttled call is not an attempt (the budget has paused and slowed for
 * it), so a rate-limited provider delays the index instead of failing its polls over and over.
 */
export const MAX_THROTTLES = 120;

/** Runs `fn`, retrying transient failures (network, timeouts, 429, 5xx, JSON-RPC server errors) with backoff. */
export async function withRetry<T>(
  label: string,
  fn: () => Promise<T>,
  policy: RetryPolicy = defaultRetry,
): Promise<T> {
  let last: unknown;
  let throttles = 0;
  for (let attempt = 0; attempt < policy.attempts; attempt++) {
    try {
      return await fn();
    } catch (err) {
      if (!retryable(err)) throw err;
      last = err;
      // The budget waits out a 429 before the next call; it costs no attempt, up to a bound.
      if (isRateLimit(err) && ++throttles <= (policy.throttles ?? MAX_THROTTLES)) {
        attempt--;
        continue;
      }
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

type Endpoint = {
  url: string;
  headers: Record<string, string>;
  timeoutMs: number;
  /** The transport's call observer (metrics), told of direct calls too. */
  observe?: (method: string, ok: boolean) => void;
  /** The URL's compute-unit budget. */
  budget: CuBudget;
};
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
    observe?: (method: string, ok: boolean) => void;
    budget?: CuBudget;
  };
  ep = null;
  if (t?.type === "http" && typeof t.url === "string") {
    const headers: Record<string, string> = {};
    new Headers((t.fetchOptions?.headers ?? {}) as HeadersInit).forEach((v, k) => (headers[k] = v));
    const timeoutMs = typeof t.timeout === "number" ? t.timeout : 10_000;
    ep = { url: t.url, headers, timeoutMs, observe: t.observe, budget: t.budget ?? budgetFor(t.url) };
  }
  endpoints.set(client, ep);
  return ep;
}

async function postRpc(ep: Endpoint, method: string, params: unknown[]): Promise<unknown> {
  if (!ep.observe) return postRpcDirect(ep, method, params);
  try {
    const result = await postRpcDirect(ep, method, params);
    ep.observe(method, true);
    return result;
  } catch (err) {
    ep.observe(method, false);
    throw err;
  }
}

async function postRpcDirect(ep: Endpoint, method: string, params: unknown[]): Promise<unknown> {
  const cost = ep.budget.cost(method);
  await ep.budget.acquire(cost);
  const res = await fetch(ep.url, {
    method: "POST",
    headers: { "content-type": "application/json", ...ep.headers },
    body: JSON.stringify({ jsonrpc: "2.0", id: nextId++, method, params }),
    signal: AbortSignal.timeout(ep.timeoutMs),
  });
  if (res.status === 429) ep.budget.throttled(retryAfterSeconds(res.headers.get("retry-after")));
  else if (res.ok) ep.budget.answered(method, cost);
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

/**
 * The logs of one block by its hash (EIP-234). Unlike a number range, a node that does not know the block fails
 * instead of answering an empty list: the way to tell "no logs" from "not seen yet".
 */
export async function getLogsByHash(
  client: PublicClient,
  filter: { address?: string[]; topics?: (string[] | null)[] },
  blockHash: string,
  policy?: RetryPolicy,
): Promise<RawLog[]> {
  return withRetry(
    "eth_getLogs",
    async () => {
      const params = { blockHash, ...filter };
      const ep = endpointOf(client);
      const logs = ep
        ? await postRpc(ep, "eth_getLogs", [params])
        : await client.request({ method: "eth_getLogs", params: [params as never] });
      if (!Array.isArray(logs)) throw new RpcResponseError(-32603, "eth_getLogs answered without a list of logs");
      return logs as RawLog[];
    },
    policy,
  );
}

/** A raw block as a {@link Header}; null for null. */
export const toHeader = (block: RawBlock): Header | null =>
  block
    ? {
        number: BigInt(block.number),
        hash: block.hash.toLowerCase(),
        parentHash: block.parentHash.toLowerCase(),
        timestamp: Number(block.timestamp),
        logsBloom: block.logsBloom,
      }
    : null;

/** One block header by number (or "latest"); null when the node does not have that block. */
export async function getHeader(
  client: PublicClient,
  n: bigint | "latest",
  policy?: RetryPolicy,
): Promise<Header | null> {
  const tag = (n === "latest" ? n : hex(n)) as `0x${string}`;
  const block = (await withRetry(
    "eth_getBlockByNumber",
    () => client.request({ method: "eth_getBlockByNumber", params: [tag, false] }),
    policy,
  )) as unknown as RawBlock;
  return toHeader(block);
}

const BATCH_REFUSAL = /batch/i;

/** 429s a batch sits out before it is sent as two smaller ones. */
const BATCH_THROTTLES = 3;

/** Posts one JSON-RPC batch; answers in call order (an error in place of a call's result is thrown). */
async function postBatch(ep: Endpoint, method: string, paramsList: unknown[][]): Promise<unknown[]> {
  const cost = ep.budget.cost(method) * paramsList.length;
  await ep.budget.acquire(cost);
  const first = nextId;
  nextId += paramsList.length;
  const body = paramsList.map((params, i) => ({ jsonrpc: "2.0", id: first + i, method, params }));
  const res = await fetch(ep.url, {
    method: "POST",
    headers: { "content-type": "application/json", ...ep.headers },
    body: JSON.stringify(body),
    signal: AbortSignal.timeout(ep.timeoutMs),
  });
  const text = await res.text();
  let parsed: unknown;
  try {
    parsed = JSON.parse(text);
  } catch {
    parsed = undefined;
  }
  if (res.status === 429) {
    ep.budget.throttled(retryAfterSeconds(res.headers.get("retry-after")));
    throw new RpcHttpError(429, text.slice(0, 300));
  }
  const single = parsed && !Array.isArray(parsed) ? (parsed as { error?: { code?: number; message?: string } }) : null;
  if (res.status === 413 || (single?.error && BATCH_REFUSAL.test(String(single.error.message)))) {
    ep.budget.batchRefused();
    throw new BatchTooLargeError(String(single?.error?.message ?? `HTTP ${res.status}`));
  }
  if (!res.ok) throw new RpcHttpError(res.status, text.slice(0, 300));
  if (single?.error) throw new RpcResponseError(Number(single.error.code), String(single.error.message));
  if (!Array.isArray(parsed)) throw new RpcResponseError(-32603, "a batch was answered without a list");
  const byId = new Map<number, { result?: unknown; error?: { code: number; message: string } }>();
  for (const a of parsed as { id: number; result?: unknown; error?: { code: number; message: string } }[])
    byId.set(Number(a.id), a);
  const out: unknown[] = [];
  for (let i = 0; i < paramsList.length; i++) {
    const a = byId.get(first + i);
    if (!a) throw new RpcResponseError(-32603, `a batch answer lacks call ${i}`);
    if (a.error) {
      if (a.error.code === 429 || isRateLimit(new Error(a.error.message))) ep.budget.throttled();
      throw new RpcResponseError(a.error.code, a.error.message, a.error.code === 429 ? 429 : undefined);
    }
    out.push(a.result);
  }
  ep.budget.answered(method, cost);
  ep.observe?.(method, true);
  return out;
}

/**
 * Headers of many blocks; a missing block gives null in its place. Over HTTP they go in JSON-RPC batches (at most
 * RPC_MAX_BATCH calls, and no dearer than the budget's bucket; halved when the provider refuses a batch's size),
 * `concurrency` batches at a time; other transports ask one call per block.
 */
export async function getHeaders(
  client: PublicClient,
  numbers: bigint[],
  policy?: RetryPolicy,
  concurrency = 4,
): Promise<Map<bigint, Header | null>> {
  const out = new Map<bigint, Header | null>();
  const ep = endpointOf(client);
  if (!ep || numbers.length === 1) {
    await eachBounded(numbers, 16, async (n) => void out.set(n, await getHeader(client, n, policy)));
    return out;
  }
  const fetchChunk = async (chunk: bigint[]): Promise<void> => {
    try {
      const blocks = await withRetry(
        "eth_getBlockByNumber",
        () =>
          postBatch(
            ep,
            "eth_getBlockByNumber",
            chunk.map((n) => [hex(n), false]),
          ),
        // A batch throttled again and again may cost more than the provider's whole burst: it goes in halves.
        chunk.length > 1 ? { ...(policy ?? defaultRetry), throttles: BATCH_THROTTLES } : policy,
      );
      chunk.forEach((n, i) => out.set(n, toHeader(blocks[i] as RawBlock)));
    } catch (err) {
      if (chunk.length === 1) throw err;
      if (!(err instanceof BatchTooLargeError)) {
        if (!isRateLimit(err)) throw err;
        ep.budget.batchRefused();
      }
      const size = Math.max(1, Math.min(ep.budget.maxBatch, Math.floor(chunk.length / 2)));
      await eachBounded(chunksOf(chunk, size), concurrency, fetchChunk);
    }
  };
  await eachBounded(
    chunksOf(numbers, ep.budget.batchFor(ep.budget.cost("eth_getBlockByNumber"))),
    concurrency,
    fetchChunk,
  );
  return out;
}

function chunksOf<T>(list: T[], size: number): T[][] {
  const out: T[][] = [];
  for (let i = 0; i < list.length; i += size) out.push(list.slice(i, i + size));
  return out;
}

/**
 * Adaptive `eth_getLogs` span: grows while answers are small, shrinks toward `targetLogs` when they are big,
 * halves (or follows the provider's hint) on a refusal, and never grows back to a span the provider refused.
 * `proportional`: after a full span the next one is sized from its density (`span × targetLogs / logs`, at most
 * four times as wide), so a sparse stretch is crossed in few calls; otherwise a small answer doubles the span.
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
    private readonly proportional = false,
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
    } else if (this.proportional) {
      const wide = this.size * 4n;
      next = logs === 0 ? wide : (span * BigInt(this.targetLogs)) / BigInt(logs);
      if (next > wide) next = wide;
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
