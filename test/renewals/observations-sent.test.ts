/**
 * What was last sent for a due instant outlives the outlook (renewals.md §4): a pause removes the allocation's
 * outlook, yet after the resume an unchanged `at_risk` is not sent again, and once topped up the allocation gets its
 * `renewal_recovered` (with the `at_risk` as `previous_renewal`). On a real anvil chain and database, with the loop
 * and its observation writer.
 */
import { afterAll, beforeAll, expect, setDefaultTimeout, test } from "bun:test";
import type { Address } from "viem";
import { testTokenAbi } from "../../src/chain/abis";
import { MULTICALL3_ADDRESS } from "../../src/chain/multicall3";
import type { Db } from "../../src/db/client";
import { createRenewalLoop, type RenewalLoop } from "../../src/renewals/loop";
import { writeObservations } from "../../src/renewals/observations";
import { createRenewalReader } from "../../src/renewals/reader";
import { createTestChain, type TestChain } from "../../testkit/chain";
import { createTestDb } from "../../testkit/db";
import { indexOnce } from "../../testkit/indexer";
import { moduleCall } from "../../testkit/scenario";

setDefaultTimeout(60_000);

const U = 1_000_000n;
let chain: TestChain;
let db: Db;
let token: Address;
let mod: Address;
let sub: bigint;
let loop: RenewalLoop;
let alice: string;

beforeAll(async () => {
  chain = await createTestChain();
  db = await createTestDb();
  token = await chain.deployToken({ symbol: "TUSD", decimals: 6 });
  mod = await chain.createModule("merchant");
  await chain.createPlan("merchant", mod, { planId: 1, token, amount: 10n * U, interval: 3 * 86_400 });
  await chain.fund("alice", token, 15n * U);
  sub = await chain.subscribe("alice", mod, 1);
  await chain.charge(mod, sub);
  alice = chain.address("alice").toLowerCase();
  loop = createRenewalLoop({
    sql: db.sql,
    chainId: chain.chainId,
    reader: createRenewalReader({
      rpcUrl: chain.rpcUrl,
      processor: chain.processor,
      multicall: MULTICALL3_ADDRESS,
      concurrency: 2,
    }),
    isLeader: () => true,
    horizonS: 604_800,
    intervalS: 900,
    pollMs: 100,
    onSaved: (tx, rows, checked) => writeObservations(tx, chain.chainId, rows, checked).then(() => {}),
  });
}, 120_000);
afterAll(async () => {
  await db?.close();
  await chain?.stop();
});

/** Indexes the chain to its head and runs one pass over alice. */
async function pass() {
  await indexOnce(db.sql, chain.rpcUrl, chain.processor, { db, startBlock: chain.startBlock });
  loop.markDirty([alice], 0n);
  await loop.runOnce();
}

const observations = async () =>
  db.sql<{ type: string; renewal: any; previous: any }[]>`
    select type, data->'renewal' as renewal, data->'previous_renewal' as previous from merchant_events
    where type in ('subscription.renewal_at_risk', 'subscription.renewal_recovered') order by seq`;
const outlooks = async () =>
  (await db.sql<{ n: number }[]>`select count(*)::int as n from renewal_outlooks where subscriber = ${alice}`)[0]!.n;

test("pause → resume sends no second at_risk for one due instant; pause → top up → resume sends renewal_recovered", async () => {
  // 5 left after the first charge: the next one (10) is at risk.
  await pass();
  const [risk] = await observations();
  expect(risk).toMatchObject({ type: "subscription.renewal_at_risk", previous: null });
  expect(risk!.renewal).toMatchObject({ outlook: "at_risk", reason: "InsufficientBalance" });

  // Paused: no outlook. Resumed with the same funds: the same at_risk for the same due instant, not sent again.
  await moduleCall(chain, "alice", mod, "pause", [sub]);
  await pass();
  expect(await outlooks()).toBe(0);
  await moduleCall(chain, "alice", mod, "resume", [sub]);
  await pass();
  expect(await outlooks()).toBe(1);
  expect((await observations()).map((o) => o.type)).toEqual(["subscription.renewal_at_risk"]);

  // Paused again, topped up while paused, resumed: recovered, its previous the at_risk that was sent.
  await moduleCall(chain, "alice", mod, "pause", [sub]);
  await pass();
  await chain.send(
    chain.wallet("deployer").writeContract({
      address: token,
      abi: testTokenAbi,
      functionName: "mint",
      args: [chain.address("alice"), 10n * U],
    }),
  );
  await moduleCall(chain, "alice", mod, "resume", [sub]);
  await pass();
  const all = await observations();
  expect(all.map((o) => o.type)).toEqual(["subscription.renewal_at_risk", "subscription.renewal_recovered"]);
  expect(all[1]!.renewal).toMatchObject({ outlook: "will_renew", reason: null });
  expect(all[1]!.previous).toEqual(risk!.renewal);
});
