/** Export snapshots (openSnapshot): one REPEATABLE READ transaction each, at most half of a pool's connections. */
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import type { Db } from "../../src/db/client";
import { openSnapshot } from "../../src/http/stream";
import { createTestDb, testDbKind } from "../../testkit/db";

let db: Db;
beforeAll(async () => {
  db = await createTestDb({ max: 4 });
}, 60_000);
afterAll(async () => {
  await db?.close();
});

describe("openSnapshot", () => {
  test("over a pool of 4: two at once, each repeatable read, a third reads current rows; PGlite: none", async () => {
    const first = await openSnapshot(db.sql);
    if (testDbKind === "pglite") {
      expect(first).toBeUndefined();
      return;
    }
    const second = await openSnapshot(db.sql);
    expect(first).toBeDefined();
    expect(second).toBeDefined();
    expect(await openSnapshot(db.sql)).toBeUndefined();
    const [iso] = await first!.sql<{ level: string }[]>`select current_setting('transaction_isolation') as level`;
    expect(iso!.level).toBe("repeatable read");
    await first!.close();
    await first!.close(); // idempotent
    const third = await openSnapshot(db.sql);
    expect(third).toBeDefined();
    await second!.close();
    await third!.close();
    // Every connection is back: four plain queries at once still run.
    await Promise.all([1, 2, 3, 4].map(() => db.sql`select pg_sleep(0.01)`));
  });
});
