import { afterAll, afterEach, beforeAll, beforeEach, describe, expect, setDefaultTimeout, test } from "bun:test";
import { parseEventLogs, zeroAddress, type Address, type Hex } from "viem";
import { subscriptionProcessorAbi, testTokenAbi } from "../../../src/chain/abis";
import { deployProtocol } from "../../../src/chain/deploy";
import { createTestChain, revertOf, TEST_FEE_BPS, TEST_FEE_RECIPIENT, type TestChain } from "../../../testkit/chain";

// Starts a real anvil: more than the 5 s default on a busy machine.
setDefaultTimeout(60_000);

let chain: TestChain;
let snap: Hex;

function read<F extends "feeBps" | "feeRecipient" | "owner" | "lastSubscriptionId">(functionName: F) {
  return chain.publicClient.readContract({ ...chain.processorContract, functionName });
}

function isKeeper(address: Address) {
  return chain.publicClient.readContract({ ...chain.processorContract, functionName: "isKeeper", args: [address] });
}

function setFee(caller: "deployer" | "merchant", feeBps: number, recipient: Address) {
  return chain
    .wallet(caller)
    .writeContract({ ...chain.processorContract, functionName: "setFee", args: [feeBps, recipient] });
}

function setKeeper(caller: "deployer" | "keeper", keeper: Address, allowed: boolean) {
  return chain
    .wallet(caller)
    .writeContract({ ...chain.processorContract, functionName: "setKeeper", args: [keeper, allowed] });
}

beforeAll(async () => {
  chain = await createTestChain();
});

afterAll(async () => {
  await chain?.stop();
});

beforeEach(async () => {
  snap = await chain.snapshot();
});

afterEach(async () => {
  await chain.revert(snap);
});

describe("deployment", () => {
  test("constructor sets owner, fee and emits FeeSet in the deploy block; the test keeper is registered", async () => {
    expect(await read("owner")).toBe(chain.address("deployer"));
    expect(await read("feeBps")).toBe(TEST_FEE_BPS);
    expect(await read("feeRecipient")).toBe(TEST_FEE_RECIPIENT);
    expect(await read("lastSubscriptionId")).toBe(0n);
    expect(await isKeeper(chain.keeper)).toBe(true);
    expect(await isKeeper(chain.address("keeper2"))).toBe(false);

    const logs = await chain.publicClient.getContractEvents({
      ...chain.processorContract,
      fromBlock: chain.startBlock,
      toBlock: chain.startBlock,
    });
    expect(logs.map((l) => [l.eventName, l.args])).toEqual([
      ["FeeSet", { feeBps: TEST_FEE_BPS, feeRecipient: TEST_FEE_RECIPIENT }],
    ]);
    const block = await chain.publicClient.getBlock({ blockNumber: chain.startBlock, includeTransactions: true });
    const receipt = await chain.publicClient.getTransactionReceipt({ hash: block.transactions[0]!.hash });
    expect(receipt.contractAddress?.toLowerCase()).toBe(chain.processor.toLowerCase());
  });

  test("the constructor rejects a fee above 10 % or a zero recipient", async () => {
    const deploy = (feeBps: number, feeRecipient: Address) =>
      deployProtocol({
        walletClient: chain.wallet("deployer"),
        publicClient: chain.publicClient,
        feeBps,
        feeRecipient,
      });
    expect((await revertOf(deploy(1001, TEST_FEE_RECIPIENT))).errorName).toBe("InvalidFee");
    expect((await revertOf(deploy(100, zeroAddress))).errorName).toBe("InvalidFee");
    const max = await deploy(1000, TEST_FEE_RECIPIENT);
    expect(
      await chain.publicClient.readContract({
        address: max.processor,
        abi: subscriptionProcessorAbi,
        functionName: "feeBps",
      }),
    ).toBe(1000);
  });
});

describe("setFee", () => {
  test("owner only; feeBps <= 1000; emits FeeSet; the next charge uses the new split", async () => {
    const recipient = chain.address("carol");
    expect(await revertOf(setFee("merchant", 100, recipient))).toEqual({ errorName: "NotOwner", args: [] });
    expect(await revertOf(setFee("deployer", 1001, recipient))).toEqual({ errorName: "InvalidFee", args: [] });
    expect(await revertOf(setFee("deployer", 100, zeroAddress))).toEqual({ errorName: "InvalidFee", args: [] });

    const receipt = await chain.send(setFee("deployer", 1000, recipient));
    expect(
      parseEventLogs({ abi: subscriptionProcessorAbi, logs: receipt.logs }).map((e) => [e.eventName, e.args]),
    ).toEqual([["FeeSet", { feeBps: 1000, feeRecipient: recipient }]]);
    expect(await read("feeBps")).toBe(1000);
    expect(await read("feeRecipient")).toBe(recipient);

    const token = await chain.deployToken();
    const module = await chain.createModule("merchant");
    await chain.createPlan("merchant", module, { planId: 1, token, amount: 999n, interval: 60 });
    await chain.fund("alice", token, 999n);
    const id = await chain.subscribe("alice", module, 1);
    const [charged] = parseEventLogs({
      abi: subscriptionProcessorAbi,
      eventName: "ChargeSucceeded",
      logs: (await chain.charge(module, id)).logs,
    });
    expect(charged!.args).toMatchObject({ amount: 999n, fee: 99n });
    const balanceOf = (a: Address) =>
      chain.publicClient.readContract({ address: token, abi: testTokenAbi, functionName: "balanceOf", args: [a] });
    expect(await balanceOf(recipient)).toBe(99n);
    expect(await balanceOf(chain.address("merchant"))).toBe(900n);
    expect(await balanceOf(TEST_FEE_RECIPIENT)).toBe(0n);

    await chain.send(setFee("deployer", 0, recipient));
    await chain.setNextTimestamp((await chain.now()) + 61n);
    await chain.fund("alice", token, 999n);
    const [free] = parseEventLogs({
      abi: subscriptionProcessorAbi,
      eventName: "ChargeSucceeded",
      logs: (await chain.charge(module, id)).logs,
    });
    expect(free!.args).toMatchObject({ amount: 999n, fee: 0n });
    expect(await balanceOf(chain.address("merchant"))).toBe(1899n);
  });
});

describe("setKeeper", () => {
  test("owner only; emits KeeperSet; allowed keepers may charge, removed ones may not", async () => {
    const keeper2 = chain.address("keeper2");
    expect(await revertOf(setKeeper("keeper", keeper2, true))).toEqual({ errorName: "NotOwner", args: [] });

    const added = await chain.send(setKeeper("deployer", keeper2, true));
    expect(
      parseEventLogs({ abi: subscriptionProcessorAbi, logs: added.logs }).map((e) => [e.eventName, e.args]),
    ).toEqual([["KeeperSet", { keeper: keeper2, allowed: true }]]);
    expect(await isKeeper(keeper2)).toBe(true);

    const token = await chain.deployToken();
    const module = await chain.createModule("merchant");
    await chain.createPlan("merchant", module, { planId: 1, token, amount: 10n, interval: 60 });
    await chain.fund("alice", token, 100n);
    const id = await chain.subscribe("alice", module, 1);
    const receipt = await chain.charge(module, id, "keeper2");
    const [event] = parseEventLogs({ abi: subscriptionProcessorAbi, eventName: "ChargeSucceeded", logs: receipt.logs });
    expect(event!.args.keeper).toBe(keeper2);

    const removed = await chain.send(setKeeper("deployer", keeper2, false));
    expect(parseEventLogs({ abi: subscriptionProcessorAbi, logs: removed.logs })[0]!.args).toEqual({
      keeper: keeper2,
      allowed: false,
    });
    expect(await isKeeper(keeper2)).toBe(false);
    await chain.setNextTimestamp((await chain.now()) + 61n);
    expect((await revertOf(chain.charge(module, id, "keeper2"))).errorName).toBe("NotKeeper");
  });
});
