import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { createDb, type Db } from "../../src/db/client";
import { ACTIVITY_LOGS } from "../../src/domain/chain-event";
import { createTestChain, type TestChain } from "../../testkit/chain";
import { morePasses } from "../../testkit/cli";
import { createTestDb, testDbKind } from "../../testkit/db";
import { indexOnce, testIndexer, failCursorMoves } from "../../testkit/indexer";
import { backfillEnv, spawnIndexer } from "../../testkit/indexer-child";
import { dumpChainData } from "../../testkit/compare";
import { runLoad, setupLoad } from "../../testkit/load";

let chain: TestChain;
let fresh: Db;
let head: bigint;
let payments = 0;

beforeAll(async () => {
  chain = await createTestChain();
  const load = await setupLoad(chain, { successSubs: 20 });
  await runLoad(chain, load, { rounds: 25, failures: 120 });
  payments = load.payments;
  head = await chain.publicClient.getBlockNumber({ cacheTime: 0 });
  fresh = await createTestDb();
  await indexOnce(fresh.sql, chain.rpcUrl, chain.processor, { db: fresh, startBlock: chain.startBlock });
}, 120_000);

afterAll(async () => {
  await fresh?.close();
  await chain?.stop();
});

describe("restart", () => {
  // Postgres: a database on the server. PGlite: a data directory the child opens, is killed with, and reopens.
  test(`kill -9 mid-backfill (${testDbKind}), restart, and the index equals a fresh one`, async () => {
    const server = testDbKind === "postgres" ? await createTestDb() : null;
    const dir = server ? null : mkdtempSync(join(tmpdir(), "indexer-restart-"));
    // Small batches: the backfill takes many transactions, so a kill lands in the middle of one.
    const env = backfillEnv(chain, 3, server ? { url: server.url } : { dir: dir! });
    const firstBatches: bigint[] = [];
    try {
      for (const [i, after] of [3, 8, 15].entries()) {
        const child = spawnIndexer(env);
        const first = await child.waitFor((l) => l.batch !== undefined, 60_000);
        firstBatches.push(BigInt(first.batch as string));
        // The first run leaves the secondary indexes out of this backfill; the later ones find them left out.
        if (i === 0)
          expect(child.lines.some((l) => l.log === "secondary indexes deferred for the initial backfill")).toBe(true);
        await child.waitFor(() => child.lines.filter((l) => l.batch !== undefined).length >= after, 60_000);
        await Bun.sleep(i * 7); // a different point inside the next transaction each time
        await child.kill("SIGKILL");
      }
      const child = spawnIndexer(env);
      await child.waitFor(
        (l) => (l.status as { indexedBlock?: string } | undefined)?.indexedBlock === head.toString(),
        60_000,
      );
      expect(child.status()?.lastError).toBeNull();
      await child.kill("SIGTERM");
      // Every run resumed where the previous one stopped instead of starting over.
      for (let i = 1; i < firstBatches.length; i++) expect(firstBatches[i]! > firstBatches[i - 1]!).toBe(true);

      const killed = server ?? (await createDb({ dataDir: dir! }));
      try {
        const [a, b] = [await dumpChainData(killed.sql, chain.chainId), await dumpChainData(fresh.sql, chain.chainId)];
        for (const table of Object.keys(a) as (keyof typeof a)[])
          expect({ [table]: a[table] }).toEqual({ [table]: b[table] });
        // The secondary indexes the first run left out were built by the run that reached the head.
        const indexes = (
          q: Db["sql"],
        ) => q`select indexname, indexdef from pg_indexes where schemaname = current_schema()
          order by indexname`;
        expect(await indexes(killed.sql)).toEqual(await indexes(fresh.sql));
        expect((await killed.sql`select name from deferred_indexes`).length).toBe(0);
        // Every payment log is there once: as its activity row, not in events.
        expect(a.activity.length).toBe(payments);
        expect(a.events.filter((e) => ACTIVITY_LOGS.has(String(e.name))).length).toBe(0);
      } finally {
        if (!server) await killed.close();
      }
    } finally {
      await server?.close();
      if (dir) rmSync(dir, { recursive: true, force: true });
    }
  }, 240_000);

  test("a transaction failing at its last statement leaves nothing behind, and the retry converges", async () => {
    const db = await createTestDb();
    const fault = await failCursorMoves(db.sql);
    const indexer = testIndexer(db, chain, { tuning: { initialRange: 1000, maxBackoffMs: 50 } });
    try {
      await indexer.start();
      const deadline = Date.now() + 30_000;
      while (!/injected fault/.test(indexer.status().lastError ?? "")) {
        if (Date.now() > deadline) throw new Error("the fault never fired");
        await Bun.sleep(20);
      }
      await morePasses(3, indexer); // a few more failed attempts
      for (const table of ["events", "activity", "subscriptions", "modules", "plans", "tokens", "blocks"]) {
        expect({ [table]: Number((await db.sql.unsafe(`select count(*) as n from ${table}`))[0]!.n) }).toEqual({
          [table]: 0,
        });
      }
      const [c] = await db.sql`select indexed_block from chains`;
      expect(c!.indexed_block).toBeNull();
      await fault.disarm();
      await indexer.waitForBlock(head, 30_000);
      await indexer.stop();
      const [a, b] = [await dumpChainData(db.sql, chain.chainId), await dumpChainData(fresh.sql, chain.chainId)];
      for (const table of Object.keys(a) as (keyof typeof a)[])
        expect({ [table]: a[table] }).toEqual({ [table]: b[table] });
    } finally {
      await indexer.stop();
      await db.close();
    }
  }, 60_000);
});
