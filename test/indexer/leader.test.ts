import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { createDb, type Db } from "../../src/db/client";
import { type Indexer } from "../../src/indexer";
import { createTestChain, type TestChain } from "../../testkit/chain";
import { createTestDb, testDbKind } from "../../testkit/db";
import { indexOnce, testIndexer } from "../../testkit/indexer";
import { spawnIndexer } from "../../testkit/indexer-child";
import { clearChainData, dumpChainData } from "../../testkit/compare";
import { runLoad, setupLoad, type Load } from "../../testkit/load";

let chain: TestChain;
let load: Load;
let fresh: Db;

const head = () => chain.publicClient.getBlockNumber({ cacheTime: 0 });

async function expectSameAsFresh(db: Db): Promise<void> {
  await clearChainData(fresh.sql);
  await indexOnce(fresh.sql, chain.rpcUrl, chain.processor, { db: fresh, startBlock: chain.startBlock });
  const [a, b] = [await dumpChainData(db.sql, chain.chainId), await dumpChainData(fresh.sql, chain.chainId)];
  for (const table of Object.keys(a) as (keyof typeof a)[])
    expect({ [table]: a[table] }).toEqual({ [table]: b[table] });
}

function indexerOn(sql: Db["sql"], kind: Db["kind"]): Indexer {
  return testIndexer({ sql, kind }, chain, { tuning: { initialRange: 1, maxRange: 4, maxBackoffMs: 100 } });
}

beforeAll(async () => {
  chain = await createTestChain();
  load = await setupLoad(chain, { successSubs: 10 });
  await runLoad(chain, load, { rounds: 10, failures: 50 });
  fresh = await createTestDb();
}, 120_000);

afterAll(async () => {
  await fresh?.close();
  await chain?.stop();
});

describe("one writer per chain", () => {
  test("two indexers writing without a lock never apply a batch twice: the cursor check stops the loser", async () => {
    const db = await createTestDb();
    // On a server, two one-connection clients (too small a pool to reserve a lock session); on PGlite, one session.
    const second = db.kind === "postgres" ? await createDb({ url: db.url, max: 1 }) : null;
    const first = db.kind === "postgres" ? await createDb({ url: db.url, max: 1 }) : null;
    const a = indexerOn(first?.sql ?? db.sql, db.kind);
    const b = indexerOn(second?.sql ?? db.sql, db.kind);
    try {
      await Promise.all([a.start(), b.start()]);
      await runLoad(chain, load, { rounds: 3, failures: 20 });
      const h = await head();
      await Promise.all([a.waitForBlock(h, 60_000), b.waitForBlock(h, 60_000)]);
      await Promise.all([a.stop(), b.stop()]);
      await expectSameAsFresh(db);
    } finally {
      await Promise.all([a.stop(), b.stop()]);
      await Promise.all([first?.close(), second?.close()]);
      await db.close();
    }
  }, 120_000);

  if (testDbKind === "postgres") {
    test("two processes, one database: one leads, one waits; kill -9 the leader and the other takes over (Postgres only)", async () => {
      const db = await createTestDb();
      const env = {
        RPC_URL: chain.rpcUrl,
        PROCESSOR_ADDRESS: chain.processor,
        START_BLOCK: chain.startBlock.toString(),
        CHAIN_ID: String(chain.chainId),
        POLL_INTERVAL_MS: "20",
        DATABASE_URL: db.url,
      };
      const leading = (l: Record<string, unknown>) => (l.status as { leader?: boolean } | undefined)?.leader === true;
      const a = spawnIndexer(env);
      const b = spawnIndexer(env);
      try {
        const first = await Promise.race([a.waitFor(leading), b.waitFor(leading)]).then(() =>
          a.status()?.leader ? { leader: a, standby: b } : { leader: b, standby: a },
        );
        const { leader, standby } = first;
        await runLoad(chain, load, { rounds: 2, failures: 20 });
        const h1 = (await head()).toString();
        await leader.waitFor((l) => (l.status as { indexedBlock?: string } | undefined)?.indexedBlock === h1);
        // The standby follows the cursor from the database but never leads nor writes while the leader lives.
        await standby.waitFor((l) => (l.status as { indexedBlock?: string } | undefined)?.indexedBlock === h1);
        expect(standby.lines.some(leading)).toBe(false);
        expect(standby.lines.some((l) => l.batch !== undefined)).toBe(false);

        await leader.kill("SIGKILL");
        await standby.waitFor(leading);
        await runLoad(chain, load, { rounds: 2, failures: 20 });
        const h2 = (await head()).toString();
        await standby.waitFor((l) => (l.status as { indexedBlock?: string } | undefined)?.indexedBlock === h2);
        expect(standby.lines.some((l) => l.batch !== undefined)).toBe(true);
        await standby.kill("SIGTERM");
        await expectSameAsFresh(db);
      } finally {
        for (const c of [a, b]) if (c.proc.exitCode === null) await c.kill("SIGKILL");
        await db.close();
      }
    }, 120_000);
  } else {
    test("the indexer leads at once without reserving the only session (PGlite only)", async () => {
      const db = await createTestDb();
      const a = indexerOn(db.sql, "pglite");
      try {
        await a.start();
        const h = await head();
        await a.waitForBlock(h, 60_000);
        expect(a.status().leader).toBe(true);
        // The pool's one connection is still free for everyone else.
        const [row] = await db.sql`select indexed_block from chains`;
        expect(row!.indexed_block).toBe(h.toString());
      } finally {
        await a.stop();
        await db.close();
      }
    }, 60_000);
  }
});
