/**
 * Load-balanced providers: a head that goes back, headers missing at random, no logs yet for the newest block, a
 * token whose metadata call hangs. During each fault no indexed record disappears, and the end state equals a
 * fresh index of the same chain.
 */
import { readiness } from "../../src/http/features/health/service";
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { encodeFunctionData } from "viem";
import { subscriptionProcessorAbi } from "../../src/chain/abis";
import { publicClientFor } from "../../src/chain/clients";
import type { Db } from "../../src/db/client";
import { type Indexer, type IndexerTuning } from "../../src/indexer";
import { listActivity } from "../../src/http/features/activity/service";
import { createTestChain, type TestChain } from "../../testkit/chain";
import { morePasses } from "../../testkit/cli";
import { createTestDb } from "../../testkit/db";
import { indexOnce, testIndexer } from "../../testkit/indexer";
import { clearChainData, dumpChainData } from "../../testkit/compare";
import { startRpcProxy, type RpcProxy } from "../../testkit/rpc-proxy";
import { runScenario, type Scenario } from "../../testkit/scenario";

let chain: TestChain;
let scenario: Scenario;
let fresh: Db;

const head = () => chain.publicClient.getBlockNumber({ cacheTime: 0 });
/** Carol's subscription fails every charge (no allowance) and is always due: one activity row per block. */
const failCharge = () => chain.charge(scenario.modules.m1, scenario.subs[2]!);

type Run = {
  proxy: RpcProxy;
  db: Db;
  indexer: Indexer;
  logs: { level: string; msg: string; fields?: Record<string, unknown> }[];
  watchers: (() => Promise<unknown>)[];
};

async function follow(tuning: IndexerTuning = {}): Promise<Run> {
  const proxy = startRpcProxy(chain.rpcUrl);
  const db = await createTestDb();
  const logs: Run["logs"] = [];
  const indexer = testIndexer(db, chain, {
    client: publicClientFor(proxy.url, 300),
    log: (level, msg, fields) => void logs.push({ level, msg, fields }),
    tuning: { maxBackoffMs: 200, retry: { attempts: 3, baseMs: 10, maxMs: 50 }, ...tuning },
  });
  await indexer.start();
  await synced(db);
  return { proxy, db, indexer, logs, watchers: [] };
}

async function close(run: Run): Promise<void> {
  for (const stop of run.watchers) await stop();
  await run.indexer.stop();
  run.proxy.stop();
  await run.db.close();
}

async function until(cond: () => boolean | Promise<boolean>, what: string, timeoutMs = 20_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!(await cond())) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await Bun.sleep(20);
  }
}

/** Waits until the index holds the chain's real head block (same number and hash). */
async function synced(db: Db): Promise<void> {
  await until(async () => {
    const block = await chain.publicClient.getBlock({ blockTag: "latest" });
    const [row] = await db.sql`select indexed_block, indexed_hash from chains where chain_id = ${chain.chainId}`;
    return row?.indexed_block === block.number.toString() && row.indexed_hash === block.hash;
  }, "the index to reach the head");
}

/**
 * Samples the tables the API reads (events, activity, subscriptions) every few ms; `stop()` resolves with every
 * row key that was seen once and missing from a later sample.
 */
function watchForLosses(run: Run) {
  const { db } = run;
  const seen = new Set<string>();
  const lost = new Set<string>();
  let running = true;
  const done = (async () => {
    while (running) {
      const rows = await db.sql<{ k: string }[]>`
        select 'event:' || block_number || ':' || log_index as k from events
        union all select 'activity:' || block_number || ':' || log_index from activity
        union all select 'subscription:' || subscription_id from subscriptions`;
      const now = new Set(rows.map((r) => r.k));
      for (const k of seen) if (!now.has(k)) lost.add(k);
      for (const k of now) seen.add(k);
      await Bun.sleep(5);
    }
  })();
  const stop = async () => {
    running = false;
    await done;
    return [...lost];
  };
  run.watchers.push(stop);
  return { seen, stop };
}

async function expectSameAsFresh(db: Db): Promise<void> {
  await synced(db);
  await clearChainData(fresh.sql);
  await indexOnce(fresh.sql, chain.rpcUrl, chain.processor, { db: fresh, startBlock: chain.startBlock });
  const [a, b] = [await dumpChainData(db.sql, chain.chainId), await dumpChainData(fresh.sql, chain.chainId)];
  for (const table of Object.keys(a) as (keyof typeof a)[])
    expect({ [table]: a[table] }).toEqual({ [table]: b[table] });
}

beforeAll(async () => {
  chain = await createTestChain();
  scenario = await runScenario(chain);
  // Enough history above the start block for a head 70 blocks back to stay above it.
  await chain.testClient.mine({ blocks: 80 });
  fresh = await createTestDb();
}, 60_000);

afterAll(async () => {
  await fresh?.close();
  await chain?.stop();
});

describe("a lagging backend is not a reorg", () => {
  for (const lag of [2, 70]) {
    test(`a head ${lag} blocks back for a while rolls nothing back`, async () => {
      const run = await follow();
      try {
        for (let i = 0; i < 3; i++) await failCharge();
        await synced(run.db);
        const watch = watchForLosses(run);
        run.proxy.faults.lagBlocks = lag;
        await morePasses(5, run.indexer); // several polls against the lagging backend
        await failCharge();
        await morePasses(5, run.indexer);
        expect(run.indexer.status().indexedBlock).toBe(((await head()) - 1n).toString());
        run.proxy.faults.lagBlocks = 0;
        await failCharge();
        await synced(run.db);
        expect(await watch.stop()).toEqual([]);
        expect(watch.seen.size).toBeGreaterThan(0);
        expect(run.logs.filter((l) => /rolled back|reorg/.test(l.msg))).toEqual([]);
        await expectSameAsFresh(run.db);
      } finally {
        await close(run);
      }
    });
  }

  test("headers missing at random roll nothing back", async () => {
    const run = await follow();
    try {
      const watch = watchForLosses(run);
      run.proxy.faults.nullHeaders = 0.3;
      for (let i = 0; i < 6; i++) {
        await failCharge();
        await morePasses(1, run.indexer);
      }
      await synced(run.db);
      run.proxy.faults.nullHeaders = 0;
      expect(run.proxy.injected).toBeGreaterThan(0);
      expect(await watch.stop()).toEqual([]);
      expect(run.logs.filter((l) => /rolled back/.test(l.msg))).toEqual([]);
      await expectSameAsFresh(run.db);
    } finally {
      await close(run);
    }
  });
});

describe("missing logs", () => {
  test("no logs yet for the newest block: the cursor waits instead of skipping its events", async () => {
    const run = await follow();
    try {
      const watch = watchForLosses(run);
      run.proxy.faults.emptyNewestLogs = 0.7;
      for (let i = 0; i < 6; i++) {
        await failCharge();
        await morePasses(1, run.indexer);
      }
      await chain.testClient.mine({ blocks: 1 });
      await synced(run.db);
      run.proxy.faults.emptyNewestLogs = 0;
      expect(run.proxy.injected).toBeGreaterThan(0);
      // Blocks whose bloom named our contracts with no logs were asked for by hash.
      expect(run.proxy.asked.some((k) => k.startsWith("0x"))).toBe(true);
      expect(await watch.stop()).toEqual([]);
      await expectSameAsFresh(run.db);
    } finally {
      await close(run);
    }
  });
});

describe("token metadata", () => {
  test("a token whose symbol()/decimals() hang does not stall the chain; its metadata arrives later", async () => {
    const run = await follow({ tokenTimeoutMs: 200, tokenRetryMs: 50 });
    try {
      const { m1 } = scenario.modules;
      const slow = await chain.deployToken({ symbol: "SLOW", decimals: 9 });
      run.proxy.faults.hangCallsTo = [slow.toLowerCase()];
      run.proxy.faults.hangMs = 1_000;
      const watch = watchForLosses(run);
      await chain.createPlan("merchant", m1, { planId: 70, token: slow, amount: 5n, interval: 60 });
      await chain.fund("erin", slow, 1_000n);
      const id = await chain.subscribe("erin", m1, 70);
      const charged = await chain.charge(m1, id);
      await failCharge(); // a later block in another token
      await synced(run.db); // while every call to the token still hangs
      const records = await listActivity(run.db.sql, {
        merchant: chain.address("merchant").toLowerCase(),
        chainId: chain.chainId,
        order: "asc",
      });
      const record = () => records.find((r) => r.tx_hash === charged.transactionHash)!;
      expect([record().type, record().symbol, record().decimals]).toEqual(["CHARGE", null, null]);

      run.proxy.faults.hangCallsTo = [];
      await until(async () => {
        const again = await listActivity(run.db.sql, {
          merchant: chain.address("merchant").toLowerCase(),
          chainId: chain.chainId,
          order: "asc",
        });
        const r = again.find((x) => x.tx_hash === charged.transactionHash)!;
        return r.symbol === "SLOW" && r.decimals === 9;
      }, "the token's metadata");
      expect(await watch.stop()).toEqual([]);
      // The token without metadata stays without it.
      const [nometa] = await run.db
        .sql`select symbol, decimals from tokens where address = ${scenario.tokens.nometa.toLowerCase()}`;
      expect([nometa!.symbol, nometa!.decimals]).toEqual([null, null]);
      await expectSameAsFresh(run.db);
    } finally {
      await close(run);
    }
  });
});

describe("deep reorgs", () => {
  // Last: it replaces the history the other tests built.
  test("a reorg deeper than the stored window is acted on only after several polls agree, and shows in status", async () => {
    const run = await follow({ deepReorgPolls: 3 });
    try {
      const suspected: boolean[] = [];
      // What every API process sees: the chains row, and /readyz's verdict built on it.
      const notReadyBecause: string[] = [];
      let sampling = true;
      const sampler = (async () => {
        while (sampling) {
          suspected.push(run.indexer.status().deepReorgSuspected);
          const ready = await readiness(
            run.db.sql,
            { READY_MAX_LAG_BLOCKS: 1000, POLL_INTERVAL_MS: 20 },
            chain.chainId,
          );
          if (ready.chains[0]?.deep_reorg_suspected_at) notReadyBecause.push(...ready.reasons);
          await Bun.sleep(2);
        }
      })();
      const charge = {
        from: chain.address("keeper"),
        to: chain.processor,
        data: encodeFunctionData({
          abi: subscriptionProcessorAbi,
          functionName: "charge",
          args: [scenario.modules.m1, scenario.subs[2]!],
        }),
        gas: "0x2dc6c0",
      };
      await chain.testClient.request({ method: "anvil_reorg", params: [70, [[charge, 3]]] } as never);
      await expectSameAsFresh(run.db);
      sampling = false;
      await sampler;
      const msgs = run.logs.map((l) => l.msg);
      const confirmed = msgs.indexOf("deep reorg confirmed: reindexing from START_BLOCK");
      expect(confirmed).toBeGreaterThan(0);
      // Polls 1 and 2 of the same conflicting hashes only suspect it (the chain may still move in between).
      const before = run.logs.slice(0, confirmed).filter((l) => l.msg === "deep reorg suspected");
      expect(before.map((l) => l.fields?.polls).slice(-2)).toEqual([1, 2]);
      expect(run.logs[confirmed]!.fields?.polls).toBe(3);
      expect(suspected).toContain(true);
      expect(notReadyBecause.some((r) => r.includes("deep reorg is suspected"))).toBe(true);
      const [row] = await run.db.sql`select deep_reorg_suspected_at from chains where chain_id = ${chain.chainId}`;
      expect(row!.deep_reorg_suspected_at).toBeNull();
      expect(run.indexer.status().deepReorgSuspected).toBe(false);
      expect(run.indexer.status().lastError).toBeNull();
    } finally {
      await close(run);
    }
  });
});
