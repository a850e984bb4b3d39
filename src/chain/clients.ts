import { createPublicClient, http, type PublicClient } from "viem";
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

/** A viem public client with no block-number cache and a bounded timeout. */
export function publicClientFor(url: string, timeoutMs = 5000): PublicClient {
  return createPublicClient({ transport: http(url, { timeout: timeoutMs, retryCount: 0 }), cacheTime: 0 });
}

/** Builds the registry; reads the chain id from `RPC_URL` when `CHAIN_ID` is unset. */
export async function createChainRegistry(config: Config): Promise<ChainRegistry> {
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
    clients.set(actual, client);
    urls.set(actual, config.RPC_URL);
  }
  if (defaultChainId === undefined) throw new ChainIdMismatchError("set CHAIN_ID or RPC_URL");
  for (const [id, url] of Object.entries(config.extraRpcUrls)) {
    if (!clients.has(Number(id))) clients.set(Number(id), publicClientFor(url, config.RPC_TIMEOUT_MS));
    if (!urls.has(Number(id))) urls.set(Number(id), url);
  }
  return {
    defaultChainId,
    get: (id) => clients.get(id),
    chainIds: () => [...clients.keys()],
    rpcUrl: (id) => urls.get(id),
  };
}
