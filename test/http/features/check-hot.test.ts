/**
 * Cache hits of `GET /v0/auth/check` answered before routing (`hot` in src/http/features/check/index.ts) against the
 * route itself: the same requests, in the same order, go to an app with the fast path and to one without it
 * (`hotCheck: false`), each with its own caches and rate-limit stores over one seeded database, over HTTP (Bun's
 * routes, the socket address) and through `app.handle`. Every status, header (the request id's value aside) and body
 * byte must match, and so must the request metrics and the cache's hit and miss counts: valid queries (hits, misses,
 * other chains, a configured chain not indexed, any letter case, reordered, repeated and unknown parameters), bad
 * ones, other modes, other paths and methods, credentials of every kind (ignored by the check), attacker-written
 * X-Forwarded-For values under their rate limits, and the same after batches change the data.
 */
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { createApp } from "../../../src/http/app";
import { createApiCaches, type ApiCaches } from "../../../src/http/caches";
import { createApiKey } from "../../../src/auth/api-keys";
import { createChainRegistry, type ChainRegistry } from "../../../src/chain/clients";
import type { Db } from "../../../src/db/client";
import { createNotifier, type Notifier } from "../../../src/db/notify";
import { createTestDb } from "../../../testkit/db";
import { CHAIN_A, CHAIN_B, M1, MOD, W, seedFixture } from "../../../testkit/seed";
import { ADMIN_KEY, testConfig } from "../../../testkit/app";

/** A chain with an RPC endpoint (never called here) and no indexed data: servable, `chainIndexed` false. */
const CONFIGURED_CHAIN = 5;
const SEED = 194;

let db: Db;
let notifier: Notifier;
let chains: ChainRegistry;
let scopedKey: string;
let anyChainKey: string;
const opened: { caches: ApiCaches; stop: () => Promise<void> }[] = [];

beforeAll(async () => {
  db = await createTestDb();
  await seedFixture(db.sql);
  notifier = createNotifier(db);
  chains = await createChainRegistry(testConfig({ [`RPC_URL_${CONFIGURED_CHAIN}`]: "http://127.0.0.1:9" }));
  scopedKey = (await createApiKey(db.sql, { merchant: M1, chainId: CHAIN_A })).key;
  anyChainKey = (await createApiKey(db.sql, { merchant: M1 })).key;
}, 60_000);

afterAll(async () => {
  for (const o of opened) await o.stop();
  await db?.close();
});

/** A response as compared: status, body bytes, every header but the request id's value and the date. */
type Seen = { status: number; body: string; headers: Record<string, string>; requestId: string | null };

/** One side of the comparison: an app, its caches, what its metrics observed, and how requests reach it. */
type Side = {
  caches: ApiCaches;
  observed: string[];
  send: (method: string, path: string, headers: Record<string, string>) => Promise<Seen>;
};

async function seen(res: Response): Promise<Seen> {
  const headers: Record<string, string> = {};
  for (const [k, v] of res.headers) if (k !== "x-request-id" && k !== "date") headers[k] = v;
  const requestId = res.headers.get("x-request-id");
  // An error body repeats the request id: compared as a placeholder (the header's own value, checked below).
  const body = await res.text();
  return { status: res.status, body: requestId ? body.replaceAll(requestId, "req_…") : body, headers, requestId };
}

/** An app over the test database with caches of its own (an hour of max age: hits and misses do not race time). */
async function side(env: Record<string, string>, hotCheck: boolean, overHttp: boolean): Promise<Side> {
  const caches = createApiCaches({ notifier, maxAgeMs: 3_600_000 });
  await caches.generations.ready;
  const observed: string[] = [];
  const app = createApp({
    sql: db.sql,
    config: testConfig(env),
    chains,
    notifier,
    caches,
    log: () => {},
    hotCheck,
    observeRequest: (route, method, status) => observed.push(`${method} ${route} ${status}`),
  });
  if (!overHttp) {
    opened.push({ caches, stop: () => caches.stop() });
    return {
      caches,
      observed,
      send: async (method, path, headers) =>
        seen(await app.handle(new Request(`http://localhost${path}`, { method, headers }))),
    };
  }
  app.listen({ port: 0, hostname: "127.0.0.1" });
  const origin = `http://127.0.0.1:${app.server!.port}`;
  opened.push({
    caches,
    stop: async () => {
      await app.stop(true);
      await caches.stop();
    },
  });
  return {
    caches,
    observed,
    send: async (method, path, headers) => seen(await fetch(origin + path, { method, headers })),
  };
}

/** Deterministic pseudo-random numbers (mulberry32). */
function rng(seed: number) {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4_294_967_296;
  };
}

const check = "/v0/auth/check";
const q = (wallet: string, plans: string, extra = "", module = MOD.a1) =>
  `${check}?module_address=${module}&wallet=${wallet}&plan_ids=${plans}${extra}`;
const upper = (a: string) => `0x${a.slice(2).toUpperCase()}`;

/** The requests drawn from: [method, path]. Valid ones repeat across clients, so most of them are hits. */
const REQUESTS: [string, string][] = [
  ["GET", q(W.alice, "1,2,3")],
  ["GET", q(W.alice, "3,1")],
  ["GET", q(W.alice, "1")],
  ["GET", q(W.grace, "1")],
  ["GET", q(W.erin, "2,1")],
  ["GET", q(W.bob, "1")],
  ["GET", q(W.ivan, "2,1")],
  ["GET", q(W.mallory, "1")],
  ["GET", q(W.alice, "1", `&chain_id=${CHAIN_A}`)],
  ["GET", q(W.alice, "1", "&mode=indexed")],
  ["GET", q(W.alice, "1", `&chain_id=${CHAIN_B}`, MOD.b1)],
  ["GET", q(W.bob, "1", `&chain_id=${CHAIN_B}`, MOD.b1)],
  ["GET", q(W.alice, "1", `&chain_id=${CONFIGURED_CHAIN}`)],
  ["GET", q(upper(W.alice), "1", "", upper(MOD.a1))],
  ["GET", `${check}?plan_ids=1&wallet=${W.alice}&module_address=${MOD.a1}`],
  ["GET", q(W.alice, "9", "&plan_ids=1&unknown=x")],
  ["GET", q(W.alice, "01,1,2,1")],
  ["GET", q(W.alice, "1%2C2")],
  ["GET", `${check}/?module_address=${MOD.a1}&wallet=${W.alice}&plan_ids=1`],
  ["HEAD", q(W.alice, "1")],
  ["POST", q(W.alice, "1")],
  // 400s: the route's parsing and the served-chain rule.
  ["GET", q(W.alice, "1", "&chain_id=999")],
  ["GET", q(W.alice, "1", "&mode=onchain")],
  ["GET", q(W.alice, "1,2", "&mode=both")],
  ["GET", q(W.alice, "1", "&mode=sideways")],
  ["GET", q(W.alice, "x1")],
  ["GET", q("0x1234", "1")],
  ["GET", q(W.alice, "1", "&chain_id=0x10")],
  ["GET", `${check}?module_address=${MOD.a1}&plan_ids=1`],
  ["GET", q(W.alice, "1", "&note=%00")],
  ["GET", q(W.alice, "")],
  ["GET", check],
  ["GET", `${check}?`],
];

const CREDENTIALS = (): Record<string, string>[] => [
  {},
  {},
  { authorization: `Bearer ${scopedKey}` },
  { authorization: `Bearer ${anyChainKey}` },
  { authorization: `Bearer ${ADMIN_KEY}` },
  { authorization: "Bearer sk_live_nonsense" },
  { authorization: "garbage" },
];

/**
 * Sends `perClient` requests drawn from REQUESTS for each client header set, each to `fast` and then to `slow`, and
 * compares the two answers. A client's requests follow each other at once, so both sides see its bucket alike.
 */
async function compare(fast: Side, slow: Side, clients: Record<string, string>[], perClient: number, seed: number) {
  const random = rng(seed);
  const creds = CREDENTIALS();
  let sent = 0;
  for (const client of clients) {
    for (let i = 0; i < perClient; i++) {
      const [method, path] = REQUESTS[Math.floor(random() * REQUESTS.length)]!;
      const headers = { ...client, ...creds[Math.floor(random() * creds.length)]! };
      const a = await fast.send(method, path, headers);
      const b = await slow.send(method, path, headers);
      const what = `${method} ${path} ${JSON.stringify(headers)} (seed ${seed})`;
      expect({ what, status: a.status, headers: a.headers, body: a.body }).toEqual({
        what,
        status: b.status,
        headers: b.headers,
        body: b.body,
      });
      // Bun's own 404 for a method no route takes carries no request id, on either side.
      expect(a.requestId === null).toBe(b.requestId === null);
      if (a.requestId !== null) expect(a.requestId).toMatch(/^req_[0-9a-f]{32}$/);
      sent++;
    }
  }
  return sent;
}

/** Waits until both sides' metrics saw `n` requests (they are observed after the response), then compares them. */
async function sameMetrics(fast: Side, slow: Side, n: number) {
  const deadline = Date.now() + 10_000;
  while (fast.observed.length < n || slow.observed.length < n) {
    if (Date.now() > deadline) throw new Error(`metrics saw ${fast.observed.length} / ${slow.observed.length} of ${n}`);
    await Bun.sleep(2);
  }
  expect([...fast.observed].sort()).toEqual([...slow.observed].sort());
}

/** Publishes a batch of `chainId` and waits until every open cache has seen it. */
async function publishBatch(chainId: number) {
  const live = opened.map((o) => o.caches.generations);
  const before = live.map((g) => g.of(chainId));
  await notifier.publish({ chainId, fromBlock: "1", toBlock: "1", reorg: false });
  const deadline = Date.now() + 10_000;
  while (live.some((g, i) => g.of(chainId) === before[i])) {
    if (Date.now() > deadline) throw new Error("the batch notification never arrived");
    await Bun.sleep(2);
  }
}

/** Attacker-written X-Forwarded-For values: with TRUSTED_PROXY_HOPS=1 the last entry is the client. */
const forwarded = (round: number): Record<string, string>[] => [
  { "x-forwarded-for": `203.0.113.${round}` },
  { "x-forwarded-for": `198.51.100.7, 203.0.113.${round}` },
  { "x-forwarded-for": `::ffff:203.0.113.${round}` },
  { "x-forwarded-for": `2001:db8:${round}:1::1` },
  { "x-forwarded-for": `2001:db8:${round}:1::ffff` },
  { "x-forwarded-for": ` , 192.0.2.${round} ,, ` },
  { "x-forwarded-for": `[2001:db8:${round}:2::1]` },
  { "x-forwarded-for": `fe80::${round}%eth0` },
  { "x-forwarded-for": "unknown" },
  { "x-forwarded-for": "x".repeat(300) },
  { "x-forwarded-for": "" },
  {},
];

for (const overHttp of [true, false]) {
  describe(`check answered before routing = the route (${overHttp ? "over HTTP" : "app.handle"})`, () => {
    test("every answer, header and metric is the route's, through batches that change the data", async () => {
      // Ten requests a minute per client: each client's later requests are refused, on both sides alike (and
      // several of these addresses are one client: an IPv4 and its mapped IPv6 form, one /64, every unusable value).
      // A token every 6 s: Retry-After moves only at whole seconds after a bucket ran dry, far beyond a client's burst.
      const env = { RATE_LIMIT_PER_MINUTE: "10", TRUSTED_PROXY_HOPS: "1" };
      const fast = await side(env, true, overHttp);
      const slow = await side(env, false, overHttp);
      let n = await compare(fast, slow, forwarded(1), 12, SEED);

      // A batch pauses alice's plan-1 subscription: both sides drop their entries and read it again.
      await db.sql`update subscriptions set paused = true where chain_id = ${CHAIN_A} and subscription_id = '1'`;
      try {
        await publishBatch(CHAIN_A);
        n += await compare(fast, slow, forwarded(2), 12, SEED + 1);
        await publishBatch(CHAIN_B);
        n += await compare(fast, slow, forwarded(3), 12, SEED + 2);
      } finally {
        await db.sql`update subscriptions set paused = false where chain_id = ${CHAIN_A} and subscription_id = '1'`;
        await publishBatch(CHAIN_A);
      }
      await sameMetrics(fast, slow, n);

      const f = fast.caches.check.stats();
      const s = slow.caches.check.stats();
      // Every admitted valid request read the cache once on both sides. (Which were hits is not compared: grace's
      // answer is true for one more second of the chain's frozen clock, so its entry ends after 1 s of real time,
      // which a slow machine may reach on one side first; nor are stores, which background refreshes race.)
      expect(f.hits + f.misses).toBe(s.hits + s.misses);
      // The fast path did answer (most hits without a credential: a credential's check is counted by the route),
      // the reference side never did.
      expect(f.admitted).toBeGreaterThan(10);
      expect(s.admitted).toBe(0);
    }, 60_000);

    test("one client address (no proxy configured): the same requests are admitted and refused", async () => {
      const env = { RATE_LIMIT_PER_MINUTE: "6" };
      const fast = await side(env, true, overHttp);
      const slow = await side(env, false, overHttp);
      // X-Forwarded-For is the client's word here: ignored by both.
      const n = await compare(fast, slow, [{ "x-forwarded-for": "203.0.113.50" }, {}], 8, SEED + 3);
      await sameMetrics(fast, slow, n);
      const [f, s] = [fast.caches.check.stats(), slow.caches.check.stats()];
      expect(f.hits + f.misses).toBe(s.hits + s.misses);
    }, 60_000);
  });
}
