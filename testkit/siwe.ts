/** Helpers for tests that sign in with SIWE through the HTTP routes. */
import { createSiweMessage } from "viem/siwe";
import type { Address, Hex, LocalAccount } from "viem";

/** Anything with Elysia's `handle`. */
export type Handler = { handle: (req: Request) => Promise<Response> };

/** Base URL of test requests (Elysia 404s hosts shorter than 4 characters). */
export const BASE = "http://localhost";

/** Sends a JSON POST. */
export function postJson(app: Handler, path: string, body: unknown, headers: Record<string, string> = {}, base = BASE) {
  return app.handle(
    new Request(base + path, {
      method: "POST",
      headers: { "content-type": "application/json", ...headers },
      body: typeof body === "string" ? body : JSON.stringify(body),
    }),
  );
}

/** Sends a GET. */
export function get(app: Handler, path: string, headers: Record<string, string> = {}, base = BASE) {
  return app.handle(new Request(base + path, { headers }));
}

/** A fresh nonce from `GET /v0/siwe/nonce`. */
export async function fetchNonce(app: Handler): Promise<string> {
  const res = await get(app, "/v0/siwe/nonce");
  if (res.status !== 200) throw new Error(`nonce: ${res.status} ${await res.text()}`);
  return ((await res.json()) as { nonce: string }).nonce;
}

/** Fields of a test sign-in message; defaults make a valid message for localhost on chain 31337. */
export type MessageOpts = {
  nonce: string;
  address: Address;
  domain?: string;
  chainId?: number;
  issuedAt?: Date;
  expirationTime?: Date;
  notBefore?: Date;
};

/** An EIP-4361 message as a wallet would show it. */
export function siweMessage(o: MessageOpts): string {
  return createSiweMessage({
    domain: o.domain ?? "localhost",
    address: o.address,
    statement: "Sign in to the subscription payments API.",
    uri: `http://${o.domain ?? "localhost"}`,
    version: "1",
    chainId: o.chainId ?? 31337,
    nonce: o.nonce,
    issuedAt: o.issuedAt ?? new Date(),
    expirationTime: o.expirationTime,
    notBefore: o.notBefore,
  });
}

/** A signed sign-in for `account` with a fresh nonce (override any message field). */
export async function signedSignIn(
  app: Handler,
  account: LocalAccount,
  opts: Partial<MessageOpts> = {},
): Promise<{ message: string; signature: Hex }> {
  const message = siweMessage({ nonce: opts.nonce ?? (await fetchNonce(app)), address: account.address, ...opts });
  return { message, signature: await account.signMessage({ message }) };
}

/** Signs in `account` and returns the session token (throws unless 200). */
export async function signIn(app: Handler, account: LocalAccount, opts: Partial<MessageOpts> = {}): Promise<string> {
  const res = await postJson(app, "/v0/siwe/verify", await signedSignIn(app, account, opts));
  if (res.status !== 200) throw new Error(`verify: ${res.status} ${await res.text()}`);
  return ((await res.json()) as { token: string }).token;
}
