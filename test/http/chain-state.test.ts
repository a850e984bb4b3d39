import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { createChainState, freshnessHeaders } from "../../src/http/chain-state";
import { withDeadline } from "../../src/http/deadline";
import { UnavailableError } from "../../src/http/errors";
import { createNotifier } from "../../src/db/notify";
import type { Db } from "../../src/db/client";
import { createTestDb } from "../../testkit/db";
import { until } from "../../testkit/cli";
import { insertChain } from "../../testkit/seed";

let db: Db;
beforeAll(async () => {
  db = await createTestDb();
  await insertChain(db.sql, {
    chain_id: 1,
    indexed_block: 100,
    indexed_time: new Date("2026-11-20T10:00:00Z"),
    head_block: 100,
    head_seen_at: new Date(),
  });
}, 60_000);
afterAll(async () => {
  await db?.close();
});

describe("chain state cache", () => {
  test("serves from memory within the TTL and refreshes when the indexer announces a batch", async () => {
    const notifier = createNotifier(db);
    const state = createChainState({ sql: db.sql, notifier, ttlMs: 3_600_000 });
    await state.ready; // LISTEN is in place on Postgres: the batch below cannot be missed

    expect((await state.get(1))?.indexedBlock).toBe("100");
    expect(await state.get(2)).toBeUndefined();
    await db.sql`update chains set indexed_block = 101 where chain_id = 1`;
    expect((await state.get(1))?.indexedBlock).toBe("100"); // cached
    await notifier.publish({ chainId: 1, fromBlock: "101", toBlock: "101", reorg: false });
    await until("the announced batch to refresh the cache", async () => (await state.get(1))?.indexedBlock === "101");
    await state.stop();
  });

  test("a short TTL bounds staleness without notifications", async () => {
    const state = createChainState({ sql: db.sql, ttlMs: 10 });
    await db.sql`update chains set indexed_block = 102 where chain_id = 1`;
    await Bun.sleep(20);
    expect((await state.get(1))?.indexedBlock).toBe("102");
    state.invalidate();
    await db.sql`update chains set indexed_block = 103 where chain_id = 1`;
    expect((await state.get(1))?.indexedBlock).toBe("103");
  });
});

describe("helpers", () => {
  test("freshness headers are omitted before the first batch", () => {
    const h: Record<string, string> = {};
    freshnessHeaders(h, { indexedBlock: null, indexedTime: null });
    expect(h).toEqual({});
    freshnessHeaders(h, { indexedBlock: "7", indexedTime: new Date(0) });
    expect(h).toEqual({ "x-indexed-block": "7", "x-indexed-at": "1970-01-01T00:00:00.000Z" });
  });

  test("withDeadline cancels a slow query and answers 503", async () => {
    let cancelled = false;
    const never = Object.assign(new Promise<never>(() => {}), { cancel: () => (cancelled = true) });
    await expect(withDeadline(never, 20)).rejects.toBeInstanceOf(UnavailableError);
    expect(cancelled).toBe(true);
    const rows = await withDeadline(db.sql`select 1 as x`, 1000);
    expect([...rows]).toEqual([{ x: 1 }]);
  });
});
