/**
 * On a server, backfill batches (every block deeper than the reorg window below the head) commit without waiting for
 * their WAL flush; batches near the head keep the server's synchronous commit. On PGlite every batch does (the
 * database dies with the process: a commit not yet flushed would be lost to a kill -9).
 */
import { afterAll, beforeAll, expect, test } from "bun:test";
import type { Db } from "../../src/db/client";
import type { IndexerHook } from "../../src/indexer/hooks";
import { createTestChain, type TestChain } from "../../testkit/chain";
import { createTestDb, testDbKind } from "../../testkit/db";
import { indexTo } from "../../testkit/indexer";
import { runScenario } from "../../testkit/scenario";

let chain: TestChain;
let db: Db;

beforeAll(async () => {
  chain = await createTestChain();
  await runScenario(chain);
  await chain.testClient.mine({ blocks: 300 });
  await runScenario(chain);
  db = await createTestDb();
}, 120_000);

afterAll(async () => {
  await db?.close();
  await chain?.stop();
});

test(`batches deeper than the reorg window commit asynchronously on a server only (${testDbKind})`, async () => {
  const seen: { to: bigint; head: bigint; setting: string }[] = [];
  const probe: IndexerHook = {
    name: "probe",
    async onBatch(tx, ctx) {
      const [row] = await tx<{ s: string }[]>`select current_setting('synchronous_commit') as s`;
      seen.push({ to: ctx.toBlock, head: ctx.head, setting: row!.s });
    },
  };
  const head = await chain.publicClient.getBlockNumber({ cacheTime: 0 });
  await indexTo(db, chain, head, { hooks: [probe], tuning: { initialRange: 8, maxRange: 16 } });
  const deep = seen.filter((b) => b.to + 64n < b.head);
  const near = seen.filter((b) => b.to + 64n >= b.head);
  expect(deep.length).toBeGreaterThan(0);
  expect(near.length).toBeGreaterThan(0);
  expect(deep.every((b) => b.setting === (db.kind === "postgres" ? "off" : "on"))).toBe(true);
  expect(near.every((b) => b.setting === "on")).toBe(true);
  // The next transaction on the pool is back to the server's setting.
  const [after] = await db.sql<{ s: string }[]>`select current_setting('synchronous_commit') as s`;
  expect(after!.s).toBe("on");
});
