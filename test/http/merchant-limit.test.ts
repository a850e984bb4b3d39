/**
 * The per-merchant rate limit: every key and session of a merchant spends one bucket, in memory on one process and
 * through the database's `merchant_rate_limits` row between processes, leased in blocks (no statement per request).
 */
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { createApiKey } from "../../src/auth/api-keys";
import { createSession } from "../../src/auth/sessions";
import { createApp } from "../../src/http/app";
import { createMerchantLimiter, type MerchantLimiter } from "../../src/http/merchant-limit";
import { RateLimitedError } from "../../src/http/errors";
import { createChainRegistry } from "../../src/chain/clients";
import type { Db } from "../../src/db/client";
import { createTestDb } from "../../testkit/db";
import { CHAIN_A, M1, M2, MOD, W, seedFixture } from "../../testkit/seed";
import { testConfig } from "../../testkit/app";

let db: Db;

beforeAll(async () => {
  db = await createTestDb();
  await seedFixture(db.sql);
}, 60_000);

afterAll(async () => {
  await db?.close();
});

/** Admitted (true) or refused with a 429 (false); anything else fails the test. */
async function admitted(limiter: MerchantLimiter, merchant: string): Promise<boolean> {
  try {
    await limiter.hit(merchant);
    return true;
  } catch (err) {
    if (err instanceof RateLimitedError) return false;
    throw err;
  }
}

describe("per-merchant bucket", () => {
  test("keys and sessions of one merchant share it; another merchant has its own", async () => {
    const config = testConfig({ RATE_LIMIT_PER_MERCHANT_PER_MINUTE: "6", RATE_LIMIT_PER_KEY_PER_MINUTE: "1000" });
    const app = createApp({ sql: db.sql, config, chains: await createChainRegistry(config), now: () => 1_000_000 });
    const keys = [];
    for (let i = 0; i < 3; i++) keys.push((await createApiKey(db.sql, { merchant: M1 })).key);
    const { token } = await db.sql.begin((tx) => createSession(tx, { address: M1, chainId: CHAIN_A, ttlSeconds: 600 }));
    const other = (await createApiKey(db.sql, { merchant: M2 })).key;
    const get = (merchant: string, credential: string) =>
      app.handle(
        new Request(`http://localhost/v0/subscriptions/${merchant}?limit=1`, {
          headers: { authorization: `Bearer ${credential}` },
        }),
      );
    const statuses = [];
    for (const credential of [...keys, token, ...keys]) statuses.push((await get(M1, credential)).status);
    expect(statuses).toEqual([200, 200, 200, 200, 200, 200, 429]);
    const refused = await get(M1, token);
    expect(refused.status).toBe(429);
    expect(Number(refused.headers.get("retry-after"))).toBeGreaterThanOrEqual(1);
    expect((await get(M2, other)).status).toBe(200);
  });

  test("an authenticated check spends the merchant's bucket, shared with its other routes", async () => {
    await db.sql`delete from merchant_rate_limits`;
    const config = testConfig({ RATE_LIMIT_PER_MERCHANT_PER_MINUTE: "3", RATE_LIMIT_PER_KEY_PER_MINUTE: "1000" });
    const app = createApp({ sql: db.sql, config, chains: await createChainRegistry(config), now: () => 1_000_000 });
    const key = (await createApiKey(db.sql, { merchant: M1 })).key;
    const headers = { authorization: `Bearer ${key}` };
    const check = () =>
      app.handle(
        new Request(`http://localhost/v0/auth/check?module_address=${MOD.a1}&wallet=${W.alice}&plan_ids=1`, {
          headers,
        }),
      );
    const list = () => app.handle(new Request(`http://localhost/v0/subscriptions/${M1}?limit=1`, { headers }));
    const statuses = [(await list()).status, (await check()).status, (await list()).status, (await check()).status];
    expect(statuses).toEqual([200, 200, 200, 429]);
    // Without a credential the check spends its caller's address, not the merchant's bucket.
    expect(
      (
        await app.handle(
          new Request(`http://localhost/v0/auth/check?module_address=${MOD.a1}&wallet=${W.alice}&plan_ids=1`),
        )
      ).status,
    ).toBe(200);
  });

  test("two processes lease from one shared row: together they admit the bucket, in blocks, not a statement each", async () => {
    await db.sql`delete from merchant_rate_limits`;
    const opts = { perMinute: 600, sql: db.sql };
    const a = createMerchantLimiter(opts);
    const b = createMerchantLimiter(opts);
    const started = Date.now();
    let admittedCount = 0;
    for (let i = 0; i < 2000; i++) {
      if (await admitted(i % 2 ? a : b, M1)) admittedCount++;
    }
    const elapsedS = (Date.now() - started) / 1000;
    // The burst (600) plus what refilled meanwhile (10 a second), minus at most one block each left in hand.
    expect(admittedCount).toBeGreaterThanOrEqual(600 - 2 * 10);
    expect(admittedCount).toBeLessThanOrEqual(600 + Math.ceil(elapsedS * 10) + 1);
    // Leases come in blocks of 10 (a second of the rate).
    expect(a.leases() + b.leases()).toBeLessThan(admittedCount / 5 + 10);
    // Another merchant's row is its own.
    expect(await admitted(a, M2)).toBe(true);
  });

  test("a refusal is remembered until its Retry-After: requests over the limit cost no statement", async () => {
    await db.sql`delete from merchant_rate_limits`;
    const limiter = createMerchantLimiter({ perMinute: 6, sql: db.sql });
    const results = [];
    for (let i = 0; i < 7; i++) results.push(await admitted(limiter, M1));
    expect(results).toEqual([true, true, true, true, true, true, false]);
    const leases = limiter.leases();
    for (let i = 0; i < 100; i++) expect(await admitted(limiter, M1)).toBe(false);
    expect(limiter.leases()).toBe(leases);
    const [row] = await db.sql<{ tokens: number }[]>`select tokens from merchant_rate_limits where merchant = ${M1}`;
    expect(Number(row!.tokens)).toBeLessThan(1);
  });

  test("requests waiting on one lease are all admitted while the shared bucket has tokens", async () => {
    await db.sql`delete from merchant_rate_limits`;
    const limiter = createMerchantLimiter({ perMinute: 6000, sql: db.sql });
    const results = await Promise.all(Array.from({ length: 300 }, () => admitted(limiter, M1)));
    expect(results.every(Boolean)).toBe(true);
    expect(limiter.leases()).toBeLessThan(300 / 50);
  });
});
