import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { publicClientFor } from "../../src/chain/clients";
import type { Db } from "../../src/db/client";
import { type Indexer, type IndexerTuning } from "../../src/indexer";
import { createTestChain, type TestChain } from "../../testkit/chain";
import { createTestDb } from "../../testkit/db";
import { indexOnce, testIndexer } from "../../testkit/indexer";
import { clearChainData, dumpChainData } from "../../testkit/compare";
import { runLoad, setupLoad, type Load } from "../../testkit/load";
import { startRpcProxy, type RpcProxy } from "../../testkit/rpc-proxy";
import { runScenario, type Scenario } from "../../testkit/scenario";

let chain: TestChain;
let scenario: Scenario;
let load: Load;
let fresh: Db;

const head = () => chain.publicClient.getBlockNumber({ cacheTime: 0 });

function indexerVia(proxy: RpcProxy, db: Db, tuning: IndexerTuning = {}): Indexer {
  return testIndexer(db, chain, {
    client: publicClientFor(proxy.url, 300),
    tuning: {
      maxBackoffMs: 200,
      retry: { attempts: 3, baseMs: 10, maxMs: 50 },
      tokenRetryMs: 50,
      tokenMaxRetryMs: 500,
      ...tuning,
    },
  });
}

async function expectSameAsFresh(db: Db): Promise<void> {
  await clearChainData(fresh.sql);
  await indexOnce(fresh.sql, chain.rpcUrl, chain.processor, { db: fresh, startBlock: chain.startBlock });
  const [a, b] = [await dumpChainData(db.sql, chain.chainId), await dumpChainData(fresh.sql, chain.chainId)];
  for (const table of Object.keys(a) as (keyof typeof a)[])
    expect({ [table]: a[table] }).toEqual({ [table]: b[table] });
}

async function until(cond: () => boolean | Promise<boolean>, what: string, timeoutMs = 30_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!(await cond())) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await Bun.sleep(20);
  }
}

beforeAll(async () => {
  chain = await createTestChain();
  scenario = await runScenario(chain);
  load = await setupLoad(chain, { successSubs: 10 });
  await runLoad(chain, load, { rounds: 8, failures: 60 });
  fresh = await createTestDb();
}, 120_000);

afterAll(async () => {
  await fresh?.close();
  await chain?.stop();
});

describe("RPC faults", () => {
  test("errors, 429s, timeouts and range and result limits: the index still equals a fresh one", async () => {
    const proxy = startRpcProxy(chain.rpcUrl, {
      http500: 0.08,
      http429: 0.08,
      rpcError: 0.05,
      maxDelayMs: 5,
      stall: 0.02,
      stallMs: 600, // longer than the client's 300 ms timeout
      maxRange: 7,
      maxResults: 150,
    });
    const db = await createTestDb();
    const indexer = indexerVia(proxy, db, { initialRange: 50 });
    try {
      await indexer.start();
      await indexer.waitForBlock(await head(), 120_000);
      await runLoad(chain, load, { rounds: 2, failures: 30 }); // and while following the head
      await indexer.waitForBlock(await head(), 60_000);
      // A token whose symbol()/decimals() failed under the faults is read again with backoff: its metadata lands
      // after the blocks that introduced it (stop waits for a read in flight).
      await until(() => indexer.status().tokensPending === 0, "token metadata read again", 60_000);
      await indexer.stop();
      expect(proxy.injected).toBeGreaterThan(0);
      expect(proxy.refused.length).toBeGreaterThan(0);
      // A refused range is never asked again.
      const refused = new Set(proxy.refused);
      const again = proxy.asked.filter((r) => refused.has(r));
      expect(again.length).toBe(refused.size);
      await expectSameAsFresh(db);
    } finally {
      await indexer.stop();
      proxy.stop();
      await db.close();
    }
  }, 180_000);

  test("an unreachable RPC shows in status().lastError and the indexer recovers by itself", async () => {
    const proxy = startRpcProxy(chain.rpcUrl);
    const db = await createTestDb();
    const indexer = indexerVia(proxy, db);
    try {
      await indexer.start();
      await indexer.waitForBlock(await head(), 60_000);
      expect(indexer.status().lastError).toBeNull();
      proxy.down();
      await until(() => indexer.status().lastError !== null, "lastError");
      expect(indexer.status().lastError).toMatch(/RpcUnavailableError/);
      const receipt = await chain.charge(scenario.modules.m1, scenario.subs[2]!);
      proxy.up();
      await indexer.waitForBlock(receipt.blockNumber, 30_000);
      await until(() => indexer.status().lastError === null, "recovery");
      const rows = await db.sql`select type from activity where tx_hash = ${receipt.transactionHash}`;
      expect(rows.map((r) => r.type)).toEqual(["FAIL"]);
    } finally {
      await indexer.stop();
      proxy.stop();
      await db.close();
    }
  }, 60_000);

  test("a stalled head is reported in lastError until a new block arrives", async () => {
    const proxy = startRpcProxy(chain.rpcUrl);
    const db = await createTestDb();
    const indexer = indexerVia(proxy, db, { stallAfterMs: 200 });
    try {
      await indexer.start();
      await indexer.waitForBlock(await head(), 60_000);
      await until(() => /stalled/.test(indexer.status().lastError ?? ""), "stall report");
      await chain.testClient.mine({ blocks: 1 });
      await until(() => indexer.status().lastError === null, "stall cleared");
      expect(indexer.status().indexedBlock).toBe((await head()).toString());
    } finally {
      await indexer.stop();
      proxy.stop();
      await db.close();
    }
  }, 60_000);
});
