/**
 * Spend permissions scenario 17 at the record level: Base's SDK `getPermissionStatus` and the API's record of the
 * same permission agree at the same block — `isActive` = `is_subscribed`, `remainingSpend` = `remaining_in_period`,
 * `currentPeriod.start` = `current_period_start`, `nextPeriodStart` = `current_period_end` + 1 s — through an
 * approval, a charge, a rollover and a revoke. Anvil runs as Base Sepolia (84532), with the manager and Multicall3
 * where the SDK reads them.
 */
import { afterAll, beforeAll, expect, test } from "bun:test";
import { getPermissionStatus } from "@base-org/account/spend-permission/node";
import { getAddress, type Address } from "viem";
import { testTokenAbi } from "../../../src/chain/abis";
import { createChainRegistry } from "../../../src/chain/clients";
import type { SpendPermissionSource } from "../../../src/common/config";
import type { Db } from "../../../src/db/client";
import { createNotifier } from "../../../src/db/notify";
import type { SpendPermission } from "../../../src/domain/spend-permission";
import { createApp } from "../../../src/http/app";
import { request, testConfig } from "../../../testkit/app";
import { createTestChain, type TestChain } from "../../../testkit/chain";
import { until } from "../../../testkit/cli";
import { createTestDb } from "../../../testkit/db";
import { indexTo } from "../../../testkit/indexer";
import {
  TEST_ALLOWANCE,
  TEST_PERIOD,
  deploySpendPermissions,
  type SpendPermissionKit,
} from "../../../testkit/spend-permissions";

let chain: TestChain;
let kit: SpendPermissionKit;
let db: Db;
let app: ReturnType<typeof createApp>;
let source: SpendPermissionSource;
let token: Address;
let merchant: Address;
let alice: Address;

beforeAll(async () => {
  chain = await createTestChain({ anvil: { args: ["--chain-id", "84532"] } });
  kit = await deploySpendPermissions(chain);
  db = await createTestDb();
  token = await chain.deployToken({ name: "USD Coin", symbol: "USDC", decimals: 6 });
  merchant = await kit.createAccount("merchant", { managerOwner: false });
  alice = await kit.createAccount("alice");
  await chain.send(
    chain
      .wallet("deployer")
      .writeContract({ address: token, abi: testTokenAbi, functionName: "mint", args: [alice, 10n ** 12n] }),
  );
  source = kit.source([merchant]);
  const config = testConfig({
    CHAIN_ID: String(chain.chainId),
    RPC_URL: chain.rpcUrl,
    PROCESSOR_ADDRESS: chain.processor,
    SPEND_PERMISSION_MANAGER: kit.manager,
    SPEND_PERMISSION_SPENDERS: merchant,
  });
  app = createApp({ sql: db.sql, config, chains: await createChainRegistry(config), notifier: createNotifier(db) });
}, 60_000);

afterAll(async () => {
  await db?.close();
  await chain?.stop();
});

/** The SDK's status and the API's record of `p` once the index has reached the chain's latest block. */
async function both(p: SpendPermission) {
  const block = await chain.publicClient.getBlockNumber();
  await indexTo(db, chain, block, { spendPermissions: source });
  const record = await until("the record at the latest block", async () => {
    const res = await request(app, `/v0/subscriptions/${merchant}/${kit.hash(p)}?chain_id=${chain.chainId}`);
    return res.status === 200 && res.headers.get("x-indexed-block") === String(block) ? res.body : null;
  });
  const sdk = await getPermissionStatus(
    {
      chainId: chain.chainId,
      permissionHash: kit.hash(p),
      signature: "0x",
      createdAt: 0,
      permission: { ...p, allowance: p.allowance.toString(), salt: p.salt.toString() },
    } as never,
    { rpcUrl: chain.rpcUrl },
  );
  expect(await chain.publicClient.getBlockNumber()).toBe(block);
  return { sdk, sp: record.spend_permission };
}

test("scenario 17: the SDK's getPermissionStatus and the record agree through approval, charge, rollover and revoke", async () => {
  const start = Number(await chain.now()) + 1;
  const p = kit.permission({ account: alice, spender: merchant, token: getAddress(token), start, salt: 17n });
  await chain.setNextTimestamp(start);
  await kit.executeAs("merchant", merchant, [kit.managerCall("approveWithSignature", [p, await kit.sign("alice", p)])]);
  const seen: string[] = [];
  for (const step of ["approved", "charged", "rolled over", "charged again", "revoked"]) {
    if (step === "charged") await kit.executeAs("merchant", merchant, [kit.managerCall("spend", [p, TEST_ALLOWANCE])]);
    // Inside the second period (not at its first second: the API's clock is the wall clock until a block passes it).
    if (step === "rolled over") await chain.mineAt(start + TEST_PERIOD + 100);
    if (step === "charged again") await kit.executeAs("merchant", merchant, [kit.managerCall("spend", [p, 1_000n])]);
    if (step === "revoked") await kit.executeAs("alice", alice, [kit.managerCall("revoke", [p])]);
    const { sdk, sp } = await both(p);
    expect({
      step,
      isActive: sdk.isActive,
      remainingSpend: sdk.remainingSpend.toString(),
      currentPeriodStart: new Date(Number(sdk.currentPeriod.start) * 1000).toISOString(),
      nextPeriodStart: sdk.nextPeriodStart.getTime(),
    }).toEqual({
      step,
      isActive: sp.is_subscribed,
      remainingSpend: sp.remaining_in_period,
      currentPeriodStart: sp.current_period_start,
      nextPeriodStart: Date.parse(sp.current_period_end) + 1000,
    });
    seen.push(`${sp.is_subscribed}:${sp.remaining_in_period}`);
  }
  // The steps did move the values compared.
  expect(seen).toEqual([
    `true:${TEST_ALLOWANCE}`,
    "true:0",
    `true:${TEST_ALLOWANCE}`,
    `true:${TEST_ALLOWANCE - 1_000n}`,
    `false:${TEST_ALLOWANCE - 1_000n}`,
  ]);
});
