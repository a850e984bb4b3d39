/**
 * The cursor polls of the response caches (src/http/cache.ts): a committed batch whose notification never came is
 * found by the next poll and its chain's entries end; polls that saw no batch let the check entries outlive their
 * max age without a reload, and without polls they do not.
 */
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { createApp } from "../../src/http/app";
import { createApiCaches, type ApiCacheOptions, type ApiCaches } from "../../src/http/caches";
import { createChainRegistry, type ChainRegistry } from "../../src/chain/clients";
import type { Db } from "../../src/db/client";
import { createNotifier, type Notifier } from "../../src/db/notify";
import { moveCursor } from "../../src/indexer/store";
import { createTestDb } from "../../testkit/db";
import { until } from "../../testkit/cli";
import { CHAIN_A, INDEXED_BLOCK_A, MOD, W, seedFixture } from "../../testkit/seed";
import { testConfig } from "../../testkit/app";

let db: Db;
let notifier: Notifier;
let chains: ChainRegistry;
const opened: ApiCaches[] = [];

beforeAll(async () => {
  db = await createTestDb();
  await seedFixture(db.sql);
  notifier = createNotifier(db);
  chains = await createChainRegistry(testConfig());
}, 60_000);

afterAll(async () => {
  for (const c of opened) await c.stop();
  await db?.close();
});

/** An app with caches of its own over the test database (cursor polls every 20 ms unless told otherwise). */
async function mkApp(opts: ApiCacheOptions) {
  const caches = createApiCaches({ notifier, sql: db.sql, confirmEveryMs: 20, ...opts });
  opened.push(caches);
  await caches.generations.ready;
  const app = createApp({ sql: db.sql, config: testConfig(), chains, notifier, caches });
  const authorized = async (wallet: string) => {
    const res = await app.handle(
      new Request(`http://localhost/v0/auth/check?module_address=${MOD.a1}&wallet=${wallet}&plan_ids=1`),
    );
    expect(res.status).toBe(200);
    return ((await res.json()) as { authorized: boolean }).authorized;
  };
  return { caches, authorized };
}

/** What the indexer's batch transaction does to alice's plan-1 allocation and the cursor (moveCursor). */
async function commitBatch(paused: boolean, block: number) {
  await db.sql.begin(async (tx) => {
    await tx`update subscriptions set paused = ${paused} where chain_id = ${CHAIN_A} and subscription_id = '1'`;
    await tx`update chains set indexed_block = ${block}, updated_at = now() where chain_id = ${CHAIN_A}`;
  });
}

/** Waits until `caches` confirmed a poll started after this call. */
async function nextConfirmation(caches: ApiCaches) {
  const after = performance.now();
  await until("a confirming poll", async () => caches.generations.confirmedAt() > after);
}

describe("cursor polls", () => {
  test("a batch whose notification never came ends its chain's entries at the next poll", async () => {
    const { caches, authorized } = await mkApp({ maxAgeMs: 3_600_000 });
    expect(await authorized(W.alice)).toBe(true);
    expect(await authorized(W.alice)).toBe(true);
    expect(caches.check.stats()).toMatchObject({ hits: 1, misses: 1 });
    await nextConfirmation(caches);
    const before = caches.generations.of(CHAIN_A);
    try {
      await commitBatch(true, INDEXED_BLOCK_A + 1); // committed; no notification is sent
      await until("the poll to start a generation", async () => caches.generations.of(CHAIN_A) > before);
      expect(await authorized(W.alice)).toBe(false);
      expect(caches.check.stats()).toMatchObject({ hits: 1, misses: 2 });
    } finally {
      // Restored the same way (no notification: one would reach the next test's caches through the shared LISTEN).
      await commitBatch(false, INDEXED_BLOCK_A);
      await until("the restoring batch", async () => caches.generations.of(CHAIN_A) > before + 1);
    }
  });

  test("confirmed check entries outlive their max age without a reload; without polls they end", async () => {
    // A hit within the last quarter of an entry's life (here 750 ms after the latest confirmation) reloads it ahead:
    // a max age of 1 s leaves a loaded machine that long between a confirming poll's start and the hit below. Alice's
    // allocation stays ACTIVE for days (grace's turns EXPIRED a second after the index's time: its entry ends then).
    const polled = await mkApp({ maxAgeMs: 1000 });
    const plain = await mkApp({ maxAgeMs: 1000, sql: undefined });
    expect(await polled.authorized(W.alice)).toBe(true);
    expect(await plain.authorized(W.alice)).toBe(true);
    const loaded = performance.now(); // after both entries' queries began
    // Well past the max age of both entries, with polls confirming all along.
    await until("a poll 1.2 s after the loads", async () => polled.caches.generations.confirmedAt() > loaded + 1200);
    expect(performance.now() - loaded).toBeGreaterThan(1000);
    expect(await polled.authorized(W.alice)).toBe(true);
    expect(await plain.authorized(W.alice)).toBe(true);
    expect(polled.caches.check.stats()).toMatchObject({ hits: 1, misses: 1, stores: 1, refreshes: 0 });
    expect(plain.caches.check.stats()).toMatchObject({ hits: 0, misses: 2 });
    expect(plain.caches.generations.confirmedAt()).toBe(-Infinity);
  });

  // Last in the file: its notifications reach every cache the tests above opened.
  test("a notified batch starts one generation: the poll finds the stamp its notification carried", async () => {
    const { caches } = await mkApp({ maxAgeMs: 3_600_000 });
    // Notifications reach every subscriber of the connection in turn: once this one has a stamp, the caches have it.
    const seen: (string | undefined)[] = [];
    const unsubscribe = await notifier.subscribe((b) => void seen.push(b.stamp));
    const [row] = await db.sql<{ indexed_hash: string; indexed_time: Date; head_block: string }[]>`
      select indexed_hash, indexed_time, head_block from chains where chain_id = ${CHAIN_A}`;
    // The indexer's transaction moves the cursor (moveCursor returns its stamp), then announces the commit.
    const commit = async (block: number, lose = false) => {
      const cursor = { block: BigInt(block), hash: row!.indexed_hash, time: row!.indexed_time.getTime() / 1000 };
      const stamp = await db.sql.begin((tx) => moveCursor(tx, CHAIN_A, cursor, BigInt(row!.head_block)));
      const notify = async () => {
        await notifier.publish({ chainId: CHAIN_A, fromBlock: `${block}`, toBlock: `${block}`, reorg: false, stamp });
        return stamp;
      };
      if (!lose) await notify();
      return notify;
    };
    try {
      await nextConfirmation(caches);
      const before = caches.generations.of(CHAIN_A);
      await commit(INDEXED_BLOCK_A + 1);
      await until("the notification", async () => caches.generations.of(CHAIN_A) > before);
      await nextConfirmation(caches);
      await nextConfirmation(caches);
      expect(caches.generations.of(CHAIN_A)).toBe(before + 1);
      // The next commit's notification is late: the poll starts its generation, the notification none.
      const late = await commit(INDEXED_BLOCK_A + 2, true);
      await until("the poll to find the batch", async () => caches.generations.of(CHAIN_A) > before + 1);
      await nextConfirmation(caches);
      const stamp = await late();
      await until("the late notification", async () => seen.includes(stamp));
      await nextConfirmation(caches);
      expect(caches.generations.of(CHAIN_A)).toBe(before + 2);
    } finally {
      await commit(INDEXED_BLOCK_A);
      await unsubscribe();
    }
  });
});
