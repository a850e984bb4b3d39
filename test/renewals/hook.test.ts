/**
 * The renewals indexer hook counts each charge attempt against its outlook once per committed batch
 * (`renewal_predictions_total`): a batch whose transaction fails after the hook ran counts nothing, and its retry
 * counts once.
 */
import { afterAll, beforeAll, describe, expect, setDefaultTimeout, test } from "bun:test";
import type { Address } from "viem";
import { testTokenAbi } from "../../src/chain/abis";
import { publicClientFor } from "../../src/chain/clients";
import { createIndexer } from "../../src/indexer";
import { renewalsHook } from "../../src/renewals/hook";
import { createTestChain, type TestChain } from "../../testkit/chain";
import { morePasses, until } from "../../testkit/cli";
import { failCursorMoves } from "../../testkit/indexer";
import { createTestDb } from "../../testkit/db";

setDefaultTimeout(60_000);

const U = 1_000_000n;
let chain: TestChain;

beforeAll(async () => {
  chain = await createTestChain();
  const token = await chain.deployToken({ symbol: "TUSD", decimals: 6 });
  const mod = await chain.createModule("merchant");
  await chain.createPlan("merchant", mod, { planId: 1, token, amount: 10n * U, interval: 86_400 });
  for (const w of ["alice", "bob"] as const) await chain.fund(w, token, 100n * U);
  const alice = await chain.subscribe("alice", mod, 1);
  const bob = await chain.subscribe("bob", mod, 1);
  await chain.charge(mod, alice); // succeeds
  await chain.send(
    chain.wallet("bob").writeContract({
      address: token as Address,
      abi: testTokenAbi,
      functionName: "approve",
      args: [chain.processor, 0n],
    }),
  );
  await chain.charge(mod, bob); // fails: InsufficientAllowance
}, 120_000);

afterAll(async () => {
  await chain?.stop();
});

describe("renewal_predictions_total", () => {
  test("a batch that fails after the hook ran counts nothing; its retry counts each attempt once", async () => {
    const db = await createTestDb();
    const fault = await failCursorMoves(db.sql);
    const counted = new Map<string, number>();
    const hook = renewalsHook({ markDirty: () => {} }, (predicted, actual) => {
      const k = `${predicted}|${actual}`;
      counted.set(k, (counted.get(k) ?? 0) + 1);
    });
    const indexer = createIndexer({
      sql: db.sql,
      db,
      client: publicClientFor(chain.rpcUrl),
      config: {
        PROCESSOR_ADDRESS: chain.processor,
        START_BLOCK: Number(chain.startBlock),
        CONFIRMATIONS: 0,
        POLL_INTERVAL_MS: 20,
        chainId: chain.chainId,
      },
      tuning: { initialRange: 1000, maxBackoffMs: 50 },
      hooks: [hook],
    });
    try {
      await indexer.start();
      await until("the fault", async () => /injected fault/.test(indexer.status().lastError ?? ""));
      await morePasses(3, indexer); // a few more failed attempts, each after the hook ran
      expect(Object.fromEntries(counted)).toEqual({});
      await fault.disarm();
      await indexer.waitForBlock(await chain.publicClient.getBlockNumber({ cacheTime: 0 }), 30_000);
      const attempts = await db.sql<{ type: string; reason: string | null }[]>`
        select type, reason from activity where type in ('CHARGE', 'FAIL')`;
      expect(attempts.length).toBe(2);
      // No outlook had been stored for these charges: predicted `none`.
      expect(Object.fromEntries(counted)).toEqual({ "none|succeeded": 1, "none|InsufficientAllowance": 1 });
    } finally {
      await indexer.stop();
      await db.close();
    }
  });
});
