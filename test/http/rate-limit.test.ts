/**
 * The in-memory token-bucket limiter of src/http/rate-limit.ts, driven by an injected clock; the client key of an
 * address (IPv6 /64, IPv4-mapped IPv6); and, through the real app, the per-credential limit of every credentialed
 * route and the per-address limit of IPv6 clients.
 */
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { clientKey, createRateLimiter } from "../../src/http/rate-limit";
import { createApp } from "../../src/http/app";
import { createChainRegistry } from "../../src/chain/clients";
import { createApiKey } from "../../src/auth/api-keys";
import { ADMIN_KEY, startSeededApp, testConfig, type SeededApp } from "../../testkit/app";
import { accounts } from "../../testkit/accounts";
import { M1, M2, MOD, W } from "../../testkit/seed";
import { signIn } from "../../testkit/siwe";

function clock(start = 1_000_000) {
  let t = start;
  return { now: () => t, advance: (ms: number) => (t += ms) };
}

describe("createRateLimiter", () => {
  test("allows perMinute requests at once, then refuses with a positive Retry-After", () => {
    const c = clock();
    const limiter = createRateLimiter({ perMinute: 5, now: c.now });
    for (let i = 0; i < 5; i++) expect(limiter.check("a")).toEqual({ ok: true });
    const refused = limiter.check("a");
    expect(refused.ok).toBe(false);
    // 5 per minute = one token every 12 s.
    expect(refused).toEqual({ ok: false, retryAfterSeconds: 12 });
  });

  test("keys are independent", () => {
    const c = clock();
    const limiter = createRateLimiter({ perMinute: 2, now: c.now });
    expect(limiter.check("a").ok).toBe(true);
    expect(limiter.check("a").ok).toBe(true);
    expect(limiter.check("a").ok).toBe(false);
    expect(limiter.check("b").ok).toBe(true);
    expect(limiter.check("b").ok).toBe(true);
    expect(limiter.check("b").ok).toBe(false);
  });

  test("refills over time at perMinute, never above the burst", () => {
    const c = clock();
    const limiter = createRateLimiter({ perMinute: 60, burst: 3, now: c.now });
    for (let i = 0; i < 3; i++) expect(limiter.check("a").ok).toBe(true);
    expect(limiter.check("a")).toEqual({ ok: false, retryAfterSeconds: 1 });
    c.advance(500);
    expect(limiter.check("a").ok).toBe(false);
    c.advance(500);
    expect(limiter.check("a").ok).toBe(true);
    expect(limiter.check("a").ok).toBe(false);
    c.advance(3_600_000);
    for (let i = 0; i < 3; i++) expect(limiter.check("a").ok).toBe(true);
    expect(limiter.check("a").ok).toBe(false);
  });

  test("Retry-After shrinks as the bucket refills", () => {
    const c = clock();
    const limiter = createRateLimiter({ perMinute: 1, now: c.now });
    expect(limiter.check("a").ok).toBe(true);
    expect(limiter.check("a")).toEqual({ ok: false, retryAfterSeconds: 60 });
    c.advance(45_000);
    expect(limiter.check("a")).toEqual({ ok: false, retryAfterSeconds: 15 });
    c.advance(15_000);
    expect(limiter.check("a").ok).toBe(true);
  });

  test("idle keys are forgotten once their bucket would be full again", () => {
    const c = clock();
    const limiter = createRateLimiter({ perMinute: 60, now: c.now });
    for (let i = 0; i < 1000; i++) limiter.check(`ip-${i}`);
    expect(limiter.size()).toBe(1000);
    c.advance(30_000);
    limiter.check("fresh");
    expect(limiter.size()).toBe(1001);
    c.advance(31_000);
    limiter.check("fresh");
    // The 1000 old keys were idle for 61 s (a full refill takes 60 s); "fresh" was seen 31 s ago.
    expect(limiter.size()).toBe(1);
  });

  test("never tracks more than maxKeys; a forgotten key starts with a full bucket", () => {
    const c = clock();
    const limiter = createRateLimiter({ perMinute: 1, maxKeys: 100, now: c.now });
    for (let i = 0; i < 1000; i++) {
      expect(limiter.check(`k${i}`).ok).toBe(true);
      expect(limiter.size()).toBeLessThanOrEqual(100);
    }
    expect(limiter.check("k999").ok).toBe(false); // recent: still limited
    expect(limiter.check("k0").ok).toBe(true); // evicted long ago
  });

  test("rejects nonsense options", () => {
    expect(() => createRateLimiter({ perMinute: 0 })).toThrow(RangeError);
    expect(() => createRateLimiter({ perMinute: 10, burst: 0 })).toThrow(RangeError);
  });
});

describe("clientKey", () => {
  test("IPv4 as it is; IPv4-mapped IPv6 is that IPv4; IPv6 is its /64; anything else as it is", () => {
    expect(clientKey("203.0.113.7")).toBe("203.0.113.7");
    expect(clientKey("::ffff:203.0.113.7")).toBe("203.0.113.7");
    expect(clientKey("::FFFF:cb00:7107")).toBe("203.0.113.7");
    expect(clientKey("0:0:0:0:0:ffff:cb00:7107")).toBe("203.0.113.7");
    expect(clientKey("2001:db8:1:2:3:4:5:6")).toBe("2001:db8:1:2::/64");
    expect(clientKey("2001:DB8:1:2::ffff:1")).toBe("2001:db8:1:2::/64");
    expect(clientKey("[2001:db8:1:2::9]")).toBe("2001:db8:1:2::/64");
    expect(clientKey("2001:db8:1:2:3:4:1.2.3.4")).toBe("2001:db8:1:2::/64");
    expect(clientKey("fe80::1%eth0")).toBe("fe80:0:0:0::/64");
    expect(clientKey("2001:db8:1:3::1")).not.toBe(clientKey("2001:db8:1:2::1"));
    expect(clientKey("unknown")).toBe("unknown");
    expect(clientKey("not:an:address")).toBe("not:an:address");
    expect(clientKey("x".repeat(500))).toHaveLength(64);
  });
});

/** Through the real app over one seeded database: each app built here has its own rate-limit stores. */
describe("rate limits through the app", () => {
  let s: SeededApp;
  let chains: Awaited<ReturnType<typeof createChainRegistry>>;
  beforeAll(async () => {
    s = await startSeededApp();
    chains = await createChainRegistry(s.config);
  }, 60_000);
  afterAll(() => s?.close());

  const appWith = (env: Record<string, string>) =>
    createApp({ sql: s.db.sql, config: testConfig(env), chains, log: () => {} });
  type App = ReturnType<typeof appWith>;
  const call = async (app: App, method: string, path: string, headers: Record<string, string>, body?: unknown) => {
    const res = await app.handle(
      new Request(`http://localhost${path}`, {
        method,
        headers: body === undefined ? headers : { "content-type": "application/json", ...headers },
        body: body === undefined ? undefined : JSON.stringify(body),
      }),
    );
    const text = await res.text();
    return { status: res.status, headers: res.headers, body: text ? JSON.parse(text) : null };
  };
  const bearer = (token: string) => ({ authorization: `Bearer ${token}` });
  const expect429 = (res: { status: number; headers: Headers; body: any }) => {
    expect(res.status).toBe(429);
    expect(res.body.error).toMatchObject({ type: "rate_limit_error", code: "rate_limited" });
    expect(res.body.error.request_id).toMatch(/^req_/);
    expect(Number(res.headers.get("retry-after"))).toBeGreaterThanOrEqual(1);
  };

  test("every authenticated request spends its API key's tokens; another key of the merchant keeps its own", async () => {
    const app = appWith({ RATE_LIMIT_PER_KEY_PER_MINUTE: "3" });
    const key1 = (await createApiKey(s.db.sql, { merchant: M1 })).key;
    const key2 = (await createApiKey(s.db.sql, { merchant: M1 })).key;
    for (const path of [`/v0/activity/${M1}`, `/v0/subscriptions/${M1}`, `/v0/events/${M1}`]) {
      expect((await call(app, "GET", path, bearer(key1))).status).toBe(200);
    }
    expect429(await call(app, "GET", `/v0/stats/${M1}`, bearer(key1)));
    // A refused write changes nothing.
    const before = await s.db.sql`select count(*)::int as n from webhook_endpoints`;
    const create = { url: "https://hooks.example.com/x" };
    expect429(await call(app, "POST", `/v0/webhook_endpoints/${M1}`, bearer(key1), create));
    expect(await s.db.sql`select count(*)::int as n from webhook_endpoints`).toEqual(before);
    // The other key, the admin key and another app's store are untouched.
    expect((await call(app, "GET", `/v0/activity/${M1}`, bearer(key2))).status).toBe(200);
    expect((await call(app, "GET", `/v0/activity/${M1}`, bearer(ADMIN_KEY))).status).toBe(200);
    // A key over its limit asking for another merchant's data is still over its limit (429 before 403).
    expect429(await call(app, "GET", `/v0/activity/${M2}`, bearer(key1)));
  });

  test("the admin key and SIWE sessions have a bucket each, /v0/api_keys and /v0/siwe/me included", async () => {
    const app = appWith({ RATE_LIMIT_PER_KEY_PER_MINUTE: "2" });
    for (let i = 0; i < 2; i++)
      expect((await call(app, "GET", `/v0/activity/${M1}`, bearer(ADMIN_KEY))).status).toBe(200);
    expect429(await call(app, "GET", `/v0/activity/${M1}`, bearer(ADMIN_KEY)));

    const session = await signIn(app, accounts.merchant);
    const other = await signIn(app, accounts.merchant);
    expect((await call(app, "GET", `/v0/api_keys/${M1}`, bearer(session))).status).toBe(200);
    expect((await call(app, "GET", "/v0/siwe/me", bearer(session))).status).toBe(200);
    const keys = await s.db.sql`select count(*)::int as n from api_keys where merchant = ${M1}`;
    expect429(await call(app, "POST", `/v0/api_keys/${M1}`, bearer(session), { label: "over" }));
    expect429(await call(app, "GET", `/v0/api_keys/${M1}`, { cookie: `siwe_session=${session}` }));
    expect(await s.db.sql`select count(*)::int as n from api_keys where merchant = ${M1}`).toEqual(keys);
    // Another session of the same wallet is another credential.
    expect((await call(app, "POST", `/v0/api_keys/${M1}`, bearer(other), { label: "ok" })).status).toBe(201);
  });

  test("refused credentials on /v0/api_keys spend the client's tokens like every other credentialed route", async () => {
    const app = appWith({ RATE_LIMIT_PER_MINUTE: "3" });
    for (let i = 0; i < 3; i++) {
      expect((await call(app, "GET", `/v0/api_keys/${M1}`, bearer(`sess_guess${i}`))).status).toBe(401);
    }
    expect429(await call(app, "GET", `/v0/api_keys/${M1}`, bearer("sess_guess9")));
  });

  test("IPv6 clients: one /64 shares a bucket, another /64 has its own; IPv4-mapped IPv6 is the IPv4 client", async () => {
    const app = appWith({ RATE_LIMIT_PER_MINUTE: "2", CLIENT_IP_HEADER: "Fly-Client-IP" });
    const path = `/v0/auth/check?module_address=${MOD.a1}&wallet=${W.alice}&plan_ids=1`;
    const from = (ip: string) => call(app, "GET", path, { "fly-client-ip": ip });
    expect((await from("2001:db8:aa:1::1")).status).toBe(200);
    expect((await from("2001:db8:aa:1:ffff:ffff:ffff:fffe")).status).toBe(200);
    expect429(await from("2001:db8:aa:1:1234::9"));
    expect((await from("2001:db8:aa:2::1")).status).toBe(200);
    expect((await from("2001:db8:aa:2::2")).status).toBe(200);
    expect429(await from("2001:db8:aa:2::3"));
    expect((await from("198.51.100.4")).status).toBe(200);
    expect((await from("::ffff:198.51.100.4")).status).toBe(200);
    expect429(await from("198.51.100.4"));
    expect((await from("198.51.100.5")).status).toBe(200);
  });
});
