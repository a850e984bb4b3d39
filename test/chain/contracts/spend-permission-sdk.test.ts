import { afterAll, beforeAll, expect, test } from "bun:test";
import { getPermissionStatus } from "@base-org/account/spend-permission/node";
import { getAddress, type Address } from "viem";
import { spendPermissionManagerAbi, testTokenAbi } from "../../../src/chain/abis";
import { currentPeriod, type PeriodSpend, type SpendPermission } from "../../../src/domain/spend-permission";
import { createTestChain, type TestChain } from "../../../testkit/chain";
import {
  TEST_ALLOWANCE,
  TEST_PERIOD,
  deploySpendPermissions,
  type SpendPermissionKit,
} from "../../../testkit/spend-permissions";

// Base's SDK reads the manager at its canonical address on Base Sepolia (84532): anvil runs as that chain, with the
// manager and Multicall3 placed where the SDK expects them.
let chain: TestChain;
let kit: SpendPermissionKit;
let token: Address;
let merchant: Address;
let alice: Address;

beforeAll(async () => {
  chain = await createTestChain({ anvil: { args: ["--chain-id", "84532"] } });
  kit = await deploySpendPermissions(chain);
  token = await chain.deployToken({ name: "USD Coin", symbol: "USDC", decimals: 6 });
  merchant = await kit.createAccount("merchant", { managerOwner: false });
  alice = await kit.createAccount("alice");
  await chain.send(
    chain
      .wallet("deployer")
      .writeContract({ address: token, abi: testTokenAbi, functionName: "mint", args: [alice, 10n ** 12n] }),
  );
});
afterAll(async () => {
  await chain?.stop();
});

/** The SDK's view of `p` at the latest block, beside the project's rule applied to the chain's stored period. */
async function both(p: SpendPermission) {
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
  const at = Number(await chain.now());
  const last = (await chain.publicClient.readContract({
    address: kit.manager,
    abi: spendPermissionManagerAbi,
    functionName: "getLastUpdatedPeriod",
    args: [p],
  })) as PeriodSpend;
  const ours = currentPeriod(p, last.end > 0 ? last : null, at)!;
  return { sdk, ours };
}

test("the SDK's status agrees with the project's period rule on its own contract, through a charge and a rollover", async () => {
  const start = Number(await chain.now());
  const p = kit.permission({ account: alice, spender: merchant, token: getAddress(token), start, salt: 42n });
  await kit.executeAs("merchant", merchant, [kit.managerCall("approveWithSignature", [p, await kit.sign("alice", p)])]);
  for (const step of ["approved", "charged", "rolled over"]) {
    if (step === "charged") await kit.executeAs("merchant", merchant, [kit.managerCall("spend", [p, TEST_ALLOWANCE])]);
    if (step === "rolled over") await chain.mineAt(start + TEST_PERIOD);
    const { sdk, ours } = await both(p);
    expect([step, sdk.currentPeriod.start, sdk.currentPeriod.end, sdk.currentPeriod.spend]).toEqual([
      step,
      ours.start,
      ours.end,
      ours.spend,
    ]);
    expect(sdk.remainingSpend).toBe(p.allowance - ours.spend);
    // The SDK's next period starts one second after the (exclusive) end.
    expect(sdk.nextPeriodStart.getTime() / 1000).toBe(ours.end + 1);
    expect(sdk.isApprovedOnchain).toBe(true);
    expect(sdk.isRevoked).toBe(false);
  }
  await kit.executeAs("alice", alice, [kit.managerCall("revoke", [p])]);
  const { sdk } = await both(p);
  expect([sdk.isRevoked, sdk.isActive, sdk.isApprovedOnchain]).toEqual([true, false, false]);
});
