import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { encodeFunctionData, getContractAddress, type Address, type Hex } from "viem";
import { subscriptionModuleAbi, subscriptionProcessorAbi } from "../../src/chain/abis";
import type { Db } from "../../src/db/client";
import { createNotifier, type IndexedBatch } from "../../src/db/notify";
import { type Indexer } from "../../src/indexer";
import { createTestChain, type TestChain, type WalletName } from "../../testkit/chain";
import { createTestDb } from "../../testkit/db";
import { indexOnce, testIndexer } from "../../testkit/indexer";
import { clearChainData, dumpChainData } from "../../testkit/compare";
import { runScenario, type Scenario } from "../../testkit/scenario";
import { until } from "../../testkit/cli";

type Call = { from: WalletName; to: Address; data: Hex };

let chain: TestChain;
let scenario: Scenario;
let live: Db; // followed by a running indexer through every reorg
let fresh: Db; // indexed from scratch after each reorg, for comparison
let indexer: Indexer;
const batches: IndexedBatch[] = [];

const moduleCall = (from: WalletName, to: Address, functionName: string, args: unknown[]): Call => ({
  from,
  to,
  data: encodeFunctionData({ abi: subscriptionModuleAbi, functionName, args } as never),
});
const processorCall = (from: WalletName, functionName: string, args: unknown[]): Call => ({
  from,
  to: chain.processor,
  data: encodeFunctionData({ abi: subscriptionProcessorAbi, functionName, args } as never),
});

/** Sends each call in its own block; all must succeed. */
async function mine(calls: Call[]): Promise<void> {
  for (const c of calls) {
    await chain.send(chain.wallet(c.from).sendTransaction({ to: c.to, data: c.data, gas: 3_000_000n }));
  }
}

/** Replaces the last `depth` blocks with new ones holding `calls` (call i in new block `offsets[i]`). */
async function reorg(depth: number, calls: Call[], offsets: number[]): Promise<void> {
  const pairs = calls.map((c, i) => [
    { from: chain.address(c.from), to: c.to, data: c.data, gas: "0x2dc6c0" },
    offsets[i],
  ]);
  await chain.testClient.request({ method: "anvil_reorg", params: [depth, pairs] } as never);
}

/** Waits until the live indexer holds the chain's current head block (same number and hash). */
async function synced(): Promise<void> {
  const deadline = Date.now() + 20_000;
  for (;;) {
    const head = await chain.publicClient.getBlock({ blockTag: "latest" });
    const [row] = await live.sql`select indexed_block, indexed_hash from chains where chain_id = ${chain.chainId}`;
    if (row?.indexed_block === head.number.toString() && row.indexed_hash === head.hash) return;
    if (Date.now() > deadline) throw new Error(`live index stuck at ${row?.indexed_block} (head ${head.number})`);
    await Bun.sleep(20);
  }
}

/** The live index must equal a fresh index of the same chain, row for row, table for table. */
async function expectSameAsFresh(): Promise<void> {
  await synced();
  await clearChainData(fresh.sql);
  await indexOnce(fresh.sql, chain.rpcUrl, chain.processor, { db: fresh, startBlock: chain.startBlock });
  const [a, b] = [await dumpChainData(live.sql, chain.chainId), await dumpChainData(fresh.sql, chain.chainId)];
  expect(a.chains).toEqual(b.chains);
  for (const table of Object.keys(a) as (keyof typeof a)[])
    expect({ [table]: a[table] }).toEqual({ [table]: b[table] });
}

const count = async (db: Db, query: string) => Number((await db.sql.unsafe(query))[0]!.n);

beforeAll(async () => {
  chain = await createTestChain();
  scenario = await runScenario(chain);
  [live, fresh] = await Promise.all([createTestDb(), createTestDb()]);
  const notifier = createNotifier(live);
  await notifier.subscribe((b) => void batches.push(b));
  indexer = testIndexer(live, chain, { notifier });
  await indexer.start();
  await synced();
}, 60_000);

afterAll(async () => {
  await indexer?.stop();
  await Promise.all([live?.close(), fresh?.close()]);
  await chain?.stop();
});

describe("reorgs", () => {
  test("depth 1: a block list change is replaced by a failed charge", async () => {
    const { m1, m2 } = scenario.modules;
    const carolSub = scenario.subs[2]!;
    await mine([moduleCall("merchant2", m2, "blockSubscriber", [chain.address("alice")])]);
    await synced();
    expect(await count(live, "select count(*) as n from blocked_subscribers where blocked")).toBe(3);
    const before = batches.length;
    await reorg(1, [processorCall("keeper", "charge", [m1, carolSub])], [0]);
    await expectSameAsFresh();
    expect(await count(live, "select count(*) as n from blocked_subscribers where blocked")).toBe(2);
    // Published after the commit and delivered over another connection: wait for it.
    await until("the rollback's notification", async () => batches.slice(before).some((b) => b.reorg), 10_000);
  });

  test("depth 3: a charge, a pause and a plan with a new token give way to a plan and a subscription", async () => {
    const { m1 } = scenario.modules;
    const [, , carolSub, , , , noMetaSub] = scenario.subs;
    const orphanToken = await chain.deployToken({ symbol: "ORPH", decimals: 2 });
    await mine([
      processorCall("keeper", "charge", [m1, carolSub]),
      moduleCall("alice", m1, "pause", [noMetaSub]),
      moduleCall("merchant", m1, "createPlan", [50, orphanToken, 10n, 60, 0]),
    ]);
    await synced();
    expect(await count(live, `select count(*) as n from tokens where address = '${orphanToken.toLowerCase()}'`)).toBe(
      1,
    );
    await reorg(
      3,
      [
        moduleCall("merchant", m1, "createPlan", [51, scenario.tokens.tusd, 11n, 60, 0]),
        moduleCall("erin", m1, "subscribe", [51, 0, 0n]),
      ],
      [0, 2],
    );
    await expectSameAsFresh();
    expect(await count(live, `select count(*) as n from tokens where address = '${orphanToken.toLowerCase()}'`)).toBe(
      0,
    );
    expect(await count(live, "select count(*) as n from subscriptions where paused")).toBe(1); // b1 only
  });

  test("depth 10: a new module, charges, state changes; the module address returns for another merchant", async () => {
    const { m1 } = scenario.modules;
    const { tusd } = scenario.tokens;
    const [a1, , carolSub, , , , noMetaSub] = scenario.subs;
    const nonce = BigInt(await chain.publicClient.getTransactionCount({ address: chain.processor }));
    const x = getContractAddress({ from: chain.processor, nonce });
    await chain.testClient.increaseTime({ seconds: 4000 });
    await mine([
      processorCall("merchant2", "createModule", []),
      moduleCall("merchant2", x, "createPlan", [1, tusd, 5n, 10, 0]),
      moduleCall("alice", x, "subscribe", [1, 0, 0n]),
      processorCall("keeper", "charge", [m1, a1]),
      processorCall("alice", "refill", [m1, a1, 3n]),
      moduleCall("merchant", m1, "blockSubscriber", [chain.address("dave")]),
      moduleCall("alice", m1, "cancel", [noMetaSub]),
      moduleCall("alice", m1, "setAllowanceExpiry", [a1, 0n]),
      processorCall("deployer", "setFee", [300, chain.address("carol")]),
      processorCall("keeper", "charge", [m1, carolSub]),
    ]);
    await synced();
    expect(await count(live, `select count(*) as n from modules where address = '${x.toLowerCase()}'`)).toBe(1);
    await reorg(
      10,
      [
        processorCall("dave", "createModule", []),
        moduleCall("dave", x, "createPlan", [7, tusd, 6n, 20, 0]),
        processorCall("keeper", "charge", [m1, carolSub]),
        processorCall("deployer", "setKeeper", [chain.address("keeper2"), true]),
      ],
      [1, 3, 5, 9],
    );
    await expectSameAsFresh();
    const [mod] = await live.sql`select merchant from modules where address = ${x.toLowerCase()}`;
    expect(mod!.merchant).toBe(chain.address("dave").toLowerCase());
  });

  test("evm_snapshot / evm_revert to a shorter, different history, then a longer one", async () => {
    const { m1, m2 } = scenario.modules;
    const [a1, , carolSub, dSub] = scenario.subs;
    const snap = await chain.snapshot();
    await chain.testClient.increaseTime({ seconds: 4000 });
    await mine([
      processorCall("keeper", "charge", [m1, a1]),
      moduleCall("merchant", m1, "pause", [dSub]),
      moduleCall("merchant2", m2, "unblockSubscriber", [chain.address("dave")]),
      moduleCall("bob", m2, "subscribe", [1, 0, 0n]),
      processorCall("keeper", "charge", [m1, carolSub]),
    ]);
    await synced();
    await chain.revert(snap);
    await mine([moduleCall("merchant", m1, "blockSubscriber", [chain.address("erin")])]);
    await expectSameAsFresh();
    await mine([
      processorCall("keeper", "charge", [m1, carolSub]),
      moduleCall("dave", m1, "setAllowanceExpiry", [dSub, 123n]),
      moduleCall("merchant", m1, "unblockSubscriber", [chain.address("erin")]),
    ]);
    await expectSameAsFresh();
    expect(indexer.status().lastError).toBeNull();
  });
});
