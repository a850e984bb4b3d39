/**
 * The keeper charges one wallet's subscriptions in one token in the order the renewal outlook judged them (renewals.md
 * §2: due instant, then on-chain id as a number), so that against a balance for one, exactly the charge the outlook
 * said is at risk fails. Two wallets with two 10-TUSD subscriptions each and 15 TUSD: carol's two are due at the same
 * instant (the lower id renews); alice's lower id is due 5 s after her higher one, and both were already due when
 * the outlook was judged, so their due instants tie at the evaluated block and the lower id renews too.
 */
import { afterAll, beforeAll, describe, expect, setDefaultTimeout, test } from "bun:test";
import type { Address, Hash } from "viem";
import { testTokenAbi } from "../../src/chain/abis";
import { publicClientFor } from "../../src/chain/clients";
import { createKeeper, type Keeper } from "../../src/keeper";
import type { Service } from "../../src/service";
import { createTestChain, type TestChain, type WalletName } from "../../testkit/chain";
import { until } from "../../testkit/cli";
import { startChainService } from "../../testkit/service";

setDefaultTimeout(60_000);

const U = 1_000_000n;
const INTERVAL = 86_400;
let chain: TestChain;
let service: Service;
let keeper: Keeper | undefined;
let token: Address;
let mod: Address;
const ids: Record<"a1" | "a2" | "c1" | "c2", bigint> = { a1: 0n, a2: 0n, c1: 0n, c2: 0n };

const rpc = async (method: string, params: unknown[] = []) => {
  const res = await fetch(chain.rpcUrl, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify({ jsonrpc: "2.0", id: 1, method, params }),
  });
  const body = (await res.json()) as { result?: unknown; error?: unknown };
  if (body.error) throw new Error(`${method}: ${JSON.stringify(body.error)}`);
  return body.result;
};
const chargeTx = (id: bigint): Promise<Hash> =>
  chain.wallet("keeper").writeContract({
    address: chain.processor,
    abi: chain.processorContract.abi,
    functionName: "charge",
    args: [mod, id],
  } as never);
const balanceOf = (who: WalletName) =>
  chain.publicClient.readContract({
    address: token,
    abi: testTokenAbi,
    functionName: "balanceOf",
    args: [chain.address(who)],
  });

beforeAll(async () => {
  chain = await createTestChain();
  token = await chain.deployToken({ symbol: "TUSD", decimals: 6 });
  mod = await chain.createModule("merchant");
  await chain.createPlan("merchant", mod, { planId: 1, token, amount: 10n * U, interval: INTERVAL });
  await chain.createPlan("merchant", mod, { planId: 2, token, amount: 10n * U, interval: INTERVAL });
  for (const w of ["alice", "carol"] as const) await chain.fund(w, token, 100n * U);
  ids.a1 = await chain.subscribe("alice", mod, 1);
  ids.a2 = await chain.subscribe("alice", mod, 2);
  ids.c1 = await chain.subscribe("carol", mod, 1);
  ids.c2 = await chain.subscribe("carol", mod, 2);
  // First charges: alice's higher id first, her lower id 5 s later; carol's two in one block.
  const t0 = (await chain.now()) + 10n;
  await chain.setNextTimestamp(t0);
  await chain.charge(mod, ids.a2);
  await chain.setNextTimestamp(t0 + 5n);
  await chain.charge(mod, ids.a1);
  await rpc("evm_setAutomine", [false]);
  const hashes = [await chargeTx(ids.c1), await chargeTx(ids.c2)];
  await rpc("evm_mine", [Number(t0 + 10n)]);
  await rpc("evm_setAutomine", [true]);
  for (const hash of hashes) {
    expect((await chain.publicClient.waitForTransactionReceipt({ hash })).status).toBe("success");
  }
  // A balance for one renewal each: 15 TUSD.
  for (const who of ["alice", "carol"] as const) {
    await chain.send(
      chain.wallet(who).writeContract({
        address: token,
        abi: testTokenAbi,
        functionName: "transfer",
        args: [chain.address("deployer"), (await balanceOf(who)) - 15n * U],
      }),
    );
  }
  // The indexer and the renewal outlook, no keeper yet.
  service = await startChainService(chain, {
    RENEWAL_CHECK_INTERVAL_S: "1",
    ROLES: "indexer",
  });
}, 120_000);

afterAll(async () => {
  await keeper?.stop();
  await service?.stop();
  await chain?.stop();
});

describe("keeper order = outlook order", () => {
  test("against a balance for one, the keeper fails exactly the charge the outlook said", async () => {
    // Every renewal due: a block past the last due instant, and outlooks judged on it.
    const block = await chain.mineAt((await chain.now()) + BigInt(INTERVAL) + 60n);
    await service.indexer!.waitForBlock(block, 15_000);
    const all = Object.values(ids).map(String);
    const outlooks = await until("outlooks judged past every due instant", async () => {
      const rows = await service.db.sql<{ id: string; outlook: string; reason: string | null }[]>`
        select subscription_id::text as id, outlook, reason from renewal_outlooks
        where checked_block >= ${block.toString()} and subscription_id = any(${all}::text[]::numeric[])`;
      return rows.length === all.length ? new Map(rows.map((r) => [r.id, r.reason ?? r.outlook])) : null;
    });
    expect(Object.fromEntries(Object.entries(ids).map(([k, id]) => [k, outlooks.get(id.toString())]))).toEqual({
      a1: "will_renew",
      a2: "InsufficientBalance",
      c1: "will_renew",
      c2: "InsufficientBalance",
    });
    keeper = createKeeper({
      sql: service.db.sql,
      client: publicClientFor(chain.rpcUrl),
      wallet: chain.wallet("keeper"),
      config: {
        chainId: chain.chainId,
        PROCESSOR_ADDRESS: chain.processor,
        POLL_INTERVAL_MS: 100,
        retrySchedule: [86_400],
      },
      log: () => {},
    });
    const pass = await keeper.tick();
    expect(pass.sent.length).toBe(4);
    // anvil answers a send before it has mined it: wait for each receipt, then for the index to hold the last one.
    const mined = await Promise.all(
      pass.sent.map((s) => chain.publicClient.waitForTransactionReceipt({ hash: s.hash, pollingInterval: 20 })),
    );
    await service.indexer!.waitForBlock(
      mined.reduce((top, r) => (r.blockNumber > top ? r.blockNumber : top), block),
      15_000,
    );
    const attempts = await service.db.sql<{ id: string; type: string; reason: string | null }[]>`
      select subscription_id::text as id, type, reason from activity
      where type in ('CHARGE', 'FAIL') and block_number > ${block.toString()}`;
    const outcome = new Map(attempts.map((a) => [a.id, a.type === "CHARGE" ? "will_renew" : a.reason]));
    expect(attempts.length).toBe(4);
    expect(Object.fromEntries(Object.entries(ids).map(([k, id]) => [k, outcome.get(id.toString())]))).toEqual({
      a1: "will_renew",
      a2: "InsufficientBalance",
      c1: "will_renew",
      c2: "InsufficientBalance",
    });
  });
});
