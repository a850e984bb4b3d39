/**
 * The response caches of the authorization check and the activity routes (src/http/cache.ts, src/http/caches.ts): identical bytes,
 * invalidation by the indexer's batch notification (through the real notifier: LISTEN/NOTIFY on Postgres,
 * in-process on PGlite), the generation rule, time-based expiry at the grace boundary, max age and bounds.
 */
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { createApp } from "../../src/http/app";
import { createChainGenerations, createResponseCache } from "../../src/http/cache";
import { createApiCaches, type ApiCacheOptions, type ApiCaches } from "../../src/http/caches";
import { indexedCheck } from "../../src/http/features/check/service";
import { createApiKey, revokeApiKey } from "../../src/auth/api-keys";
import { createChainRegistry, type ChainRegistry } from "../../src/chain/clients";
import type { Config } from "../../src/common/config";
import type { Db, Sql } from "../../src/db/client";
import { createNotifier, type Notifier } from "../../src/db/notify";
import { createTestDb } from "../../testkit/db";
import { until } from "../../testkit/cli";
import {
  CHAIN_A,
  CHAIN_B,
  INDEXED_BLOCK_A,
  M1,
  M2,
  MOD,
  NOW_A,
  W,
  insertChain,
  insertModule,
  insertPlan,
  insertSubscription,
  seedFixture,
  txHash,
  type Fixture,
} from "../../testkit/seed";
import { admin, testConfig } from "../../testkit/app";

/** A chain whose indexed block time lies in the past, so the wall clock is "now" there. */
const CHAIN_C = 77;
const MOD_C = "0xc1c1c1c1c1c1c1c1c1c1c1c1c1c1c1c1c1c1c1c1";

let db: Db;
let fixture: Fixture;
let notifier: Notifier;
let config: Config;
let chains: ChainRegistry;
const opened: ApiCaches[] = [];

beforeAll(async () => {
  db = await createTestDb();
  fixture = await seedFixture(db.sql);
  await insertChain(db.sql, {
    chain_id: CHAIN_C,
    indexed_block: 10,
    indexed_time: new Date(Date.UTC(2020, 0, 1)),
    head_block: 10,
    head_seen_at: new Date(),
  });
  await insertModule(db.sql, { chain_id: CHAIN_C, address: MOD_C, merchant: M1, block_number: 1, log_index: 0 });
  notifier = createNotifier(db);
  config = testConfig();
  chains = await createChainRegistry(config);
});

afterAll(async () => {
  for (const c of opened) await c.stop();
  await db?.close();
});

type Raw = { status: number; text: string; headers: Headers; json: any };

/** The headers a cached response must reproduce (everything but the per-request id). */
const SERVED_HEADERS = ["content-type", "x-indexed-block", "x-indexed-at", "link"];

/**
 * An app over the test database with its own caches (live on the real notifier unless `notifier: undefined`). The
 * max age is an hour unless given, so a slow machine cannot turn an expected hit into a miss.
 */
async function mkApp(opts: ApiCacheOptions = {}, sql: Sql = db.sql) {
  const caches = createApiCaches({ notifier, maxAgeMs: 3_600_000, ...opts });
  opened.push(caches);
  await caches.generations.ready;
  const app = createApp({ sql, config, chains, notifier, caches });
  const get = async (path: string, headers: Record<string, string> = admin): Promise<Raw> => {
    const res = await app.handle(new Request(`http://localhost${path}`, { headers }));
    const text = await res.text();
    let json: unknown;
    try {
      json = JSON.parse(text);
    } catch {
      json = undefined;
    }
    return { status: res.status, text, headers: res.headers, json };
  };
  return { app, caches, get };
}

/** An app whose caches never store (no notifier): the uncached answer. */
const plainApp = () => mkApp({ notifier: undefined });

const served = (r: Raw) => Object.fromEntries(SERVED_HEADERS.map((h) => [h, r.headers.get(h)]));

/** Publishes a batch of `chainId` as the indexer does, and waits until every open cache has seen it. */
async function publishBatch(chainId: number): Promise<void> {
  const live = opened.filter((c) => c.generations.live());
  const before = live.map((c) => c.generations.of(chainId));
  await notifier.publish({ chainId, fromBlock: "1", toBlock: "1", reorg: false });
  const deadline = Date.now() + 10_000;
  while (live.some((c, i) => c.generations.of(chainId) === before[i])) {
    if (Date.now() > deadline) throw new Error("the batch notification never arrived");
    await Bun.sleep(2);
  }
}

/** A clock the test moves by hand. */
function fakeClock() {
  let t = 1_000_000;
  return { now: () => t, advance: (ms: number) => void (t += ms) };
}

const checkPath = (wallet: string, plans: string, module = MOD.a1, chainId = CHAIN_A) =>
  `/v0/auth/check?module_address=${module}&wallet=${wallet}&plan_ids=${plans}&chain_id=${chainId}`;

const setPaused = async (subscriptionId: string, paused: boolean) => {
  await db.sql`update subscriptions set paused = ${paused} where chain_id = ${CHAIN_A} and subscription_id = ${subscriptionId}`;
};

describe("authorization check cache", () => {
  test("a hit is byte-identical to the uncached answer, headers included", async () => {
    const cached = await mkApp();
    const plain = await plainApp();
    const paths = [
      checkPath(W.alice, "1,2,3"),
      checkPath(W.alice, "3,1"),
      checkPath(W.grace, "1"),
      checkPath(W.erin, "2,1"),
      checkPath(W.alice, "1", `0x${"0".repeat(40)}`),
      checkPath(W.alice, "1", MOD.b1, CHAIN_B),
      `/v0/auth/check?module_address=${MOD.a1.toUpperCase().replace("0X", "0x")}&wallet=${W.alice}&plan_ids=1&mode=indexed`,
    ];
    for (const path of paths) {
      const miss = await cached.get(path, {});
      const hit = await cached.get(path, {});
      const uncached = await plain.get(path, {});
      expect(miss.status).toBe(200);
      expect(miss.text).toBe(JSON.stringify(miss.json)); // what Elysia would send for the object
      expect(hit.text).toBe(miss.text);
      expect(uncached.text).toBe(miss.text);
      expect(served(hit)).toEqual(served(miss));
      expect(served(uncached)).toEqual(served(miss));
      expect(hit.headers.get("x-request-id")).not.toBe(miss.headers.get("x-request-id"));
    }
    const stats = cached.caches.check.stats();
    expect(stats.misses).toBe(paths.length);
    expect(stats.hits).toBe(paths.length);
    expect(plain.caches.check.stats().stores).toBe(0);
  });

  test("an entry keeps its rendered response: a hit sends the entry's bytes and headers as they are", async () => {
    const { get, caches } = await mkApp();
    const path = checkPath(W.alice, "2,1");
    const miss = await get(path, {});
    const noReload = async (): Promise<never> => {
      throw new Error("a fresh entry is not reloaded");
    };
    const entry = caches.check.hit(`${CHAIN_A}:${MOD.a1}:${W.alice}:2,1`, CHAIN_A, noReload);
    expect(entry?.body).toBe(miss.text);
    expect(entry?.headers).toEqual({
      "x-indexed-block": miss.headers.get("x-indexed-block")!,
      "x-indexed-at": miss.headers.get("x-indexed-at")!,
      "content-type": miss.headers.get("content-type")!,
    });
    // What a hit sends is the entry's body, not a new rendering of its answer.
    entry!.body = entry!.body.replace('"authorized":true', '"authorized":"kept"');
    const hit = await get(path, {});
    expect(hit.text).toBe(entry!.body);
    expect(served(hit)).toEqual(served(miss));
    expect(caches.check.stats()).toMatchObject({ hits: 2, misses: 1 });
  });

  test("the key holds chain, module, wallet and the plan ids in request order", async () => {
    const { get, caches } = await mkApp();
    await get(checkPath(W.alice, "1,2"), {});
    await get(checkPath(W.alice, "2,1"), {});
    await get(checkPath(W.alice, "1,2", MOD.a2), {});
    await get(checkPath(W.ivan, "1,2"), {});
    expect(caches.check.stats()).toMatchObject({ hits: 0, misses: 4 });
    const reordered = await get(checkPath(W.alice, "2,1"), {});
    expect(reordered.json.plan_ids).toEqual(["2", "1"]);
    // "01,2,1" is parsed to the plan ids 1,2: the same question.
    await get(checkPath(W.alice, "01,2,1"), {});
    expect(caches.check.stats()).toMatchObject({ hits: 2, misses: 4 });
  });

  test("a committed batch invalidates the chain's entries, and only that chain's", async () => {
    const { get, caches } = await mkApp();
    const a = checkPath(W.alice, "1");
    const b = checkPath(W.alice, "1", MOD.b1, CHAIN_B);
    expect((await get(a, {})).json.authorized).toBe(true);
    const bFirst = await get(b, {});
    try {
      // The indexer's transaction: alice pauses, the cursor moves; the notification follows the commit.
      await setPaused("1", true);
      await db.sql`update chains set indexed_block = ${INDEXED_BLOCK_A + 1} where chain_id = ${CHAIN_A}`;
      const beforeNotice = await get(a, {});
      expect(beforeNotice.json.authorized).toBe(true); // served from the cache until the notification
      expect(beforeNotice.headers.get("x-indexed-block")).toBe(String(INDEXED_BLOCK_A));

      await publishBatch(CHAIN_B);
      expect((await get(a, {})).json.authorized).toBe(true); // another chain's batch changes nothing here
      expect((await get(b, {})).text).toBe(bFirst.text); // re-read
      expect(caches.check.stats()).toMatchObject({ hits: 2, misses: 3 });

      await publishBatch(CHAIN_A);
      const after = await get(a, {});
      expect(after.json.authorized).toBe(false);
      expect(after.json.indexed.details[0].status).toBe("PAUSED");
      expect(after.json.indexed.indexed_block).toBe(String(INDEXED_BLOCK_A + 1));
      expect(after.headers.get("x-indexed-block")).toBe(String(INDEXED_BLOCK_A + 1));
    } finally {
      await setPaused("1", false);
      await db.sql`update chains set indexed_block = ${INDEXED_BLOCK_A} where chain_id = ${CHAIN_A}`;
      await publishBatch(CHAIN_A);
    }
  });

  test("generation rule: a load that started before a batch's notification is not stored", async () => {
    const generations = createChainGenerations(notifier);
    await generations.ready;
    const cache = createResponseCache<string>({ generations });
    opened.push({ generations, stop: () => generations.stop() } as ApiCaches);
    let release!: (v: { value: string }) => void;
    const slow = cache.get("k", CHAIN_A, () => new Promise((resolve) => (release = resolve)));
    await publishBatch(CHAIN_A);
    release({ value: "read before the commit" });
    expect(await slow).toBe("read before the commit");
    expect(await cache.get("k", CHAIN_A, async () => ({ value: "read after the commit" }))).toBe(
      "read after the commit",
    );
    expect(await cache.get("k", CHAIN_A, async () => ({ value: "not called" }))).toBe("read after the commit");
    expect(cache.stats()).toMatchObject({ races: 1, stores: 1, hits: 1 });
    await generations.stop();
  });

  test("refresh ahead: a hit in the last quarter of an entry's life reloads it in the background", async () => {
    const clock = fakeClock();
    const generations = createChainGenerations(notifier);
    await generations.ready;
    opened.push({ generations, stop: () => generations.stop() } as ApiCaches);
    const cache = createResponseCache<number>({ generations, maxAgeMs: 2_000, now: clock.now });
    let loads = 0;
    const load = async () => ({ value: ++loads });
    expect(await cache.get("k", CHAIN_A, load)).toBe(1);
    clock.advance(1_400);
    expect(await cache.get("k", CHAIN_A, load)).toBe(1); // 600 ms left: nothing else happens
    expect(loads).toBe(1);
    clock.advance(200);
    expect(await cache.get("k", CHAIN_A, load)).toBe(1); // 400 ms left: served, and reloaded behind
    await until("the reload to be stored", async () => cache.stats().stores === 2);
    expect(loads).toBe(2);
    clock.advance(1_000); // past the first load's max age, within the reload's
    expect(await cache.get("k", CHAIN_A, load)).toBe(2);
    expect(cache.stats()).toMatchObject({ hits: 3, misses: 1, refreshes: 1, stores: 2 });

    // The reload obeys the generation rule: a batch announced while it runs keeps it from being stored.
    let release!: (v: { value: number }) => void;
    clock.advance(600); // the reload (made at 1,600) is in its last quarter too
    expect(await cache.get("k", CHAIN_A, () => new Promise((resolve) => (release = resolve)))).toBe(2);
    await publishBatch(CHAIN_A);
    release({ value: 99 });
    await until("the reload to be dropped", async () => cache.stats().races === 1);
    expect(await cache.get("k", CHAIN_A, load)).toBe(3); // the entry was of the old generation: read again
    expect(cache.stats()).toMatchObject({ refreshes: 2, races: 1, misses: 2 });
    await generations.stop();
  });

  test("generation rule over HTTP: the check query read the old row, the batch committed, nothing stale is kept", async () => {
    // The app's check statement runs for real but its rows are held back until `gate` opens.
    let gate: Promise<void> = Promise.resolve();
    let open = () => {};
    let held = () => {};
    const heldNow = new Promise<void>((r) => (held = r));
    const gated = new Proxy(db.sql, {
      apply(target, self, args) {
        const query = Reflect.apply(target, self, args) as PromiseLike<unknown> & { cancel?: () => unknown };
        const strings = args[0] as TemplateStringsArray | undefined;
        if (!Array.isArray(strings) || !strings[0]?.includes("select n.known_chain_id")) return query;
        const wait = gate;
        return {
          then: (ok: (v: unknown) => unknown, fail: (e: unknown) => unknown) =>
            query
              .then(async (rows) => {
                held();
                await wait;
                return rows;
              })
              .then(ok, fail),
          cancel: () => query.cancel?.(),
        };
      },
    }) as Sql;
    const { get, caches } = await mkApp({}, gated);
    const path = checkPath(W.alice, "1");
    gate = new Promise((r) => (open = r));
    const racing = get(path, {});
    await heldNow; // the statement has answered: alice ACTIVE
    try {
      await setPaused("1", true);
      await publishBatch(CHAIN_A);
      gate = Promise.resolve();
      open();
      expect((await racing).json.authorized).toBe(true); // what it read, before the commit
      const next = await get(path, {});
      expect(next.json.authorized).toBe(false); // not the stale answer
      expect(next.json.indexed.details[0].status).toBe("PAUSED");
      expect(caches.check.stats()).toMatchObject({ races: 1, hits: 0, misses: 2, stores: 1 });
    } finally {
      open();
      await setPaused("1", false);
      await publishBatch(CHAIN_A);
    }
  });

  test("validity ends exactly where the status SQL turns ACTIVE into EXPIRED (indexed time as 'now')", async () => {
    const q = { chainId: CHAIN_A, module: MOD.a1, wallet: W.grace, planIds: ["1"] };
    // grace: last_paid_at + interval + grace = NOW_A, the chain's "now": ACTIVE for one more second.
    const atBoundary = await indexedCheck(db.sql, q);
    expect(atBoundary.result.details[0].status).toBe("ACTIVE");
    expect(atBoundary.validForMs).toBe(1000);
    // alice: paid 10 days ago on a 30 d + 3 d plan; plans 2 and 3 are PENDING and EXPIRED and do not move.
    const alice = await indexedCheck(db.sql, { ...q, wallet: W.alice, planIds: ["1", "2", "3"] });
    expect(alice.validForMs).toBe((23 * 86_400 + 1) * 1000);
    // Nothing ACTIVE: nothing changes with time.
    expect((await indexedCheck(db.sql, { ...q, wallet: W.bob })).validForMs).toBe(Infinity);
    expect((await indexedCheck(db.sql, { ...q, wallet: W.frank })).validForMs).toBe(Infinity);
    try {
      await db.sql`update chains set indexed_time = ${new Date(NOW_A * 1000 + 999)} where chain_id = ${CHAIN_A}`;
      const lastMs = await indexedCheck(db.sql, q);
      expect(lastMs.result.details[0].status).toBe("ACTIVE");
      expect(lastMs.validForMs).toBe(1);
      await db.sql`update chains set indexed_time = ${new Date(NOW_A * 1000 + 1000)} where chain_id = ${CHAIN_A}`;
      const expired = await indexedCheck(db.sql, q);
      expect(expired.result.details[0].status).toBe("EXPIRED");
      expect(expired.validForMs).toBe(Infinity);
    } finally {
      await db.sql`update chains set indexed_time = ${new Date(NOW_A * 1000)} where chain_id = ${CHAIN_A}`;
    }
  });

  test("the cached entry ends at that boundary, not at the max age", async () => {
    const path = checkPath(W.grace, "1");
    // One millisecond before the boundary: served from the cache.
    const before = fakeClock();
    const a = await mkApp({ now: before.now, maxAgeMs: 3_600_000 });
    await a.get(path, {});
    before.advance(999);
    await a.get(path, {});
    expect(a.caches.check.stats()).toMatchObject({ hits: 1, misses: 1 });
    // At the boundary: read again.
    const at = fakeClock();
    const b = await mkApp({ now: at.now, maxAgeMs: 3_600_000 });
    await b.get(path, {});
    at.advance(1000);
    await b.get(path, {});
    expect(b.caches.check.stats()).toMatchObject({ hits: 0, misses: 2 });
  });

  test("an ACTIVE row becomes EXPIRED at boundary + 1 s on the wall clock, with no batch", async () => {
    const [{ now_s }] = await db.sql<{ now_s: string }[]>`select floor(extract(epoch from now()))::bigint as now_s`;
    // paid_until = last_paid_at + 100 + 10 = now + 2: ACTIVE until the database clock reaches now + 3.
    const paidUntil = Number(now_s) + 2;
    await insertPlan(db.sql, {
      chain_id: CHAIN_C,
      module: MOD_C,
      plan_id: 1,
      token: "0x" + "0".repeat(40),
      amount: "1",
      interval_s: 100,
      grace_s: 10,
    });
    await insertSubscription(db.sql, {
      chain_id: CHAIN_C,
      subscription_id: "1",
      module: MOD_C,
      merchant: M1,
      subscriber: W.alice,
      plan_id: 1,
      times_executed: 1,
      created_at: paidUntil - 110,
      last_paid_at: paidUntil - 110,
      next_charge_at: paidUntil - 10,
      block_number: 5,
      log_index: 0,
      expect: "ACTIVE",
    });
    const { get, caches } = await mkApp({ maxAgeMs: 3_600_000 });
    const path = checkPath(W.alice, "1", MOD_C, CHAIN_C);
    const first = await get(path, {});
    expect(first.json.indexed.details[0].status).toBe("ACTIVE");
    expect((await get(path, {})).text).toBe(first.text);
    expect(caches.check.stats()).toMatchObject({ hits: 1, misses: 1 });
    const gen = caches.generations.of(CHAIN_C);

    await Bun.sleep(Math.max(0, (paidUntil + 1) * 1000 + 50 - Date.now()));
    const later = await get(path, {});
    expect(later.json.authorized).toBe(false);
    expect(later.json.indexed.details[0].status).toBe("EXPIRED");
    expect(caches.check.stats()).toMatchObject({ hits: 1, misses: 2 });
    expect(caches.generations.of(CHAIN_C)).toBe(gen); // no batch was announced
  });

  test("max age: a lost notification keeps data stale for at most maxAgeMs", async () => {
    const clock = fakeClock();
    const { get } = await mkApp({ now: clock.now, maxAgeMs: 2_000 });
    const path = checkPath(W.alice, "1");
    expect((await get(path, {})).json.authorized).toBe(true);
    try {
      await setPaused("1", true); // committed, but no notification arrives
      clock.advance(1_999);
      expect((await get(path, {})).json.authorized).toBe(true);
      clock.advance(1);
      expect((await get(path, {})).json.authorized).toBe(false);
    } finally {
      await setPaused("1", false);
      await publishBatch(CHAIN_A);
    }
  });

  test("bounded: beyond checkEntries the least recently used entry goes first", async () => {
    const { get, caches } = await mkApp({ checkEntries: 3 });
    const ask = (w: string) => get(checkPath(w, "1"), {});
    for (const w of [W.alice, W.bob, W.carol]) await ask(w);
    await ask(W.alice); // hit: alice is now the most recent
    await ask(W.dave); // evicts bob
    expect(caches.check.stats()).toMatchObject({ entries: 3, hits: 1, misses: 4 });
    await ask(W.carol); // hit
    await ask(W.alice); // hit
    await ask(W.bob); // miss: it was evicted (evicts dave)
    expect(caches.check.stats()).toMatchObject({ entries: 3, hits: 3, misses: 5 });
  });

  test("without a notifier nothing is cached: every request reads the database", async () => {
    const { get, caches } = await plainApp();
    const path = checkPath(W.alice, "1");
    expect((await get(path, {})).json.authorized).toBe(true);
    try {
      await setPaused("1", true);
      expect((await get(path, {})).json.authorized).toBe(false);
      expect(caches.generations.live()).toBe(false);
      expect(caches.check.stats()).toMatchObject({ hits: 0, misses: 0, entries: 0 });
    } finally {
      await setPaused("1", false);
      await publishBatch(CHAIN_A);
    }
  });
});

describe("activity page cache", () => {
  const firstId = () => {
    const r = fixture.activity.find((a) => a.chain_id === CHAIN_A && a.merchant === M1)!;
    return `${CHAIN_A}:${r.tx_hash}:${r.log_index}`;
  };

  test("a hit is byte-identical to the uncached page; Link is built from each request's own URL", async () => {
    const cached = await mkApp();
    const plain = await plainApp();
    const paths = [
      `/v0/activity/${M1}?limit=3`,
      `/v0/activity/${M1}?limit=3&order=desc&type=FAIL`,
      `/v0/activity/${M1}?limit=2&starting_after=${firstId()}`,
      `/v0/activity/${M1}?token=usdc&since=2026-01-01T00:10:00Z`,
      `/v0/activity/${M1}?chain_id=${CHAIN_B}`,
      `/v0/payments/${M1}?limit=5`,
      `/v0/failures/${M1}`,
      `/v0/activity/${M2}`,
    ];
    for (const path of paths) {
      const miss = await cached.get(path);
      const hit = await cached.get(path);
      const uncached = await plain.get(path);
      expect(miss.status).toBe(200);
      expect(Array.isArray(miss.json)).toBe(true);
      expect(miss.text).toBe(JSON.stringify(miss.json));
      expect(hit.text).toBe(miss.text);
      expect(uncached.text).toBe(miss.text);
      expect(served(hit)).toEqual(served(miss));
      expect(served(uncached)).toEqual(served(miss));
    }
    expect(cached.caches.activity.stats()).toMatchObject({ misses: paths.length, hits: paths.length });

    // Same query, other spelling: a hit whose Link keeps this request's parameters.
    const spelled = await cached.get(`/v0/activity/${M1.toUpperCase().replace("0X", "0x")}?extra=1&limit=3`);
    expect(spelled.text).toBe((await plain.get(`/v0/activity/${M1}?limit=3`)).text);
    expect(spelled.headers.get("link")).toContain("extra=1&limit=3&starting_after=");
    expect(cached.caches.activity.stats().hits).toBe(paths.length + 1);
    // payments = activity with type=CHARGE: the same data, one entry.
    const payments = await cached.get(`/v0/activity/${M1}?type=CHARGE&limit=5`);
    expect(payments.text).toBe((await plain.get(`/v0/payments/${M1}?limit=5`)).text);
    expect(cached.caches.activity.stats().hits).toBe(paths.length + 2);
  });

  test("credentials are checked on every request before the cache is read", async () => {
    const { get, caches } = await mkApp();
    const key = await createApiKey(db.sql, { merchant: M1 });
    const m1 = { authorization: `Bearer ${key.key}` };
    const path = `/v0/activity/${M1}?limit=2`;
    expect((await get(path, m1)).status).toBe(200);
    expect((await get(path, m1)).status).toBe(200);
    expect(caches.activity.stats()).toMatchObject({ hits: 1, misses: 1 });
    expect((await get(path, {})).status).toBe(401);
    expect((await get(path, { authorization: "Bearer sk_live_unknown" })).status).toBe(401);
    const other = await createApiKey(db.sql, { merchant: M2 });
    expect((await get(path, { authorization: `Bearer ${other.key}` })).status).toBe(403);
    await revokeApiKey(db.sql, key.id);
    const revoked = await get(path, m1);
    expect(revoked.status).toBe(401);
    expect(revoked.json.error.code).toBe("unauthenticated");
    expect(caches.activity.stats()).toMatchObject({ hits: 1, misses: 1 });
  });

  test("a committed batch invalidates the chain's pages", async () => {
    const { get } = await mkApp();
    const path = `/v0/activity/${M1}?order=desc&limit=1`;
    const before = await get(path);
    const hash = txHash(900_000, 1);
    try {
      await db.sql`insert into activity (chain_id, block_number, log_index, tx_hash, block_hash, block_time, merchant,
          module, subscription_id, type, token, amount, fee, reason, keeper)
        values (${CHAIN_A}, ${INDEXED_BLOCK_A + 1}, 0, ${hash}, ${hash}, ${new Date(NOW_A * 1000)}, ${M1}, ${MOD.a1}, '1',
          'CHARGE', null, '10000000', '100000', null, ${W.keeper})`;
      await db.sql`update chains set indexed_block = ${INDEXED_BLOCK_A + 1} where chain_id = ${CHAIN_A}`;
      expect((await get(path)).text).toBe(before.text); // no notification yet
      await publishBatch(CHAIN_A);
      const after = await get(path);
      expect(after.json[0].event_id).toBe(`${CHAIN_A}:${hash}:0`);
      expect(after.json[0].currency).toBe("USDC"); // the token of the subscription's plan
      expect(after.headers.get("x-indexed-block")).toBe(String(INDEXED_BLOCK_A + 1));
      expect(after.headers.get("link")).toContain(`starting_after=${CHAIN_A}%3A${hash}%3A0`);
    } finally {
      await db.sql`delete from activity where chain_id = ${CHAIN_A} and tx_hash = ${hash}`;
      await db.sql`update chains set indexed_block = ${INDEXED_BLOCK_A} where chain_id = ${CHAIN_A}`;
      await publishBatch(CHAIN_A);
    }
  });

  test("an unknown starting_after is a 400 every time, never cached", async () => {
    const { get, caches } = await mkApp();
    const path = `/v0/activity/${M1}?limit=2&starting_after=${CHAIN_A}:0x${"0".repeat(64)}:0`;
    expect((await get(path)).status).toBe(400);
    expect((await get(path)).json.error.param).toBe("starting_after");
    expect(caches.activity.stats()).toMatchObject({ hits: 0, misses: 2, stores: 0 });
  });

  test("bounded by bytes: beyond activityBytes the least recently used pages go", async () => {
    const { get, caches } = await mkApp({ activityBytes: 6_000 });
    const sizes: number[] = [];
    for (const limit of [1, 2, 3, 4, 5, 6]) {
      sizes.push((await get(`/v0/activity/${M1}?limit=${limit}`)).text.length);
      expect(caches.activity.stats().bytes).toBeLessThanOrEqual(6_000);
    }
    const stats = caches.activity.stats();
    expect(stats.stores).toBe(6);
    expect(stats.entries).toBeLessThan(6);
    expect(stats.bytes).toBeGreaterThan(sizes[5]);
    await get(`/v0/activity/${M1}?limit=6`); // the newest survived
    await get(`/v0/activity/${M1}?limit=1`); // the oldest did not
    expect(caches.activity.stats()).toMatchObject({ hits: 1, misses: 7 });
    // A page larger than the whole budget is served and never stored.
    const { get: getTiny, caches: tiny } = await mkApp({ activityBytes: 100 });
    expect((await getTiny(`/v0/activity/${M1}?limit=6`)).status).toBe(200);
    expect(tiny.activity.stats()).toMatchObject({ stores: 0, entries: 0, bytes: 0 });
  });
});
