/**
 * examples/gated-api against the real API (seeded fixture, on a real port) and a real anvil (SIWE verification):
 * sign in with a wallet, the signed cookie, /premium open to a paid-up wallet, 402 to an unpaid one, 401 without a
 * session, with a tampered cookie or with a replayed nonce.
 */
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { createSiweMessage } from "viem/siwe";
import type { PrivateKeyAccount } from "viem/accounts";
import { createGatedApi } from "../../examples/gated-api/app";
import { startAnvil, type Anvil } from "../../src/chain/anvil";
import { startSeededApp, type SeededApp } from "../../testkit/app";
import { accounts } from "../../testkit/accounts";
import { CHAIN_A, MOD, W } from "../../testkit/seed";

let seeded: SeededApp;
let anvil: Anvil;
let server: ReturnType<typeof Bun.serve>;
let base: string;
const DOMAIN = "localhost:8787";

beforeAll(async () => {
  seeded = await startSeededApp();
  seeded.app.listen({ port: 0, hostname: "127.0.0.1" });
  anvil = await startAnvil();
  const app = createGatedApi({
    subsUrl: `http://127.0.0.1:${seeded.app.server!.port}`,
    module: MOD.a1,
    plans: [1],
    rpcUrl: anvil.rpcUrl,
    domain: DOMAIN,
    cookieSecret: "test-cookie-secret-0123456789abcdef",
  });
  server = Bun.serve({ port: 0, hostname: "127.0.0.1", fetch: app.fetch });
  base = `http://127.0.0.1:${server.port}`;
}, 60_000);

afterAll(async () => {
  server?.stop(true);
  await anvil?.stop();
  seeded?.app.server?.stop(true);
  await seeded?.close();
});

async function signIn(account: PrivateKeyAccount, nonce?: string) {
  nonce ??= ((await (await fetch(`${base}/nonce`)).json()) as { nonce: string }).nonce;
  const message = createSiweMessage({
    domain: DOMAIN,
    address: account.address,
    uri: `http://${DOMAIN}`,
    version: "1",
    chainId: CHAIN_A,
    nonce,
  });
  const signature = await account.signMessage({ message });
  const res = await fetch(`${base}/login`, { method: "POST", body: JSON.stringify({ message, signature }) });
  return { res, nonce, cookie: res.headers.get("set-cookie")?.split(";")[0] };
}

const premium = (cookie?: string) => fetch(`${base}/premium`, { headers: cookie ? { cookie } : {} });

describe("examples/gated-api", () => {
  test("a paid-up wallet signs in and reads /premium; an unpaid one gets 402", async () => {
    const alice = await signIn(accounts.alice);
    expect(alice.res.status).toBe(200);
    expect(alice.res.headers.get("set-cookie")).toContain("HttpOnly");
    const ok = await premium(alice.cookie);
    expect(ok.status).toBe(200);
    expect(await ok.json()).toMatchObject({
      content: "premium",
      wallet: W.alice,
      subscription: { authorized: true, matchingPlans: ["1"] },
    });
    const bob = await signIn(accounts.bob);
    expect(bob.res.status).toBe(200);
    const refused = await premium(bob.cookie);
    expect(refused.status).toBe(402);
    expect(await refused.json()).toMatchObject({ error: "subscription_required", wallet: W.bob, plans: ["1"] });
  });

  test("401 without a session, with a tampered cookie, with a replayed nonce or someone else's signature", async () => {
    expect((await premium()).status).toBe(401);
    const bob = await signIn(accounts.bob);
    // Bob's signed cookie with alice's address in it: the signature no longer matches.
    const tampered = bob.cookie!.replace(W.bob, W.alice);
    expect(tampered).not.toBe(bob.cookie);
    expect((await premium(tampered)).status).toBe(401);
    const replay = await signIn(accounts.bob, bob.nonce);
    expect(replay.res.status).toBe(401);
    expect(replay.cookie).toBeUndefined();
    // A message naming alice signed by bob.
    const { nonce } = (await (await fetch(`${base}/nonce`)).json()) as { nonce: string };
    const message = createSiweMessage({
      domain: DOMAIN,
      address: accounts.alice.address,
      uri: `http://${DOMAIN}`,
      version: "1",
      chainId: CHAIN_A,
      nonce,
    });
    const forged = await fetch(`${base}/login`, {
      method: "POST",
      body: JSON.stringify({ message, signature: await accounts.bob.signMessage({ message }) }),
    });
    expect(forged.status).toBe(401);
  });
});
