/**
 * The gate's bounded answers against the real service (API, indexer and dispatcher over a real anvil), through a
 * proxy that records each check's URL and headers and can misbehave: positive answers kept at most `maxAgeMs` and
 * refreshed in the background, a store shared by replicas (answers and evictions), webhook floors (`min_block`,
 * monotonic, never an answer below them, stale included), `event.reverted` evicting its wallet only, deliveries
 * deduplicated by `webhook-id` and handed to `onEvent`, bodies that stall, break or are HTML as outages,
 * `ready()` failing fast on a wrong module, the 402's payment options, 64 KiB webhook bodies counted in bytes, and
 * the `apiKey` option.
 */
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { Webhook } from "standardwebhooks";
import {
  createGate,
  GateRequestError,
  GateUnavailableError,
  memoryStore,
  type GateEvent,
  type GateOptions,
} from "../../../packages/gate/src/index";
import { createApiKey } from "../../../src/auth/api-keys";
import { startSdkStack, type SdkStack } from "../../../testkit/sdk-stack";
import { startMerchantServer, type MerchantServer } from "../../../testkit/sdk-servers";
import { freePort } from "../../../testkit/cli";
import type { WalletName } from "../../../testkit/chain";

const PAID: WalletName = "alice";
const OTHER: WalletName = "bob";
const UNKNOWN: WalletName = "erin";

let stack: SdkStack;
let token: string;
const proxies: { stop: () => void }[] = [];
const servers: MerchantServer[] = [];

const addr = (w: WalletName) => stack.chain.address(w).toLowerCase();
const newSecret = () => "whsec_" + Buffer.from(crypto.getRandomValues(new Uint8Array(32))).toString("base64");

type Misbehaviour = "pass" | "html" | "stall" | "reset";

/** A proxy to the API recording each check's URL and headers; `mode` makes its check answers misbehave. */
function proxy() {
  const checks: { url: URL; headers: Headers }[] = [];
  const state = { mode: "pass" as Misbehaviour };
  const enc = new TextEncoder();
  const server = Bun.serve({
    port: 0,
    hostname: "127.0.0.1",
    idleTimeout: 0,
    fetch: async (req) => {
      const u = new URL(req.url);
      const isCheck = u.pathname === "/v0/auth/check";
      if (isCheck) checks.push({ url: u, headers: req.headers });
      if (isCheck && state.mode === "html") {
        return new Response("<html><body>502 Bad Gateway</body></html>", { headers: { "content-type": "text/html" } });
      }
      if (isCheck && state.mode === "stall") {
        const body = new ReadableStream({ start: (c) => c.enqueue(enc.encode('{"authorized":')) });
        return new Response(body, { headers: { "content-type": "application/json" } });
      }
      if (isCheck && state.mode === "reset") {
        const body = new ReadableStream({
          async start(c) {
            c.enqueue(enc.encode('{"authorized":true,"indexed":{'));
            await Bun.sleep(20);
            c.error(new Error("connection reset"));
          },
        });
        return new Response(body, { headers: { "content-type": "application/json" } });
      }
      return fetch(stack.url + u.pathname + u.search, { headers: req.headers });
    },
  });
  const p = {
    url: `http://127.0.0.1:${server.port}`,
    checks,
    state,
    minBlocks: () => checks.map((c) => c.url.searchParams.get("min_block")),
    stop: () => server.stop(true),
  };
  proxies.push(p);
  return p;
}

const gateOf = (baseUrl: string, extra: Partial<GateOptions> = {}) =>
  createGate({ baseUrl, module: stack.module, plans: [7, 8], ...extra });

/** A signed delivery of `event` as the service sends it. */
function delivery(secret: string, event: Record<string, unknown>, id = String(event.id)) {
  const body = JSON.stringify(event);
  const ts = new Date();
  return new Request("http://merchant.test/webhooks", {
    method: "POST",
    body,
    headers: {
      "content-type": "application/json",
      "webhook-id": id,
      "webhook-timestamp": String(Math.floor(ts.getTime() / 1000)),
      "webhook-signature": new Webhook(secret).sign(id, ts, body),
    },
  });
}

let seq = 0;
/** A `subscription.status_changed` of `wallet` caused by block `block`. */
const statusChanged = (wallet: string, block: bigint | string) => ({
  id: `evt_test${++seq}`,
  type: "subscription.status_changed",
  timestamp: new Date().toISOString(),
  chain_id: stack.chain.chainId,
  merchant: stack.merchant,
  block_number: String(block),
  data: { object: { user_address: wallet, status: "CANCELLED" }, previous_status: "ACTIVE" },
});

/** The service's newest indexed block (what its answers carry). */
const indexedBlock = async () => BigInt((await gateOf(stack.url).check(addr(UNKNOWN))).indexedBlock!);

beforeAll(async () => {
  stack = await startSdkStack([PAID, OTHER]);
  const plans = (await (
    await fetch(`${stack.url}/v0/auth/plans?module_address=${stack.module}&plan_ids=7`)
  ).json()) as { plans: { token: string }[] };
  token = plans.plans[0]!.token;
}, 60_000);

afterAll(async () => {
  for (const p of proxies) p.stop();
  for (const s of servers) await s.stop();
  await stack?.stop();
}, 30_000);

describe("a yes is bounded", () => {
  test("a positive answer is served at most maxAgeMs, refreshed in the background from half that age, one flight", async () => {
    const p = proxy();
    const clock = { t: 1_000_000 };
    const gate = gateOf(p.url, { now: () => clock.t, maxAgeMs: 60_000 });
    expect((await gate.check(addr(PAID))).source).toBe("api");
    clock.t += 29_999;
    expect((await gate.check(addr(PAID))).source).toBe("cache");
    expect(p.checks.length).toBe(1);
    // Past half its age: served from the cache while one background request refreshes it.
    clock.t += 1;
    const served = await Promise.all(Array.from({ length: 10 }, () => gate.check(addr(PAID))));
    expect(served.every((r) => r.source === "cache" && r.authorized)).toBe(true);
    const deadline = Date.now() + 5_000;
    while (p.checks.length < 2 && Date.now() < deadline) await Bun.sleep(10);
    await Bun.sleep(100);
    expect(p.checks.length).toBe(2);
    // The refreshed answer counts from its own fetch: 59 s after it the first one's 60 s are long gone.
    clock.t += 59_000;
    expect((await gate.check(addr(PAID))).source).toBe("cache");
    while (p.checks.length < 3 && Date.now() < deadline + 5_000) await Bun.sleep(10);
    await Bun.sleep(100);
    // With the service down, a yes ends at maxAgeMs after its fetch (not at validUntil, an hour away).
    p.stop();
    clock.t += 60_000;
    await expect(gate.check(addr(PAID))).rejects.toBeInstanceOf(GateUnavailableError);
  });

  test("replicas sharing a store share answers and evictions", async () => {
    const store = memoryStore();
    const [pa, pb] = [proxy(), proxy()];
    const secret = newSecret();
    const a = gateOf(pa.url, { store });
    const b = gateOf(pb.url, { store });
    expect((await a.check(addr(PAID))).source).toBe("api");
    expect((await b.check(addr(PAID))).source).toBe("cache");
    expect(pb.checks.length).toBe(0);
    // A webhook reaches replica a only; replica b asks the service again, from the event's block on.
    const block = await indexedBlock();
    const res = await a.webhooks({ secret }).fetch(delivery(secret, statusChanged(addr(PAID), block)));
    expect(res.status).toBe(200);
    expect((await b.check(addr(PAID))).source).toBe("api");
    expect(pb.minBlocks()).toEqual([String(block)]);
  });
});

describe("a shared store that fails", () => {
  test("a check is an outage (503), a delivery is a 503 the service retries, not a duplicate", async () => {
    const healthy = memoryStore();
    const state = { down: true };
    const guard = <T>(f: () => T) => {
      if (state.down) return Promise.reject(new Error("store connection refused"));
      return Promise.resolve(f());
    };
    const store = {
      get: (k: string) => guard(() => healthy.get(k)),
      set: (k: string, v: Parameters<typeof healthy.set>[1], ttl: number) => guard(() => healthy.set(k, v, ttl)),
      delete: (k: string) => guard(() => healthy.delete(k)),
    };
    const secret = newSecret();
    const gate = gateOf(stack.url, { store });
    await expect(gate.check(addr(PAID))).rejects.toBeInstanceOf(GateUnavailableError);
    const premium = gate.fetch({ wallet: (req) => req.headers.get("x-wallet") }, () => new Response("ok"));
    const res = await premium(new Request("http://app/premium", { headers: { "x-wallet": addr(PAID) } }));
    expect(res.status).toBe(503);
    const event = statusChanged(addr(PAID), await indexedBlock());
    const hook = gate.webhooks({ secret });
    expect((await hook.fetch(delivery(secret, event))).status).toBe(503);
    state.down = false;
    const retried = await hook.fetch(delivery(secret, event));
    expect(await retried.json()).toEqual({ received: true, evicted: [addr(PAID)] });
    expect((await gate.check(addr(PAID))).authorized).toBe(true);
  });
});

describe("invalidation is monotonic", () => {
  test("after a webhook of block B no answer below B is served: the gate asks with min_block, stale included", async () => {
    const p = proxy();
    const secret = newSecret();
    const closed = gateOf(p.url, { timeoutMs: 2_500 });
    const open = gateOf(p.url, { timeoutMs: 2_500, failOpen: true });
    for (const g of [closed, open]) expect((await g.check(addr(PAID))).authorized).toBe(true);
    const ahead = (await indexedBlock()) + 1_000n;
    for (const g of [closed, open]) {
      expect((await g.webhooks({ secret }).fetch(delivery(secret, statusChanged(addr(PAID), ahead)))).status).toBe(200);
    }
    // The index is behind B: the service waits, then says index_behind; neither gate serves its older yes.
    const [c, o] = await Promise.allSettled([closed.check(addr(PAID)), open.check(addr(PAID))]);
    expect(c.status === "rejected" && c.reason instanceof GateUnavailableError).toBe(true);
    expect(o.status === "rejected" && o.reason instanceof GateUnavailableError).toBe(true);
    expect(p.minBlocks().slice(-2)).toEqual([String(ahead), String(ahead)]);
    // An older delivery arriving late does not lower the floor.
    const now = await indexedBlock();
    await closed.webhooks({ secret }).fetch(delivery(secret, statusChanged(addr(PAID), now)));
    await expect(closed.check(addr(PAID))).rejects.toBeInstanceOf(GateUnavailableError);
    expect(p.minBlocks().at(-1)).toBe(String(ahead));
  }, 20_000);

  test("a webhook of a block the index has reached: the next answer is asked with min_block and served", async () => {
    const p = proxy();
    const secret = newSecret();
    const gate = gateOf(p.url);
    expect((await gate.check(addr(OTHER))).source).toBe("api");
    const block = await indexedBlock();
    await gate.webhooks({ secret }).fetch(delivery(secret, statusChanged(addr(OTHER), block)));
    const again = await gate.check(addr(OTHER));
    expect(again).toMatchObject({ source: "api", authorized: true });
    expect(BigInt(again.indexedBlock!)).toBeGreaterThanOrEqual(block);
    expect(p.minBlocks()).toEqual([null, String(block)]);
    expect((await gate.check(addr(OTHER))).source).toBe("cache");
  });

  test("event.reverted evicts the wallet it names and no other; a delivery seen before is ignored", async () => {
    const p = proxy();
    const secret = newSecret();
    const events: GateEvent[] = [];
    const gate = gateOf(p.url);
    const hook = gate.webhooks({ secret, onEvent: (e) => void events.push(e) });
    for (const w of [PAID, OTHER]) await gate.check(addr(w));
    const block = await indexedBlock();
    const reverted = {
      id: `evt_rev${++seq}`,
      type: "event.reverted",
      timestamp: new Date().toISOString(),
      chain_id: stack.chain.chainId,
      merchant: stack.merchant,
      block_number: String(block),
      data: {
        id: "evt_withdrawn",
        type: "charge.succeeded",
        block_number: String(block),
        chain_id: stack.chain.chainId,
        allocation_id: `${stack.chain.chainId}:${stack.module.toLowerCase()}:1`,
        user_address: stack.chain.address(PAID),
      },
    };
    const first = await hook.fetch(delivery(secret, reverted));
    expect(await first.json()).toEqual({ received: true, evicted: [addr(PAID)] });
    const again = await hook.fetch(delivery(secret, reverted));
    expect(await again.json()).toMatchObject({ received: true, duplicate: true });
    expect(events.map((e) => e.id)).toEqual([reverted.id]);
    expect(events[0]!.data).toEqual(reverted.data);
    expect((await gate.check(addr(OTHER))).source).toBe("cache");
    expect((await gate.check(addr(PAID))).source).toBe("api");
    expect(p.minBlocks().at(-1)).toBe(String(block));
  });

  test("onEvent throwing answers 500 and the retried delivery reaches it again", async () => {
    const secret = newSecret();
    let calls = 0;
    const hook = gateOf(stack.url).webhooks({
      secret,
      onEvent: () => {
        if (++calls === 1) throw new Error("fulfilment down");
      },
    });
    const event = statusChanged(addr(UNKNOWN), 1n);
    expect((await hook.fetch(delivery(secret, event))).status).toBe(500);
    expect((await hook.fetch(delivery(secret, event))).status).toBe(200);
    expect((await hook.fetch(delivery(secret, event))).status).toBe(200);
    expect(calls).toBe(2);
  });
});

describe("errors while reading an answer are outages", () => {
  for (const mode of ["html", "stall", "reset"] as const) {
    test(`${mode}: unavailable (503 from the adapter, the last answer with failOpen), never a 500`, async () => {
      const p = proxy();
      const clock = { t: 1_000_000 };
      const closed = gateOf(p.url, { timeoutMs: 300, now: () => clock.t });
      const open = gateOf(p.url, { timeoutMs: 300, now: () => clock.t, failOpen: true });
      for (const g of [closed, open]) expect((await g.check(addr(PAID))).source).toBe("api");
      clock.t += 120_000; // past maxAgeMs: the next check asks the service
      p.state.mode = mode;
      const t0 = Date.now();
      await expect(closed.check(addr(PAID))).rejects.toBeInstanceOf(GateUnavailableError);
      expect(Date.now() - t0).toBeLessThan(2_000);
      expect(await open.check(addr(PAID))).toMatchObject({ authorized: true, source: "stale" });
      const premium = closed.fetch({ wallet: (req) => req.headers.get("x-wallet") }, () => new Response("ok"));
      const res = await premium(new Request("http://app/premium", { headers: { "x-wallet": addr(PAID) } }));
      expect(res.status).toBe(503);
      expect(((await res.json()) as { error: string }).error).toBe("subscription_check_unavailable");
    });
  }
});

describe("createGate validates its options once", () => {
  test("an unknown module: ready() rejects, the error is logged once, every request is a 500, never a 402", async () => {
    const logged: Error[] = [];
    const gate = createGate({
      baseUrl: stack.url,
      module: "0x" + "ab".repeat(20),
      plans: [7],
      onError: (e) => void logged.push(e),
    });
    await expect(gate.ready()).rejects.toBeInstanceOf(GateRequestError);
    const premium = gate.fetch({ wallet: (req) => req.headers.get("x-wallet") }, () => new Response("ok"));
    for (const w of [PAID, UNKNOWN]) {
      const res = await premium(new Request("http://app/premium", { headers: { "x-wallet": addr(w) } }));
      expect(res.status).toBe(500);
      expect(((await res.json()) as { error: string }).error).toBe("gate_misconfigured");
    }
    expect(logged.length).toBe(1);
    expect(logged[0]!.message).toContain("not indexed");
  });

  test("the right options: ready() resolves with the plans, and a 402 says how to subscribe", async () => {
    const gate = gateOf(stack.url, { subscribeUrl: "https://merchant.test/subscribe" });
    const option = (plan: string, interval: number) => ({
      scheme: "subscription" as const,
      network: `eip155:${stack.chain.chainId}`,
      chain_id: stack.chain.chainId,
      module: stack.module.toLowerCase(),
      plan_id: plan,
      asset: token,
      symbol: expect.any(String),
      decimals: expect.any(Number),
      amount: "1000",
      interval_s: interval,
      subscribe_url: "https://merchant.test/subscribe",
    });
    expect(await gate.ready()).toEqual([option("7", 3_600), option("8", 7_200)]);
    const premium = gate.fetch({ wallet: (req) => req.headers.get("x-wallet") }, () => new Response("ok"));
    const res = await premium(new Request("http://app/premium", { headers: { "x-wallet": addr(UNKNOWN) } }));
    expect(res.status).toBe(402);
    expect(await res.json()).toEqual({
      error: "subscription_required",
      message: "an active subscription to one of these plans is required",
      wallet: addr(UNKNOWN),
      module: stack.module.toLowerCase(),
      plans: ["7", "8"],
      accepts: [option("7", 3_600), option("8", 7_200)],
      subscribe_url: "https://merchant.test/subscribe",
    });
  });
});

describe("webhook bodies", () => {
  test("at most 64 KiB, counted in bytes, chunked bodies included, on fetch and Express alike", async () => {
    const secret = newSecret();
    const gate = gateOf(stack.url);
    const port = await freePort();
    const express = await startMerchantServer("express", gate, { port, secret });
    servers.push(express);
    const small = statusChanged(addr(UNKNOWN), 1n);
    // Multi-byte characters: under 64 Ki UTF-16 units, over 64 KiB of UTF-8.
    const padded = { ...small, id: `evt_pad${++seq}`, pad: "é".repeat(40_000) };
    const chunked = (text: string) =>
      new ReadableStream({
        start(c) {
          const bytes = new TextEncoder().encode(text);
          for (let i = 0; i < bytes.length; i += 8_192) c.enqueue(bytes.slice(i, i + 8_192));
          c.close();
        },
      });
    const signed = delivery(secret, padded);
    const headers = Object.fromEntries(signed.headers);
    const body = await signed.text();
    expect(body.length).toBeLessThan(64 * 1024);
    expect(new TextEncoder().encode(body).length).toBeGreaterThan(64 * 1024);
    const hook = gate.webhooks({ secret });
    expect((await hook.fetch(new Request(signed.url, { method: "POST", headers, body }))).status).toBe(413);
    const streamed = new Request(signed.url, {
      method: "POST",
      headers,
      body: chunked(body),
      duplex: "half",
    } as RequestInit);
    expect(streamed.headers.get("content-length")).toBeNull();
    expect((await hook.fetch(streamed)).status).toBe(413);
    const viaExpress = await fetch(`${express.url}/webhooks`, { method: "POST", headers, body });
    expect(viaExpress.status).toBe(413);
    // A small one passes on both.
    expect((await hook.fetch(delivery(secret, small))).status).toBe(200);
    const ok = delivery(secret, { ...small, id: `evt_ok${++seq}` });
    const okRes = await fetch(`${express.url}/webhooks`, {
      method: "POST",
      headers: Object.fromEntries(ok.headers),
      body: await ok.text(),
    });
    expect(okRes.status).toBe(200);
  });
});

describe("apiKey", () => {
  test("checks carry the merchant's key and are answered; a revoked or wrong key is a misconfiguration", async () => {
    const { key } = await createApiKey(stack.service.db.sql, { merchant: stack.merchant });
    const p = proxy();
    const gate = gateOf(p.url, { apiKey: key });
    expect(await gate.check(addr(PAID))).toMatchObject({ authorized: true, source: "api" });
    expect(p.checks[0]!.headers.get("authorization")).toBe(`Bearer ${key}`);
    const wrong = gateOf(p.url, { apiKey: "sk_live_wrong", onError: () => {} });
    await expect(wrong.check(addr(PAID))).rejects.toBeInstanceOf(GateRequestError);
  });
});
