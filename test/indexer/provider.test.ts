/**
 * The indexer through a hosted provider (testkit/provider-proxy.ts in front of anvil): compute units per second
 * answered with 429s beyond, a cap on logs per answer, a cap on batch size, logs with or without timestamps.
 */
import { afterAll, afterEach, beforeAll, describe, expect, test } from "bun:test";
import { encodeFunctionData } from "viem";
import { subscriptionModuleAbi, testTokenAbi } from "../../src/chain/abis";
import { configureBudgets, defaultBudgetSettings } from "../../src/chain/budget";
import { publicClientFor } from "../../src/chain/clients";
import type { Db } from "../../src/db/client";
import type { Indexer } from "../../src/indexer";
import { createTestChain, type TestChain } from "../../testkit/chain";
import { createTestDb } from "../../testkit/db";
import { indexOnce, testIndexer } from "../../testkit/indexer";
import { clearChainData, dumpChainData } from "../../testkit/compare";
import { runLoad, setupLoad } from "../../testkit/load";
import { startProviderProxy, type ProviderProfile, type ProviderProxy } from "../../testkit/provider-proxy";
import { runScenario, type Scenario } from "../../testkit/scenario";

let chain: TestChain;
let scenario: Scenario;
let fresh: Db;
const cleanups: (() => Promise<void> | void)[] = [];

const head = () => chain.publicClient.getBlockNumber({ cacheTime: 0 });

async function expectSameAsFresh(db: Db): Promise<void> {
  await clearChainData(fresh.sql);
  await indexOnce(fresh.sql, chain.rpcUrl, chain.processor, { db: fresh, startBlock: chain.startBlock });
  const [a, b] = [await dumpChainData(db.sql, chain.chainId), await dumpChainData(fresh.sql, chain.chainId)];
  for (const table of Object.keys(a) as (keyof typeof a)[])
    expect({ [table]: a[table] }).toEqual({ [table]: b[table] });
}

/** A started indexer of a fresh database through `proxy`. */
async function indexerVia(proxy: ProviderProxy): Promise<{ db: Db; indexer: Indexer }> {
  const db = await createTestDb();
  const indexer = testIndexer(db, chain, {
    client: publicClientFor(proxy.url, 2000),
    tuning: { maxBackoffMs: 200, retry: { attempts: 3, baseMs: 10, maxMs: 50 } },
  });
  cleanups.push(
    () => indexer.stop(),
    () => db.close(),
  );
  await indexer.start();
  return { db, indexer };
}

/** A provider with `profile`, paced at `cuPerSecond` on the client side; a fresh index backfilled through it to the head. */
async function backfillThrough(
  profile: Partial<ProviderProfile>,
  cuPerSecond: number,
): Promise<{ proxy: ProviderProxy; db: Db; target: bigint }> {
  const proxy = startProviderProxy(chain.rpcUrl, profile);
  cleanups.push(() => proxy.stop());
  configureBudgets({ cuPerSecond, weights: {}, maxBatch: 100 });
  const target = await head();
  const { db, indexer } = await indexerVia(proxy);
  await indexer.waitForBlock(target, 60_000);
  await indexer.stop();
  return { proxy, db, target };
}

beforeAll(async () => {
  chain = await createTestChain();
  scenario = await runScenario(chain);
  const load = await setupLoad(chain, { successSubs: 10 });
  await runLoad(chain, load, { rounds: 6, failures: 40 });
  // A stretch of empty blocks: the events above lie deep below the reorg window.
  await chain.testClient.mine({ blocks: 100 });
  fresh = await createTestDb();
}, 120_000);

afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c();
  configureBudgets({ ...defaultBudgetSettings, cuPerSecond: 0 });
});

afterAll(async () => {
  await fresh?.close();
  await chain?.stop();
});

describe("through a hosted provider", () => {
  test("a client spending faster than the provider allows is throttled, slows down and still reaches the head", async () => {
    const proxy = startProviderProxy(chain.rpcUrl, {
      latencyMs: 5,
      cuPerSecond: 1500,
      burstCu: 1500,
      maxLogs: 1000,
      maxBatch: 100,
    });
    cleanups.push(() => proxy.stop());
    // Four times the provider's rate: only its 429s can slow the client down.
    configureBudgets({ cuPerSecond: 6000, weights: {}, maxBatch: 100 });
    const target = await head();
    const { db, indexer } = await indexerVia(proxy);
    await indexer.waitForBlock(target, 90_000);
    expect(proxy.stats.throttled).toBeGreaterThan(0);
    await indexer.stop();
    await expectSameAsFresh(db);
  }, 120_000);

  test("a node without a result cap is never asked the whole backfill at once: 50 blocks first, then by density", async () => {
    const { proxy, db, target } = await backfillThrough(
      { latencyMs: 1, cuPerSecond: 1e6, burstCu: 1e6, maxLogs: 1e9, maxBatch: 100 },
      1e5,
    );
    // The ranges asked for the processor and its modules together (the ModuleCreated sweep asks the processor alone).
    const spans = proxy.stats.getLogs
      .filter((r, i) => r.includes("-") && proxy.stats.getLogsAddresses[i]!.includes(","))
      .map((r) => r.split("-").map(Number) as [number, number]);
    expect(target - chain.startBlock).toBeGreaterThan(100n);
    expect(spans[0]![1] - spans[0]![0] + 1).toBe(50);
    expect(spans.length).toBeGreaterThan(1);
    await expectSameAsFresh(db);
  }, 90_000);

  test("a refused batch is sent again in halves; a capped eth_getLogs answer is split at the range the provider names", async () => {
    const { proxy, db } = await backfillThrough(
      { latencyMs: 2, cuPerSecond: 1e6, burstCu: 1e6, maxLogs: 60, maxBatch: 7 },
      1e5,
    );
    expect(proxy.stats.batchRefusals).toBeGreaterThan(0);
    expect(proxy.stats.rangeRefusals).toBeGreaterThan(0);
    // Every header was asked (logs carry no timestamp here) and each batch answered held at most 7 calls.
    expect(proxy.stats.byMethod.eth_getBlockByNumber!.calls).toBeGreaterThan(7);
    await expectSameAsFresh(db);
  }, 90_000);

  test("with timestamps in the logs, headers are read only in the reorg window", async () => {
    const proxy = startProviderProxy(chain.rpcUrl, {
      latencyMs: 2,
      cuPerSecond: 1e6,
      burstCu: 1e6,
      stripBlockTimestamp: false,
    });
    cleanups.push(() => proxy.stop());
    const target = await head();
    const { db, indexer } = await indexerVia(proxy);
    await indexer.waitForBlock(target, 60_000);
    await indexer.stop();
    const asked = proxy.stats.headers.filter((h) => h !== "latest").map((h) => BigInt(h));
    expect(asked.length).toBeGreaterThan(0);
    expect(asked.filter((n) => n <= target - 64n)).toEqual([]);
    expect(new Set(asked).size).toBeLessThanOrEqual(64);
    await expectSameAsFresh(db);
  }, 90_000);

  test("a reorg inside the window is still detected through the provider", async () => {
    const proxy = startProviderProxy(chain.rpcUrl, {
      latencyMs: 2,
      cuPerSecond: 1e6,
      burstCu: 1e6,
      stripBlockTimestamp: false,
    });
    cleanups.push(() => proxy.stop());
    const { db, indexer } = await indexerVia(proxy);
    await indexer.waitForBlock(await head(), 60_000);
    const blocked = async () =>
      Number((await db.sql`select count(*)::int as n from blocked_subscribers where blocked`)[0]!.n);
    const before = await blocked();
    const { m2 } = scenario.modules;
    const data = encodeFunctionData({
      abi: subscriptionModuleAbi,
      functionName: "blockSubscriber",
      args: [chain.address("bob")],
    });
    await chain.send(chain.wallet("merchant2").sendTransaction({ to: m2, data, gas: 3_000_000n }));
    await indexer.waitForBlock(await head(), 20_000);
    expect(await blocked()).toBe(before + 1);
    // The block with the change is replaced by two empty ones.
    await chain.testClient.request({ method: "anvil_reorg", params: [1, []] } as never);
    await chain.testClient.mine({ blocks: 1 });
    const deadline = Date.now() + 20_000;
    while ((await blocked()) !== before && Date.now() < deadline) await Bun.sleep(50);
    expect(await blocked()).toBe(before);
    await indexer.waitForBlock(await head(), 20_000);
    await indexer.stop();
    await expectSameAsFresh(db);
  }, 90_000);

  test("at the head, blocks whose blooms rule the processor and modules out cost no eth_getLogs, and no log is missed", async () => {
    const proxy = startProviderProxy(chain.rpcUrl, {
      latencyMs: 2,
      cuPerSecond: 1e6,
      burstCu: 1e6,
      stripBlockTimestamp: false,
    });
    cleanups.push(() => proxy.stop());
    const db = await createTestDb();
    const indexer = testIndexer(db, chain, { client: publicClientFor(proxy.url, 2000), pollMs: 5 });
    cleanups.push(
      () => indexer.stop(),
      () => db.close(),
    );
    await indexer.start();
    await indexer.waitForBlock(await head(), 60_000);
    const { m1 } = scenario.modules;
    // Blocks with a module event, with a transfer of a token (a log, not ours) and empty, in a fixed shuffled order.
    const kinds = ["event", "empty", "other", "empty", "event", "other", "other", "event", "empty", "event", "empty"];
    let toggle = false;
    const logsBefore = proxy.stats.getLogs.length;
    for (const kind of kinds) {
      if (kind === "empty") await chain.testClient.mine({ blocks: 1 });
      else if (kind === "other") {
        const data = encodeFunctionData({
          abi: testTokenAbi,
          functionName: "transfer",
          args: [chain.address("bob"), 1n],
        });
        await chain.send(chain.wallet("alice").sendTransaction({ to: scenario.tokens.tusd, data, gas: 100_000n }));
      } else {
        const data = encodeFunctionData({
          abi: subscriptionModuleAbi,
          functionName: toggle ? "unblockSubscriber" : "blockSubscriber",
          args: [chain.address("dave")],
        });
        toggle = !toggle;
        await chain.send(chain.wallet("merchant").sendTransaction({ to: m1, data, gas: 3_000_000n }));
      }
      await indexer.waitForBlock(await head(), 20_000);
    }
    const logCalls = proxy.stats.getLogs.length - logsBefore;
    // Four blocks hold our logs: at least those are asked; the empty and foreign blocks mostly are not.
    expect(logCalls).toBeGreaterThanOrEqual(4);
    expect(logCalls).toBeLessThan(kinds.length);
    await indexer.stop();
    await expectSameAsFresh(db);
  }, 90_000);
});
