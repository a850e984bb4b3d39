/**
 * `chains.catching_up`: every batch short of the head commits it set (the webhook fan-out holds the chain's ranges
 * meanwhile); the batch that reaches the head clears it.
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
  await chain.testClient.mine({ blocks: 200 });
  db = await createTestDb();
}, 120_000);
afterAll(async () => {
  await db?.close();
  await chain?.stop();
});

test(`batches short of the head commit catching_up; the one reaching the head clears it (${testDbKind})`, async () => {
  const head = await chain.publicClient.getBlockNumber({ cacheTime: 0 });
  // Each batch reads what the batch before it committed (it runs after that commit).
  const committed: { indexed: bigint; catchingUp: boolean }[] = [];
  const probe: IndexerHook = {
    name: "probe",
    async onBatch(tx) {
      const [row] = await tx<{ indexed: string | null; catching_up: boolean }[]>`
        select indexed_block::text as indexed, catching_up from chains where chain_id = ${chain.chainId}`;
      if (row?.indexed) committed.push({ indexed: BigInt(row.indexed), catchingUp: row.catching_up });
    },
  };
  await indexTo(db, chain, head, { hooks: [probe], tuning: { initialRange: 8, maxRange: 16 } });
  expect(committed.length).toBeGreaterThan(3);
  // Within the reorg window too: only the head releases the hold.
  expect(committed.some((b) => b.indexed + 64n >= head)).toBe(true);
  expect(committed.every((b) => b.indexed < head && b.catchingUp)).toBe(true);
  const [last] = await db.sql<{ catching_up: boolean; indexed: string }[]>`
    select catching_up, indexed_block::text as indexed from chains where chain_id = ${chain.chainId}`;
  expect(BigInt(last!.indexed)).toBe(head);
  expect(last!.catching_up).toBe(false);
}, 120_000);
