import { defineChain, type Chain } from "viem";

/** A viem chain for an EVM chain known only by id and RPC endpoint (native currency: 18-decimal ether). */
export function chainDefinition(chainId: number, rpcUrl?: string, name = `chain-${chainId}`): Chain {
  return defineChain({
    id: chainId,
    name,
    nativeCurrency: { name: "Ether", symbol: "ETH", decimals: 18 },
    rpcUrls: { default: { http: rpcUrl ? [rpcUrl] : [] } },
  });
}
