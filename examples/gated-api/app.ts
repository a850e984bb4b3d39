/**
 * A merchant's API where end users sign in with their wallet (SIWE, EIP-4361, verified with viem) and get a signed
 * session cookie; `/premium` is open only to wallets paid up on the merchant's plans (`@subscription-indexer/gate`).
 */
import { Hono } from "hono";
import { deleteCookie, getSignedCookie, setSignedCookie } from "hono/cookie";
import { createPublicClient, http, type Hex } from "viem";
import { generateSiweNonce, parseSiweMessage } from "viem/siwe";
// In your project: from "@subscription-indexer/gate".
import { createGate, type CheckResult } from "../../packages/gate/src/index";

/** What the example needs to run. */
export type GatedApiOptions = {
  /** Base URL of the subscription indexer. */
  subsUrl: string;
  /** The merchant's subscription module and plans. */
  module: string;
  plans: number[];
  /** An RPC endpoint of the chain (SIWE signatures of smart-contract wallets are checked on chain). */
  rpcUrl: string;
  /** The host users sign in on (the SIWE message's domain), e.g. `localhost:8787`. */
  domain: string;
  /** Signs the session cookie (at least 32 random characters). */
  cookieSecret: string;
  /** The indexer's webhook endpoint secret for this server (`whsec_…`); without it answers are cached until expiry. */
  webhookSecret?: string;
};

const COOKIE = "wallet";
const NONCE_TTL_MS = 10 * 60_000;

/** The example's Hono app. */
export function createGatedApi(opts: GatedApiOptions) {
  const chainClient = createPublicClient({ transport: http(opts.rpcUrl) });
  const gate = createGate({ baseUrl: opts.subsUrl, module: opts.module, plans: opts.plans });
  const nonces = new Map<string, number>();
  const secure = !opts.domain.startsWith("localhost") && !opts.domain.startsWith("127.0.0.1");

  const app = new Hono<{ Variables: { wallet?: string; subscription: CheckResult } }>();

  // The signed-in wallet, from the signed cookie (a tampered cookie reads as none).
  app.use("*", async (c, next) => {
    const wallet = await getSignedCookie(c, opts.cookieSecret, COOKIE);
    if (wallet) c.set("wallet", wallet);
    await next();
  });

  app.get("/nonce", (c) => {
    const now = Date.now();
    for (const [n, exp] of nonces) if (exp < now) nonces.delete(n);
    const nonce = generateSiweNonce();
    nonces.set(nonce, now + NONCE_TTL_MS);
    return c.json({ nonce });
  });

  app.post("/login", async (c) => {
    const { message, signature } = await c.req.json<{ message: string; signature: Hex }>();
    const { nonce, address } = parseSiweMessage(message);
    // Single use, whatever the outcome.
    const fresh = nonce !== undefined && (nonces.get(nonce) ?? 0) > Date.now();
    if (nonce) nonces.delete(nonce);
    const valid =
      fresh &&
      address !== undefined &&
      (await chainClient.verifySiweMessage({ message, signature, domain: opts.domain, nonce }).catch(() => false));
    if (!valid) return c.json({ error: "invalid_signature" }, 401);
    const wallet = address.toLowerCase();
    await setSignedCookie(c, COOKIE, wallet, opts.cookieSecret, {
      httpOnly: true,
      sameSite: "Lax",
      secure,
      path: "/",
      maxAge: 24 * 3600,
    });
    return c.json({ wallet });
  });

  app.post("/logout", (c) => {
    deleteCookie(c, COOKIE, { path: "/" });
    return c.json({ ok: true });
  });

  app.use("/premium/*", gate.hono({ wallet: (c) => c.get("wallet") }));
  app.get("/premium", (c) =>
    c.json({ content: "premium", wallet: c.get("wallet"), subscription: c.get("subscription") }),
  );

  if (opts.webhookSecret) app.post("/webhooks/subscriptions", gate.webhooks({ secret: opts.webhookSecret }));
  return app;
}
