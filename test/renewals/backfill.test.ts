/**
 * No renewal pass runs while the index is backfilling (more than BACKFILL_LAG_BLOCKS behind the head the indexer
 * saw, amid a catch-up of several batches, or an initial backfill's indexes not built yet): its wallets wait, and the
 * first pass once the index is near the head judges them.
 */
import { afterAll, beforeAll, expect, setDefaultTimeout, test } from "bun:test";
import { MULTICALL3_ADDRESS } from "../../src/chain/multicall3";
import { CATCH_UP_HOLD_S } from "../../src/db/catch-up";
import { BACKFILL_LAG_BLOCKS, createRenewalLoop } from "../../src/renewals/loop";
import { createRenewalReader } from "../../src/renewals/reader";
import type { Db } from "../../src/db/client";
import { createTestChain, type TestChain } from "../../testkit/chain";
import { createTestDb } from "../../testkit/db";
import { indexOnce } from "../../testkit/indexer";

setDefaultTimeout(60_000);

const U = 1_000_000n;
let chain: TestChain;
let db: Db;

beforeAll(async () => {
  chain = await createTestChain();
  db = await createTestDb();
  const token = await chain.deployToken({ symbol: "TUSD", decimals: 6 });
  const mod = await chain.createModule("merchant");
  await chain.createPlan("merchant", mod, { planId: 1, token, amount: 10n * U, interval: 86_400 });
  await chain.fund("alice", token, 100n * U);
  const alice = await chain.subscribe("alice", mod, 1);
  await chain.charge(mod, alice);
  await indexOnce(db.sql, chain.rpcUrl, chain.processor, { db, startBlock: chain.startBlock });
}, 120_000);

afterAll(async () => {
  await db?.close();
  await chain?.stop();
});

test("a pass waits while the index is more than BACKFILL_LAG_BLOCKS behind the head, catching up or its indexes are deferred, then judges its wallets", async () => {
  const [{ indexed }] = await db.sql<{ indexed: string }[]>`select indexed_block::text as indexed from chains`;
  const setHead = (lag: bigint) => db.sql`update chains set head_block = ${(BigInt(indexed) + lag).toString()}`;
  const passes: { evaluated: number }[] = [];
  const loop = createRenewalLoop({
    sql: db.sql,
    chainId: chain.chainId,
    reader: createRenewalReader({
      rpcUrl: chain.rpcUrl,
      processor: chain.processor,
      multicall: MULTICALL3_ADDRESS,
      concurrency: 1,
    }),
    isLeader: () => true,
    horizonS: 30 * 86_400,
    intervalS: 900,
    pollMs: 100,
    onPass: (r) => passes.push(r),
  });
  const outlooks = async () => (await db.sql`select 1 from renewal_outlooks`).length;
  const alice = chain.address("alice").toLowerCase();
  loop.markDirty([alice], 0n);

  await setHead(BACKFILL_LAG_BLOCKS + 1n);
  expect(await loop.runOnce()).toBe(false);
  expect(passes).toEqual([]);
  expect(await outlooks()).toBe(0);

  // Near the head, but an initial backfill's secondary indexes are not built yet: still backfilling.
  await setHead(BACKFILL_LAG_BLOCKS);
  await db.sql`insert into deferred_indexes (name, definition) values ('activity_subscription_idx', 'not used')`;
  expect(await loop.runOnce()).toBe(false);
  expect(passes).toEqual([]);
  await db.sql`delete from deferred_indexes`;

  // Amid a catch-up of several batches (the last batch stopped short of its head): still backfilling.
  await db.sql`update chains set catching_up = true, updated_at = now()`;
  expect(await loop.runOnce()).toBe(false);
  expect(passes).toEqual([]);

  // A catch-up whose cursor stopped moving CATCH_UP_HOLD_S ago no longer holds the passes.
  await db.sql`update chains set updated_at = now() - ${CATCH_UP_HOLD_S + 1} * interval '1 second'`;
  await loop.runOnce();
  expect(passes.map((p) => p.evaluated)).toEqual([1]);
  expect(await outlooks()).toBe(1);
});
