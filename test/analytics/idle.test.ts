/**
 * An expiry announced by an idle poll (the chain quiet, the wall clock past the instant) is a movement too: the
 * churn, its reason, its rollups and its `customer.churned` event are written with it; a later renewal brings the
 * customer back (`recovered`).
 */
import { afterAll, beforeAll, expect, test } from "bun:test";
import type { Db } from "../../src/db/client";
import { eventsHook } from "../../src/events/hook";
import { mrrAnalytics } from "../../src/analytics/hook";
import { createTestDb } from "../../testkit/db";
import { createTestChain, type TestChain } from "../../testkit/chain";
import { indexOnce } from "../../testkit/indexer";

let chain: TestChain;
let db: Db;

beforeAll(async () => {
  chain = await createTestChain();
  db = await createTestDb();
}, 60_000);
afterAll(async () => {
  await db?.close();
  await chain?.stop();
});

test("an idle poll's expiry churns the customer, with its event", async () => {
  const token = await chain.deployToken({ symbol: "USDC", decimals: 6 });
  const module = await chain.createModule("merchant");
  await chain.createPlan("merchant", module, {
    planId: 1,
    token,
    amount: 7_000_000n,
    interval: 86_400,
    gracePeriod: 0,
  });
  await chain.fund("alice", token, 10n ** 12n);
  const id = await chain.subscribe("alice", module, 1);
  const charged = await chain.charge(module, id);
  const paidAt = Number((await chain.publicClient.getBlock({ blockNumber: charged.blockNumber })).timestamp);
  const mrr = mrrAnalytics();
  let clock = 0;
  const events = eventsHook({ derive: mrr.derive, now: () => clock });
  const hooks = [events, mrr.hook];
  await indexOnce(db.sql, chain.rpcUrl, chain.processor, { db, startBlock: chain.startBlock, hooks });
  const [cursor] = await db.sql<{ indexed_block: string; t: string }[]>`
    select indexed_block, extract(epoch from indexed_time)::bigint as t from chains`;
  // The chain stays quiet; the wall clock passes the expiry instant.
  const instant = paidAt + 86_400 + 1;
  clock = instant + 5;
  await events.onIdle!(db.sql, {
    chainId: chain.chainId,
    indexedBlock: BigInt(cursor!.indexed_block),
    indexedTime: Number(cursor!.t),
    head: BigInt(cursor!.indexed_block),
  });
  const moves = await db.sql<{ kind: string; at: string; reason: string; block_number: string; id: string }[]>`
    select kind, at, reason, block_number, id from mrr_movements order by at`;
  expect(moves.map((m) => m.kind)).toEqual(["new", "churn"]);
  expect(moves[1]).toMatchObject({ at: String(instant), reason: "not_charged", block_number: cursor!.indexed_block });
  const [evt] = await db.sql<{ id: string; type: string; data: any }[]>`
    select id, type, data from merchant_events where type = 'customer.churned'`;
  expect(evt!.id).toBe(`evt_${moves[1]!.id.slice(4)}`);
  expect(evt!.data.object).toMatchObject({ kind: "churn", amount: "-" + String((7_000_000n * 2_629_800n) / 86_400n) });
  const [daily] = await db.sql<{ n: string }[]>`select sum(count) as n from mrr_daily where kind = 'churn'`;
  expect(daily!.n).toBe("1");

  // A renewal later: a reactivation within 30 days of an involuntary churn.
  await chain.mineAt(instant + 3_600);
  await chain.charge(module, id);
  await indexOnce(db.sql, chain.rpcUrl, chain.processor, { db, startBlock: chain.startBlock, hooks });
  const [back] = await db.sql<{ kind: string; recovered: boolean }[]>`
    select kind, recovered from mrr_movements order by at desc limit 1`;
  expect(back).toEqual({ kind: "reactivation", recovered: true });
}, 120_000);
