/** Sign-In with Ethereum through the injected EIP-1193 provider (`window.ethereum`). */
import { getAddress } from "viem";
import { createSiweMessage } from "viem/siwe";
import { api, type Credential } from "./api";

type Eip1193 = { request(args: { method: string; params?: unknown[] }): Promise<unknown> };

/** The injected provider, if any. */
export function injectedProvider(): Eip1193 | null {
  return ((window as unknown as { ethereum?: Eip1193 }).ethereum as Eip1193 | undefined) ?? null;
}

/**
 * Asks the wallet for an account, builds an EIP-4361 message for this host with a nonce from `/v0/siwe/nonce`,
 * has the wallet sign it (`personal_sign`) and exchanges it at `/v0/siwe/verify` for a session token.
 */
export async function signInWithWallet(provider: Eip1193): Promise<Credential> {
  const accounts = (await provider.request({ method: "eth_requestAccounts" })) as string[];
  if (!accounts?.length) throw new Error("The wallet shared no account.");
  const address = getAddress(accounts[0]!);
  const chainId = Number.parseInt(String(await provider.request({ method: "eth_chainId" })), 16);
  const { data: nonce } = await api<{ nonce: string }>("/v0/siwe/nonce", { credential: null });
  const message = createSiweMessage({
    domain: location.host,
    address,
    statement: "Sign in to the merchant dashboard.",
    uri: location.origin,
    version: "1",
    chainId,
    nonce: nonce.nonce,
    issuedAt: new Date(),
  });
  const signature = await provider.request({ method: "personal_sign", params: [message, address] });
  const { data } = await api<{ token: string; address: string }>("/v0/siwe/verify", {
    method: "POST",
    body: { message, signature },
    credential: null,
  });
  return { kind: "session", token: data.token, merchant: data.address.toLowerCase() };
}
