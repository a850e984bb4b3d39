import { createPublicClient, http, type PublicClient, type Transport } from "viem";
import type { Config } from "../common/config";
import { AppError } from "../common/errors";

/** Public clients by chain id: the indexed chain plus `RPC_URL_<id>` extras. */
export type ChainRegistry = {
  defaultChainId: number;
  get: (chainId: number) => PublicClient | undefined;
  chainIds: () => number[];
  /** The RPC URL of a chain, for a subsystem that needs its own client (and budget) on it. */
  rpcUrl?: (chainId: number) => string | undefined;
};

/** Thrown when the chain id of `RPC_URL` cannot be read or disagrees with `CHAIN_ID`. */
export class ChainIdMismatchError extends AppError {}

/** Reports each JSON-RPC call and whether it answered (metrics). */
export type RpcObserver = (chainId: number, method: string, ok: boolean) => void;

/** `http(url)` whose every request is reported to `observe` under `chainId`. */
function observedHttp(url: string, timeoutMs: number, chainId: number, observe: RpcObserver): Transport {
  const inner = http(url, { timeout: timeoutMs, retryCount: 0 });
  return (params) => {
    const t = inner(params);
    const request = (async (args: { method: string; params?: unknown }, options?: unknown) => {
      try {
        const result = await (t.request as (a: unknown, o?: unknown) => Promise<unknown>)(args, options);
        observe(chainId, args.method, true);
        return result;
      } catch (err) {
        observe(chainId, args.method, false);
        throw err;
      }
    }) as typeof t.request;
    // `observe` on the transport's value reaches src/chain/rpc.ts, whose eth_getLogs posts to the URL directly.
    return {
      ...t,
      request,
      value: { ...t.value, observe: (method: string, ok: boolean) => observe(chainId, method, ok) },
    };
  };
}

/** A viem public client with no block-number cache and a bounded timeout; calls reported when `observe` is given. */
export function publicClientFor(
  url: string,
  timeoutMs = 5000,
  observe?: { chainId: number; rpc: RpcObserver },
): PublicClient {
  const transport = observe
    ? observedHttp(url, timeoutMs, observe.chainId, observe.rpc)
    : http(url, { timeout: timeoutMs, retryCount: 0 });
  return createPublicClient({ transport, cacheTime: 0 });
}

/**
 * Builds the registry; reads the chain id from `RPC_URL` when `CHAIN_ID` is unset. `rpc` (read at each call, so it
 * may be set after the registry exists) is told of every call of the registry's clients.
 */
export async function createChainRegistry(config: Config, rpc?: { observer?: RpcObserver }): Promise<ChainRegistry> {
  const observed = (chainId: number) =>
    rpc ? { chainId, rpc: (c: number, m: string, ok: boolean) => rpc.observer?.(c, m, ok) } : undefined;
  const clients = new Map<number, PublicClient>();
  const urls = new Map<number, string>();
  let defaultChainId = config.CHAIN_ID;
  if (config.RPC_URL) {
    const client = publicClientFor(config.RPC_URL, config.RPC_TIMEOUT_MS);
    const actual = await client.getChainId();
    if (defaultChainId !== undefined && defaultChainId !== actual) {
      throw new ChainIdMismatchError(`CHAIN_ID=${defaultChainId} but RPC_URL serves chain ${actual}`);
    }
    defaultChainId = actual;
    clients.set(actual, rpc ? publicClientFor(config.RPC_URL, config.RPC_TIMEOUT_MS, observed(actual)) : client);
    urls.set(actual, config.RPC_URL);
  }
  if (defaultChainId === undefined) throw new ChainIdMismatchError("set CHAIN_ID or RPC_URL");
  for (const [id, url] of Object.entries(config.extraRpcUrls)) {
    if (!clients.has(Number(id))) {
      clients.set(Number(id), publicClientFor(url, config.RPC_TIMEOUT_MS, observed(Number(id))));
    }
    if (!urls.has(Number(id))) urls.set(Number(id), url);
  }
  return {
    defaultChainId,
    get: (id) => clients.get(id),
    chainIds: () => [...clients.keys()],
    rpcUrl: (id) => urls.get(id),
  };
}
