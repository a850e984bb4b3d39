import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { getAddress, type Address } from "viem";
import { getLogs } from "../../src/chain/rpc";
import { SPEND_PERMISSION_MANAGER_ADDRESS } from "../../src/domain/spend-permission";
import {
  decodeSpendPermissionLog,
  parseSpenders,
  spendPermissionFilters,
  type SpenderSet,
} from "../../src/indexer/spend-permissions";
import { testTokenAbi } from "../../src/chain/abis";
import { createTestChain, type TestChain } from "../../testkit/chain";
import { TEST_ALLOWANCE, deploySpendPermissions, type SpendPermissionKit } from "../../testkit/spend-permissions";

describe("parseSpenders", () => {
  test("* is every spender; a list is lowercased and deduplicated", () => {
    expect(parseSpenders(" * ")).toBe("*");
    const set = parseSpenders(
      "0xAbC0000000000000000000000000000000000001, 0xabc0000000000000000000000000000000000001,",
    );
    expect(set).toEqual(new Set(["0xabc0000000000000000000000000000000000001"]));
  });
});

describe("the manager's logs of a range, queried and decoded for the configured spenders", () => {
  let chain: TestChain;
  let kit: SpendPermissionKit;
  let token: Address;
  let merchant: Address;
  let other: Address;
  let alice: Address;
  let hashes: { ours: string; theirs: string };
  let from: bigint;
  let to: bigint;

  beforeAll(async () => {
    chain = await createTestChain();
    kit = await deploySpendPermissions(chain);
    token = await chain.deployToken();
    merchant = await kit.createAccount("merchant", { managerOwner: false });
    other = await kit.createAccount("merchant2", { managerOwner: false });
    alice = await kit.createAccount("alice");
    await chain.send(
      chain
        .wallet("deployer")
        .writeContract({ address: token, abi: testTokenAbi, functionName: "mint", args: [alice, 10n ** 12n] }),
    );
    from = (await chain.publicClient.getBlockNumber()) + 1n;
    const start = Number(await chain.now());
    const ours = kit.permission({ account: alice, spender: merchant, token, start, salt: 1n, extraData: "0xabcdef" });
    const theirs = kit.permission({ account: alice, spender: other, token, start, salt: 2n });
    for (const [owner, spender, p] of [
      ["merchant", merchant, ours],
      ["merchant2", other, theirs],
    ] as const) {
      await kit.executeAs(owner, spender, [
        kit.managerCall("approveWithSignature", [p, await kit.sign("alice", p)]),
        kit.managerCall("spend", [p, TEST_ALLOWANCE]),
      ]);
    }
    await kit.executeAs("alice", alice, [kit.managerCall("revoke", [ours]), kit.managerCall("revoke", [theirs])]);
    to = await chain.publicClient.getBlockNumber();
    hashes = { ours: kit.hash(ours), theirs: kit.hash(theirs) };
  });
  afterAll(async () => {
    await chain?.stop();
  });

  const indexed = async (spenders: SpenderSet) => {
    const logs = [];
    for (const filter of spendPermissionFilters(SPEND_PERMISSION_MANAGER_ADDRESS, spenders)) {
      logs.push(...(await getLogs(chain.publicClient, filter, from, to)));
    }
    return logs
      .map((l) => decodeSpendPermissionLog(l, SPEND_PERMISSION_MANAGER_ADDRESS, spenders))
      .filter((e) => e !== null)
      .sort((a, b) => Number(a.blockNumber - b.blockNumber) || a.logIndex - b.logIndex);
  };

  test("a configured spender: its Approved, Used and Revoked only, with flat arguments", async () => {
    const events = await indexed(parseSpenders(merchant));
    expect(events.map((e) => [e.name, e.args.hash])).toEqual([
      ["SpendPermissionApproved", hashes.ours],
      ["SpendPermissionUsed", hashes.ours],
      ["SpendPermissionRevoked", hashes.ours],
    ]);
    const [approved, used] = events;
    expect(approved!.subscriptionId).toBe(BigInt(hashes.ours).toString());
    expect(approved!.address).toBe(SPEND_PERMISSION_MANAGER_ADDRESS.toLowerCase());
    expect(approved!.args).toMatchObject({
      account: alice.toLowerCase(),
      spender: merchant.toLowerCase(),
      token: token.toLowerCase(),
      allowance: TEST_ALLOWANCE.toString(),
      salt: "1",
      extraData: "0xabcdef",
      end: 281474976710655,
    });
    expect(used!.args).toMatchObject({ value: TEST_ALLOWANCE.toString(), spender: merchant.toLowerCase() });
    expect((used!.args.periodEnd as number) - (used!.args.periodStart as number)).toBe(2_592_000);
    expect(typeof used!.blockTime).toBe("number"); // anvil returns blockTimestamp in logs
  });

  test("the Used query asks the node for the configured spenders only; `*` takes every spender", async () => {
    const usedFilter = spendPermissionFilters(SPEND_PERMISSION_MANAGER_ADDRESS, parseSpenders(merchant))[1]!;
    const raw = await getLogs(chain.publicClient, usedFilter, from, to);
    expect(raw).toHaveLength(1);
    const all = await indexed("*");
    expect(
      all.filter((e) => e.name === "SpendPermissionUsed").map((e) => getAddress(e.args.spender as string)),
    ).toEqual([merchant, other]);
    expect(all).toHaveLength(6);
    expect(await indexed(parseSpenders("0x000000000000000000000000000000000000dead"))).toEqual([]);
  });
});
