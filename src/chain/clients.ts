import { createPublicClient, http, type PublicClient, type Transport } from "viem";
import type { ChainConfig, Config } from "../common/config";
import { AppError } from "../common/errors";
import { budgetFor, retryAfterSeconds } from "./budget";
import { httpStatusOf, isRateLimit } from "./errors";

/** Public clients by chain id: the indexed chains plus `RPC_URL_<id>` extras. */
export type ChainRegistry = {
  /** The chain a request without `chain_id` is about; 0 in a process that answers none (`ROLES=webhooks`). */
  defaultChainId: number;
  /** The chains this deployment indexes, with their chain ids resolved (CHAINS, or RPC_URL's chain). */
  indexed?: (ChainConfig & { chainId: number })[];
  get: (chainId: number) => PublicClient | undefined;
  chainIds: () => number[];
  /** The RPC URL of a chain, for a subsystem that needs its own client (and budget) on it. */
  rpcUrl?: (chainId: number) => string | undefined;
};

/** Thrown when the chain id of `RPC_URL` cannot be read or disagrees with `CHAIN_ID`. */
export class ChainIdMismatchError extends AppError {}

/** Reports each JSON-RPC call and whether it answered (metrics). */
export type RpcObserver = (chainId: number, method: string, ok: boolean) => void;

/** The `Retry-After` seconds of a failed HTTP request, when its error carries the answer's headers. */
function retryAfterOf(err: unknown): number | undefined {
  for (let e = err as { headers?: unknown; cause?: unknown } | undefined; e; e = e.cause as typeof e) {
    if (e.headers instanceof Headers) return retryAfterSeconds(e.headers.get("retry-after"));
  }
  return undefined;
}

/**
 * `http(url)` spending the URL's compute-unit budget (waits for it, bills answered calls, slows down on a 429),
 * and reporting every request to `observe` under `chainId` when given.
 */
function budgetedHttp(url: string, timeoutMs: number, observed?: { chainId: number; rpc: RpcObserver }): Transport {
  const inner = http(url, { timeout: timeoutMs, retryCount: 0 });
  const budget = budgetFor(url);
  const observe = observed ? (method: string, ok: boolean) => observed.rpc(observed.chainId, method, ok) : undefined;
  return (params) => {
    const t = inner(params);
    const request = (async (args: { method: string; params?: unknown }, options?: unknown) => {
      const cost = budget.cost(args.method);
      await budget.acquire(cost);
      try {
        const result = await (t.request as (a: unknown, o?: unknown) => Promise<unknown>)(args, options);
        budget.answered(args.method, cost);
        observe?.(args.method, true);
        return result;
      } catch (err) {
        if (isRateLimit(err)) budget.throttled(retryAfterOf(err));
        else if (httpStatusOf(err) === undefined || httpStatusOf(err)! < 400) budget.answered(args.method, cost);
        observe?.(args.method, false);
        throw err;
      }
    }) as typeof t.request;
    // `observe` and `budget` on the transport's value reach src/chain/rpc.ts, which posts to the URL directly.
    return { ...t, request, value: { ...t.value, observe, budget } };
  };
}

/** A viem public client with no block-number cache and a bounded timeout; calls reported when `observe` is given. */
export function publicClientFor(
  url: string,
  timeoutMs = 5000,
  observe?: { chainId: number; rpc: RpcObserver },
): PublicClient {
  return createPublicClient({ transport: budgetedHttp(url, timeoutMs, observe), cacheTime: 0 });
}

/**
 * Builds the registry: a client per indexed chain (CHAINS, or RPC_URL), each checked against the chain id it was
 * configured for, plus `RPC_URL_<id>` extras. A chain of CHAINS whose RPC does not answer yet is not fatal (its
 * indexer retries); a chain id that disagrees is. `rpc` (read at each call, so it may be set after the registry
 * exists) is told of every call of the registry's clients. Without `needsDefault` (no role reads or writes a chain:
 * the dispatcher alone) no chain need be configured.
 */
export async function createChainRegistry(
  config: Config,
  rpc?: { observer?: RpcObserver },
  { needsDefault = true }: { needsDefault?: boolean } = {},
): Promise<ChainRegistry> {
  const observed = (chainId: number) =>
    rpc ? { chainId, rpc: (c: number, m: string, ok: boolean) => rpc.observer?.(c, m, ok) } : undefined;
  const clients = new Map<number, PublicClient>();
  const urls = new Map<number, string>();
  const sources = config.indexed.length
    ? config.indexed
    : config.RPC_URL
      ? [{ chainId: config.CHAIN_ID, rpcUrl: config.RPC_URL, rpcVariable: "RPC_URL" }]
      : [];
  const indexed: ChainConfig[] = [];
  for (const source of sources) {
    const probe = publicClientFor(source.rpcUrl, config.RPC_TIMEOUT_MS);
    let actual: number;
    try {
      actual = await probe.getChainId();
    } catch (err) {
      if (source.chainId === undefined || !config.CHAINS) {
        const e = err as { shortMessage?: string; message?: string };
        // The host only: a provider's URL often carries its API key in the path.
        const where = URL.canParse(source.rpcUrl) ? new URL(source.rpcUrl).host : "its URL";
        throw new Error(`${source.rpcVariable} (${where}) did not answer eth_chainId: ${e.shortMessage ?? e.message}`, {
          cause: err,
        });
      }
      actual = source.chainId;
    }
    if (source.chainId !== undefined && source.chainId !== actual) {
      throw new ChainIdMismatchError(
        config.CHAINS
          ? `${source.rpcVariable} serves chain ${actual}, not chain ${source.chainId} of CHAINS`
          : `CHAIN_ID=${source.chainId} but RPC_URL serves chain ${actual}`,
      );
    }
    clients.set(actual, rpc ? publicClientFor(source.rpcUrl, config.RPC_TIMEOUT_MS, observed(actual)) : probe);
    urls.set(actual, source.rpcUrl);
    if ("processor" in source) indexed.push({ ...source, chainId: actual });
  }
  const defaultChainId = config.CHAIN_ID ?? indexed[0]?.chainId ?? [...clients.keys()][0] ?? (needsDefault ? null : 0);
  if (defaultChainId === null) throw new ChainIdMismatchError("set CHAIN_ID, RPC_URL or CHAINS");
  for (const [id, url] of Object.entries(config.extraRpcUrls)) {
    if (!clients.has(Number(id))) {
      clients.set(Number(id), publicClientFor(url, config.RPC_TIMEOUT_MS, observed(Number(id))));
    }
    if (!urls.has(Number(id))) urls.set(Number(id), url);
  }
  return {
    defaultChainId,
    indexed: indexed as (ChainConfig & { chainId: number })[],
    get: (id) => clients.get(id),
    chainIds: () => [...clients.keys()],
    rpcUrl: (id) => urls.get(id),
  };
}
