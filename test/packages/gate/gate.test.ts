/**
 * The gate in front of the real service (API on a real port, indexer and webhook dispatcher over a real anvil), in a
 * real server of each framework (express, hono, elysia, Bun.serve): paid-up and unknown wallets, the webhook-driven
 * eviction on a cancellation (real signed deliveries from the service's dispatcher), forged webhooks, the API
 * stopped (503 or the stale answer per `failOpen`), and the cached answer ending at `validUntil` after the
 * allocation expires with no event (anvil time travel; the gates' clocks are set to the instants around it).
 */
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { Webhook } from "standardwebhooks";
import { createGate, GateRequestError, type Gate } from "../../../packages/gate/src/index";
import { startSdkStack, type SdkStack } from "../../../testkit/sdk-stack";
import { FRAMEWORKS, startMerchantServer, type Framework, type MerchantServer } from "../../../testkit/sdk-servers";
import { freePort } from "../../../testkit/cli";
import type { WalletName } from "../../../testkit/chain";

/** Each framework's own subscriber (cancelled in its test). */
const WALLET: Record<Framework, WalletName> = { express: "bob", hono: "alice", elysia: "carol", fetch: "dave" };
/** Paid up throughout (until the time travel at the end). */
const PAID: WalletName = "keeper2";
const UNKNOWN: WalletName = "erin";

let stack: SdkStack;
const servers: MerchantServer[] = [];
const main = new Map<Framework, { server: MerchantServer; secret: string }>();

const addr = (w: WalletName) => stack.chain.address(w).toLowerCase();
const validUntil = (w: WalletName) => new Date(Number(stack.chargedAt.get(w)! + 3_601n) * 1000).toISOString();

async function get(server: MerchantServer, path: string, wallet?: WalletName | string) {
  const headers: Record<string, string> = {};
  if (wallet) headers["x-wallet"] = wallet.startsWith("0x") ? wallet : stack.chain.address(wallet as WalletName);
  const res = await fetch(server.url + path, { headers });
  return { status: res.status, headers: res.headers, body: (await res.json()) as any };
}

/** A gate of the stack's module and plans, with its server on a real port (its own webhook endpoint). */
async function serve(framework: Framework, extra: Partial<Parameters<typeof createGate>[0]> = {}, endpoint = true) {
  const port = await freePort();
  const secret = endpoint
    ? await stack.endpoint(`http://127.0.0.1:${port}/webhooks`)
    : "whsec_" + Buffer.from(crypto.getRandomValues(new Uint8Array(32))).toString("base64");
  const gate: Gate = createGate({ baseUrl: stack.url, module: stack.module, plans: [7, 8], ...extra });
  const server = await startMerchantServer(framework, gate, { port, secret });
  servers.push(server);
  return { server, secret, gate };
}

/** A proxy to the API that answers 150 ms late, so a check's answer is on its way while a test acts. */
function slowProxy() {
  let requests = 0;
  const server = Bun.serve({
    port: 0,
    hostname: "127.0.0.1",
    async fetch(req) {
      requests++;
      await Bun.sleep(150);
      const u = new URL(req.url);
      return fetch(stack.url + u.pathname + u.search);
    },
  });
  return { url: `http://127.0.0.1:${server.port}`, requests: () => requests, stop: () => server.stop(true) };
}

async function until(what: string, cond: () => boolean, timeoutMs = 15_000) {
  const end = Date.now() + timeoutMs;
  while (!cond()) {
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}`);
    await Bun.sleep(20);
  }
}

beforeAll(async () => {
  stack = await startSdkStack(["alice", "bob", "carol", "dave", PAID]);
  for (const fw of FRAMEWORKS) main.set(fw, await serve(fw));
  // A delivery landing during a check evicts, and keeps that check's answer out of the cache: the setup's go first.
  await stack.delivered();
}, 60_000);

afterAll(async () => {
  for (const s of servers) await s.stop();
  await stack?.stop();
}, 30_000);

describe.each(FRAMEWORKS)("%s", (fw) => {
  test("a paid-up wallet passes with the service's answer; the next request comes from the cache", async () => {
    const { server } = main.get(fw)!;
    const first = await get(server, "/premium", WALLET[fw]);
    expect(first.status).toBe(200);
    expect(first.body).toEqual({
      authorized: true,
      matchingPlans: ["7"],
      source: "api",
      indexedBlock: expect.stringMatching(/^\d+$/),
      validUntil: validUntil(WALLET[fw]),
    });
    expect((await get(server, "/premium", WALLET[fw])).body.source).toBe("cache");
    expect((await get(server, "/free")).status).toBe(200);
  });

  test("an unknown wallet gets 402 naming the module and plans; no wallet or a malformed one gets 401", async () => {
    const { server } = main.get(fw)!;
    const unknown = await get(server, "/premium", UNKNOWN);
    expect(unknown.status).toBe(402);
    expect(unknown.body).toEqual({
      error: "subscription_required",
      message: "an active subscription to one of these plans is required",
      wallet: addr(UNKNOWN),
      module: stack.module.toLowerCase(),
      plans: ["7", "8"],
      accepts: [expect.objectContaining({ plan_id: "7" }), expect.objectContaining({ plan_id: "8" })],
    });
    expect((await get(server, "/premium")).status).toBe(401);
    expect((await get(server, "/premium", "0x1234")).status).toBe(401);
  });

  test("after the subscriber cancels, the next request is refused as soon as the webhook arrives", async () => {
    const { server } = main.get(fw)!;
    const w = WALLET[fw];
    expect((await get(server, "/premium", w)).body.source).toBe("cache");
    await stack.cancel(w);
    await until("the cancellation's webhook", () =>
      server.deliveries.some(
        (d) => d.type === "subscription.status_changed" && d.status === 200 && d.body.evicted?.includes(addr(w)),
      ),
    );
    const refused = await get(server, "/premium", w);
    expect(refused.status).toBe(402);
    // Well before the cached answer would have ended on its own.
    expect(Date.parse(validUntil(w)) - Date.now()).toBeGreaterThan(50 * 60_000);
  });

  test("a forged webhook is refused and evicts nothing; a correctly signed one evicts", async () => {
    const { server, secret } = main.get(fw)!;
    await get(server, "/premium", PAID);
    const cached = await get(server, "/premium", PAID);
    expect(cached.body.source).toBe("cache");
    const body = JSON.stringify({
      id: "evt_forged",
      type: "subscription.status_changed",
      block_number: cached.body.indexedBlock,
      data: { object: { user_address: addr(PAID), status: "CANCELLED" }, previous_status: "ACTIVE" },
    });
    const post = (payload: string, headers: Record<string, string>) =>
      fetch(server.url + "/webhooks", {
        method: "POST",
        headers: { "content-type": "application/json", ...headers },
        body: payload,
      });
    const signed = (key: string, payload: string) => {
      const ts = new Date();
      return {
        "webhook-id": "evt_forged",
        "webhook-timestamp": String(Math.floor(ts.getTime() / 1000)),
        "webhook-signature": new Webhook(key).sign("evt_forged", ts, payload),
      };
    };
    const otherKey = "whsec_" + Buffer.from(crypto.getRandomValues(new Uint8Array(32))).toString("base64");
    expect((await post(body, signed(otherKey, body))).status).toBe(401);
    const tampered = body.replace("CANCELLED", "PAUSED");
    expect((await post(tampered, signed(secret, body))).status).toBe(401);
    expect((await post(body, {})).status).toBe(401);
    // Over 64 KiB: refused before any verification.
    expect((await post("x".repeat(64 * 1024 + 1), signed(secret, body))).status).toBe(413);
    const old = signed(secret, body);
    old["webhook-timestamp"] = String(Math.floor(Date.now() / 1000) - 3600);
    expect((await post(body, old)).status).toBe(401);
    expect((await get(server, "/premium", PAID)).body.source).toBe("cache");
    // The same body signed with the endpoint's secret, as the service signs: evicted.
    const ok = await post(body, signed(secret, body));
    expect(ok.status).toBe(200);
    const again = await get(server, "/premium", PAID);
    expect(again.status).toBe(200);
    expect(again.body.source).toBe("api");
  });

  test("API stopped: 503 with failOpen false; the last known answer up to maxStaleMs with failOpen true", async () => {
    const proxy = stack.forward();
    const clock = { t: Date.now() };
    // An answer kept until validUntil (maxAgeMs as long), so that only the outage is tested.
    const opts = { baseUrl: proxy.url, now: () => clock.t, maxAgeMs: 7_200_000 };
    const closed = await serve(fw, opts, false);
    const open = await serve(fw, { ...opts, failOpen: true, maxStaleMs: 7_200_000 }, false);
    const fetchedAt = clock.t;
    for (const s of [closed, open]) expect((await get(s.server, "/premium", PAID)).body.source).toBe("api");
    proxy.stop();
    // Still valid: the cache answers while the API is down.
    expect((await get(closed.server, "/premium", PAID)).body.source).toBe("cache");
    clock.t = Date.parse(validUntil(PAID));
    const refused = await get(closed.server, "/premium", PAID);
    expect(refused.status).toBe(503);
    expect(refused.headers.get("retry-after")).toBe("5");
    expect(refused.body.error).toBe("subscription_check_unavailable");
    const stale = await get(open.server, "/premium", PAID);
    expect(stale.status).toBe(200);
    expect(stale.body).toMatchObject({ authorized: true, source: "stale" });
    // Unknown wallets have no last known answer: 503 even with failOpen.
    expect((await get(open.server, "/premium", UNKNOWN)).status).toBe(503);
    clock.t = fetchedAt + 7_200_001;
    expect((await get(open.server, "/premium", PAID)).status).toBe(503);
  });
});

test("hono: a route gated by honoRoute answers as the middleware-gated one (pass, 402, 401)", async () => {
  const { server } = main.get("hono")!;
  for (const wallet of [PAID, UNKNOWN, undefined, "0x1234"]) {
    const viaMiddleware = await get(server, "/premium", wallet);
    const viaRoute = await get(server, "/premium-route", wallet);
    // `source` aside: the first of the two may have asked the service, the second then reads the cache.
    const { source: _a, ...route } = viaRoute.body;
    const { source: _b, ...middleware } = viaMiddleware.body;
    expect({ wallet, status: viaRoute.status, body: route }).toEqual({
      wallet,
      status: viaMiddleware.status,
      body: middleware,
    });
  }
  // A paid-up wallet: the route ran with the gate's result (from the cache, filled by the first request).
  const paid = await get(server, "/premium-route", PAID);
  expect(paid.status).toBe(200);
  expect(paid.body).toMatchObject({ authorized: true, source: "cache", matchingPlans: expect.any(Array) });
  expect((await get(server, "/premium-route", UNKNOWN)).status).toBe(402);
});

describe("cache", () => {
  /** A gate through the proxy, once its start-up request (the plans) went through: later counts are checks. */
  const gateVia = async (proxyUrl: string, extra: Partial<Parameters<typeof createGate>[0]> = {}) => {
    const gate = createGate({ baseUrl: proxyUrl, module: stack.module, plans: [7, 8], ...extra });
    await gate.ready();
    return gate;
  };

  test("one request in flight per wallet", async () => {
    const proxy = stack.forward();
    const gate = await gateVia(proxy.url);
    const answers = await Promise.all(Array.from({ length: 20 }, () => gate.check(addr(PAID))));
    expect(proxy.requests()).toBe(2);
    expect(answers.every((a) => a.authorized && a.source === "api")).toBe(true);
    expect((await gate.check(addr(PAID))).source).toBe("cache");
    proxy.stop();
  });

  test("a negative answer is kept 5 s", async () => {
    const proxy = stack.forward();
    const clock = { t: 1_000_000 };
    const gate = await gateVia(proxy.url, { now: () => clock.t });
    expect((await gate.check(addr(UNKNOWN))).authorized).toBe(false);
    clock.t += 4_999;
    expect(await gate.check(addr(UNKNOWN))).toMatchObject({ authorized: false, source: "cache", validUntil: null });
    expect(proxy.requests()).toBe(2);
    clock.t += 1;
    expect((await gate.check(addr(UNKNOWN))).source).toBe("api");
    expect(proxy.requests()).toBe(3);
    proxy.stop();
  });

  test("only an address reaches the service: a crafted wallet cannot add or override query parameters", async () => {
    const proxy = stack.forward();
    const gate = await gateVia(proxy.url);
    for (const wallet of [`${addr(PAID)}&module_address=${stack.module}`, `${addr(UNKNOWN)}&plan_ids=1`, "", "0x12"]) {
      await expect(gate.check(wallet)).rejects.toBeInstanceOf(GateRequestError);
    }
    expect(proxy.requests()).toBe(1);
    proxy.stop();
  });

  test("an answer fetched while a webhook evicted the wallet is not cached, and later checks do not join it", async () => {
    const slow = slowProxy();
    const gate = await gateVia(slow.url);
    const inFlight = gate.check(addr(PAID));
    await until("the first request reached the service", () => slow.requests() === 2);
    gate.evict(addr(PAID)); // what a cancellation's webhook does while the answer is on its way
    const after = gate.check(addr(PAID));
    expect((await inFlight).source).toBe("api");
    expect((await after).source).toBe("api");
    expect(slow.requests()).toBe(3);
    // The second answer (fetched after the eviction) is cached; the first was not stored over it.
    expect((await gate.check(addr(PAID))).source).toBe("cache");
    expect(slow.requests()).toBe(3);
    slow.stop();
  });

  test("another wallet's eviction while an answer is on its way leaves that answer cached", async () => {
    const slow = slowProxy();
    const gate = await gateVia(slow.url);
    const inFlight = gate.check(addr(PAID));
    await until("the request reached the service", () => slow.requests() === 2);
    gate.evict(addr("alice")); // a webhook about someone else
    expect((await inFlight).source).toBe("api");
    expect((await gate.check(addr(PAID))).source).toBe("cache");
    expect(slow.requests()).toBe(2);
    slow.stop();
  });

  test("at most cacheSize wallets, the least recently used dropped first", async () => {
    const proxy = stack.forward();
    const gate = await gateVia(proxy.url, { cacheSize: 2 });
    const [a, b, c] = (["erin", "merchant2", "deployer"] as const).map(addr);
    await gate.check(a!);
    await gate.check(b!);
    await gate.check(a!); // a is now the most recent
    await gate.check(c!); // drops b
    expect(proxy.requests()).toBe(4);
    expect((await gate.check(a!)).source).toBe("cache");
    expect((await gate.check(c!)).source).toBe("cache");
    expect((await gate.check(b!)).source).toBe("api");
    proxy.stop();
  });
});

describe("validUntil", () => {
  test("after the allocation expires with no event, each framework's cached answer ends exactly at validUntil", async () => {
    const clock = { t: Date.now() };
    const gated = await Promise.all(
      FRAMEWORKS.map((fw) => serve(fw, { now: () => clock.t, maxAgeMs: 7_200_000 }, false)),
    );
    for (const { server } of gated) expect((await get(server, "/premium", PAID)).body.source).toBe("api");
    const end = Date.parse(validUntil(PAID));
    // The chain moves past the expiry; the index follows; no webhook reaches these gates.
    await stack.chain.testClient.increaseTime({ seconds: 3_700 });
    await stack.chain.testClient.mine({ blocks: 1 });
    await stack.synced();
    // The service's own cache follows the batch notification (asynchronous on Postgres): wait until it says so.
    const direct = `${stack.url}/v0/auth/check?module_address=${stack.module}&wallet=${addr(PAID)}&plan_ids=7,8`;
    const deadline = Date.now() + 10_000;
    while (((await (await fetch(direct)).json()) as { authorized: boolean }).authorized) {
      if (Date.now() > deadline) throw new Error("the service still says authorized after the expiry");
      await Bun.sleep(50);
    }
    clock.t = end - 1;
    for (const { server } of gated) {
      const r = await get(server, "/premium", PAID);
      expect(r.status).toBe(200);
      expect(r.body.source).toBe("cache");
    }
    clock.t = end;
    for (const { server } of gated) expect((await get(server, "/premium", PAID)).status).toBe(402);
  });
});
