/** Multicall3 at its canonical address: where it lives on a chain, and installing it on a local anvil chain. */
import { getAddress, type Address } from "viem";
import { multicall3RuntimeCode } from "./multicall3-code";

/** The address Multicall3 has on nearly every EVM chain (the same deployer and nonce everywhere). */
export const MULTICALL3_ADDRESS: Address = getAddress("0xcA11bde05977b3631167028862bE2a173976CA11");

/**
 * Installs Multicall3's runtime code at `address` on an anvil node (`anvil_setCode`), as it is on public chains;
 * the next block sees it. Only for local chains: no real node accepts `anvil_setCode`.
 */
export async function installMulticall3(rpcUrl: string, address: Address = MULTICALL3_ADDRESS): Promise<void> {
  const res = await fetch(rpcUrl, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify({ jsonrpc: "2.0", id: 1, method: "anvil_setCode", params: [address, multicall3RuntimeCode] }),
  });
  const body = (await res.json()) as { error?: { message: string } };
  if (body.error) throw new Error(`anvil_setCode of Multicall3 failed: ${body.error.message}`);
}
