import { afterAll, afterEach, beforeAll, beforeEach, describe, expect, setDefaultTimeout, test } from "bun:test";
import { parseEventLogs, type Address, type Hex, type TransactionReceipt } from "viem";
import { subscriptionModuleAbi, subscriptionProcessorAbi, testTokenAbi } from "../../../src/chain/abis";
import { createTestChain, revertOf, type TestChain, type WalletName } from "../../../testkit/chain";

// Starts a real anvil: more than the 5 s default on a busy machine.
setDefaultTimeout(60_000);

const PLAN = 1;
const AMOUNT = 1_000_003n; // 250 bps of it is 25_000.075: the fee rounds down to 25_000
const FEE = 25_000n;
const INTERVAL = 30 * 86_400;
const Reason = { None: 0, InsufficientAllowance: 1, InsufficientBalance: 2, TransferFailed: 3, AllowanceExpired: 4 };

let chain: TestChain;
let token: Address;
let falseToken: Address;
let module: Address;
let snap: Hex;

function processorEvents(receipt: TransactionReceipt) {
  return parseEventLogs({ abi: subscriptionProcessorAbi, logs: receipt.logs });
}

function sub(id: bigint) {
  return chain.publicClient.readContract({
    address: module,
    abi: subscriptionModuleAbi,
    functionName: "getSubscription",
    args: [id],
  });
}

function balance(of: Address, tkn: Address = token) {
  return chain.publicClient.readContract({ address: tkn, abi: testTokenAbi, functionName: "balanceOf", args: [of] });
}

function credit(id: bigint) {
  return chain.publicClient.readContract({ ...chain.processorContract, functionName: "creditOf", args: [module, id] });
}

async function blockTime(receipt: TransactionReceipt) {
  return (await chain.publicClient.getBlock({ blockNumber: receipt.blockNumber })).timestamp;
}

function approve(name: WalletName, amount: bigint, tkn: Address = token) {
  return chain.send(
    chain.wallet(name).writeContract({
      address: tkn,
      abi: testTokenAbi,
      functionName: "approve",
      args: [chain.processor, amount],
    }),
  );
}

function refill(name: WalletName, id: bigint, amount: bigint) {
  return chain.send(
    chain
      .wallet(name)
      .writeContract({ ...chain.processorContract, functionName: "refill", args: [module, id, amount] }),
  );
}

function moduleWrite(name: WalletName, functionName: "pause" | "resume" | "cancel", id: bigint) {
  return chain.send(
    chain.wallet(name).writeContract({ address: module, abi: subscriptionModuleAbi, functionName, args: [id] }),
  );
}

/** Asserts a charge attempt that emitted ChargeFailed(reason) and changed neither schedule nor balances. */
async function expectFailedCharge(id: bigint, reason: number, tkn: Address = token) {
  const alice = chain.address("alice");
  const merchant = chain.address("merchant");
  const before = {
    sub: await sub(id),
    alice: await balance(alice, tkn),
    merchant: await balance(merchant, tkn),
    fees: await balance(chain.feeRecipient, tkn),
  };
  const simulated = await chain.publicClient.simulateContract({
    ...chain.processorContract,
    functionName: "charge",
    args: [module, id],
    account: chain.keeper,
    blockTag: "pending", // "latest" would run at the last block's timestamp, not at a timestamp set for the next one
  });
  expect(simulated.result).toBe(false);
  const receipt = await chain.charge(module, id);
  const events = processorEvents(receipt);
  expect(events).toHaveLength(1);
  expect(events[0]!.eventName).toBe("ChargeFailed");
  expect(events[0]!.args).toEqual({ module, subscriptionId: id, keeper: chain.keeper, reason });
  expect(await sub(id)).toEqual(before.sub);
  expect(await balance(alice, tkn)).toBe(before.alice);
  expect(await balance(merchant, tkn)).toBe(before.merchant);
  expect(await balance(chain.feeRecipient, tkn)).toBe(before.fees);
  return receipt;
}

beforeAll(async () => {
  chain = await createTestChain();
  token = await chain.deployToken();
  falseToken = await chain.deployToken({ name: "False USD", symbol: "FUSD", kind: "false" });
  module = await chain.createModule("merchant");
  await chain.createPlan("merchant", module, { planId: PLAN, token, amount: AMOUNT, interval: INTERVAL });
  await chain.createPlan("merchant", module, { planId: 2, token: falseToken, amount: AMOUNT, interval: INTERVAL });
  await chain.fund("alice", token, 10n * AMOUNT);
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

describe("successful charge", () => {
  test("splits the fee to the wei, records the payment and emits ChargeSucceeded", async () => {
    const alice = chain.address("alice");
    const merchant = chain.address("merchant");
    const id = await chain.subscribe("alice", module, PLAN);
    const aliceBefore = await balance(alice);

    const receipt = await chain.charge(module, id);
    const paidAt = await blockTime(receipt);

    const events = processorEvents(receipt);
    expect(events).toHaveLength(1);
    expect(events[0]!.eventName).toBe("ChargeSucceeded");
    expect(events[0]!.args).toEqual({
      module,
      subscriptionId: id,
      keeper: chain.keeper,
      token,
      amount: AMOUNT,
      fee: FEE,
    });
    expect(await balance(chain.feeRecipient)).toBe(FEE);
    expect(await balance(merchant)).toBe(AMOUNT - FEE);
    expect(await balance(alice)).toBe(aliceBefore - AMOUNT);
    expect(await balance(chain.processor)).toBe(0n);

    const s = await sub(id);
    expect(s.lastPaidAt).toBe(paidAt);
    expect(s.nextChargeAt).toBe(paidAt + BigInt(INTERVAL));
    expect(s.timesExecuted).toBe(1);
    expect(s.totalSpent).toBe(AMOUNT);
  });

  test("gas: a charge stays well under 150k once merchant and fee recipient hold the token", async () => {
    await chain.fund("bob", token, 10n * AMOUNT);
    const first = await chain.subscribe("alice", module, PLAN);
    const second = await chain.subscribe("bob", module, PLAN);
    // The very first payment also pays for two empty token balances (merchant, fee recipient) becoming non-zero.
    expect((await chain.charge(module, first)).gasUsed).toBeLessThan(155_000n);
    expect((await chain.charge(module, second)).gasUsed).toBeLessThan(120_000n);
    await chain.setNextTimestamp((await sub(first)).nextChargeAt);
    expect((await chain.charge(module, first)).gasUsed).toBeLessThan(105_000n);
  });

  test("returns true, and the module owner may charge its own subscription", async () => {
    const id = await chain.subscribe("alice", module, PLAN);
    const simulated = await chain.publicClient.simulateContract({
      ...chain.processorContract,
      functionName: "charge",
      args: [module, id],
      account: chain.address("merchant"),
    });
    expect(simulated.result).toBe(true);
    const receipt = await chain.charge(module, id, "merchant");
    const [event] = parseEventLogs({ abi: subscriptionProcessorAbi, eventName: "ChargeSucceeded", logs: receipt.logs });
    expect(event!.args.keeper).toBe(chain.address("merchant"));
  });

  test("is due exactly at nextChargeAt, not a second before; missed periods are not charged back", async () => {
    const id = await chain.subscribe("alice", module, PLAN);
    await chain.charge(module, id);
    const { nextChargeAt } = await sub(id);

    expect(await revertOf(chain.charge(module, id))).toEqual({ errorName: "NotDue", args: [id, nextChargeAt] });
    const block = await chain.mineAt(nextChargeAt - 1n);
    const early = chain.publicClient.simulateContract({
      ...chain.processorContract,
      functionName: "charge",
      args: [module, id],
      account: chain.keeper,
      blockNumber: block,
    });
    expect(await revertOf(early)).toEqual({ errorName: "NotDue", args: [id, nextChargeAt] });

    await chain.setNextTimestamp(nextChargeAt);
    const onTime = await chain.charge(module, id);
    expect(await blockTime(onTime)).toBe(nextChargeAt);
    expect((await sub(id)).nextChargeAt).toBe(nextChargeAt + BigInt(INTERVAL));

    // Three whole periods later a single charge takes one amount and schedules from now.
    const late = nextChargeAt + 4n * BigInt(INTERVAL);
    await chain.setNextTimestamp(late);
    const receipt = await chain.charge(module, id);
    const [event] = parseEventLogs({ abi: subscriptionProcessorAbi, eventName: "ChargeSucceeded", logs: receipt.logs });
    expect(event!.args.amount).toBe(AMOUNT);
    const s = await sub(id);
    expect(s).toMatchObject({ timesExecuted: 3, lastPaidAt: late, nextChargeAt: late + BigInt(INTERVAL) });
    expect(s.totalSpent).toBe(3n * AMOUNT);
  });
});

describe("charge reverts", () => {
  test("an underfunded charge reverts entirely: no ChargeFailed is recorded and the charge stays due", async () => {
    const id = await chain.subscribe("alice", module, PLAN);
    const request = { ...chain.processorContract, functionName: "charge", args: [module, id] } as const;
    const estimate = await chain.publicClient.estimateContractGas({ ...request, account: chain.keeper });
    for (const gas of [estimate - 2_000n, estimate - 10_000n, estimate - 30_000n, estimate - 50_000n]) {
      const hash = await chain.wallet("keeper").writeContract({ ...request, gas });
      const receipt = await chain.publicClient.waitForTransactionReceipt({ hash });
      expect(receipt.status).toBe("reverted");
      expect(processorEvents(receipt)).toEqual([]);
    }
    expect((await sub(id)).timesExecuted).toBe(0);
    const receipt = await chain.charge(module, id);
    expect(processorEvents(receipt).map((e) => e.eventName)).toEqual(["ChargeSucceeded"]);
  });

  test("NotKeeper for anyone but a keeper or the module owner", async () => {
    const id = await chain.subscribe("alice", module, PLAN);
    const other = await chain.createModule("merchant2");
    for (const caller of ["alice", "bob", "merchant2", "deployer", "keeper2"] as const) {
      expect(await revertOf(chain.charge(module, id, caller))).toEqual({ errorName: "NotKeeper", args: [] });
    }
    expect(other).not.toBe(module);
    await chain.send(
      chain.wallet("deployer").writeContract({
        ...chain.processorContract,
        functionName: "setKeeper",
        args: [chain.keeper, false],
      }),
    );
    expect(await revertOf(chain.charge(module, id))).toEqual({ errorName: "NotKeeper", args: [] });
    const [event] = processorEvents(await chain.charge(module, id, "merchant"));
    expect(event!.eventName).toBe("ChargeSucceeded");
  });

  test("UnknownModule for an address the processor did not create", async () => {
    const err = await revertOf(chain.charge(chain.address("bob"), 1n));
    expect(err.errorName).toBe("UnknownModule");
  });

  test("NotChargeable when paused, cancelled, blocked, executions used up, or unknown", async () => {
    const notChargeable = (id: bigint) => ({ errorName: "NotChargeable", args: [id] });

    const paused = await chain.subscribe("alice", module, PLAN);
    await moduleWrite("alice", "pause", paused);
    expect(await revertOf(chain.charge(module, paused))).toEqual(notChargeable(paused));
    await moduleWrite("alice", "cancel", paused);
    expect(await revertOf(chain.charge(module, paused))).toEqual(notChargeable(paused));

    const limited = await chain.subscribe("alice", module, PLAN, { maxExecutions: 2 });
    await chain.charge(module, limited);
    await chain.setNextTimestamp((await sub(limited)).nextChargeAt);
    await chain.charge(module, limited);
    await chain.mineAt((await sub(limited)).nextChargeAt + 10n);
    expect(await revertOf(chain.charge(module, limited))).toEqual(notChargeable(limited));
    expect((await sub(limited)).timesExecuted).toBe(2);

    await chain.fund("bob", token, 10n * AMOUNT);
    const blocked = await chain.subscribe("bob", module, PLAN);
    await chain.send(
      chain.wallet("merchant").writeContract({
        address: module,
        abi: subscriptionModuleAbi,
        functionName: "blockSubscriber",
        args: [chain.address("bob")],
      }),
    );
    expect(await revertOf(chain.charge(module, blocked))).toEqual(notChargeable(blocked));
    await chain.send(
      chain.wallet("merchant").writeContract({
        address: module,
        abi: subscriptionModuleAbi,
        functionName: "unblockSubscriber",
        args: [chain.address("bob")],
      }),
    );
    expect(processorEvents(await chain.charge(module, blocked))[0]!.eventName).toBe("ChargeSucceeded");

    expect(await revertOf(chain.charge(module, 999n))).toEqual(notChargeable(999n));
  });

  test("a revert records nothing", async () => {
    const id = await chain.subscribe("alice", module, PLAN);
    await chain.charge(module, id);
    const before = await chain.publicClient.getBlockNumber();
    await revertOf(chain.charge(module, id));
    expect(await chain.publicClient.getBlockNumber()).toBe(before);
  });
});

describe("payment failures emit ChargeFailed and leave the schedule unchanged", () => {
  test("AllowanceExpired once block.timestamp > allowanceExpiry (at the expiry it still pays)", async () => {
    const now = await chain.now();
    const expiry = now + 100n;
    const id = await chain.subscribe("alice", module, PLAN, { allowanceExpiry: expiry });
    await chain.setNextTimestamp(expiry);
    expect(processorEvents(await chain.charge(module, id))[0]!.eventName).toBe("ChargeSucceeded");

    const nextChargeAt = (await sub(id)).nextChargeAt;
    await chain.setNextTimestamp(nextChargeAt);
    await expectFailedCharge(id, Reason.AllowanceExpired);

    const receipt = await chain.send(
      chain.wallet("alice").writeContract({
        address: module,
        abi: subscriptionModuleAbi,
        functionName: "setAllowanceExpiry",
        args: [id, 0n],
      }),
    );
    const [updated] = parseEventLogs({ abi: subscriptionModuleAbi, logs: receipt.logs });
    expect(updated!.eventName).toBe("AllowanceExpiryUpdated");
    expect(updated!.args).toEqual({ subscriptionId: id, allowanceExpiry: 0n });
    expect(processorEvents(await chain.charge(module, id))[0]!.eventName).toBe("ChargeSucceeded");
  });

  test("AllowanceExpired is checked before credit, which stays untouched", async () => {
    const now = await chain.now();
    const id = await chain.subscribe("alice", module, PLAN, { allowanceExpiry: now + 5n });
    await refill("alice", id, AMOUNT);
    await chain.setNextTimestamp(now + 6n);
    await expectFailedCharge(id, Reason.AllowanceExpired);
    expect(await credit(id)).toBe(AMOUNT);
  });

  test("InsufficientAllowance when the allowance is one wei short", async () => {
    const id = await chain.subscribe("alice", module, PLAN);
    await approve("alice", AMOUNT - 1n);
    await expectFailedCharge(id, Reason.InsufficientAllowance);
  });

  test("InsufficientBalance when the balance is one wei short", async () => {
    await chain.fund("bob", token, AMOUNT - 1n);
    const id = await chain.subscribe("bob", module, PLAN);
    const before = await sub(id);
    const receipt = await chain.charge(module, id);
    const events = processorEvents(receipt);
    expect(events.map((e) => e.eventName)).toEqual(["ChargeFailed"]);
    expect(events[0]!.args).toEqual({
      module,
      subscriptionId: id,
      keeper: chain.keeper,
      reason: Reason.InsufficientBalance,
    });
    expect(await sub(id)).toEqual(before);
    expect(await balance(chain.address("bob"))).toBe(AMOUNT - 1n);
  });

  test("TransferFailed when transferFrom returns false despite allowance and balance (FalseToken)", async () => {
    await chain.fund("alice", falseToken, 10n * AMOUNT);
    const id = await chain.subscribe("alice", module, 2);
    await expectFailedCharge(id, Reason.TransferFailed, falseToken);
    expect(await balance(chain.address("alice"), falseToken)).toBe(10n * AMOUNT);
  });

  test("a failed attempt can be retried: the subscription stays due", async () => {
    const id = await chain.subscribe("alice", module, PLAN);
    await approve("alice", 0n);
    await expectFailedCharge(id, Reason.InsufficientAllowance);
    await expectFailedCharge(id, Reason.InsufficientAllowance);
    await approve("alice", AMOUNT);
    expect(processorEvents(await chain.charge(module, id))[0]!.eventName).toBe("ChargeSucceeded");
    expect((await sub(id)).timesExecuted).toBe(1);
  });
});

describe("prepaid credit", () => {
  test("refill moves tokens into credit; a charge covered by credit is paid from it, fee split exact", async () => {
    const alice = chain.address("alice");
    const merchant = chain.address("merchant");
    const id = await chain.subscribe("alice", module, PLAN);
    const aliceBefore = await balance(alice);

    const refilled = await refill("alice", id, AMOUNT + 7n);
    expect(processorEvents(refilled).map((e) => [e.eventName, e.args])).toEqual([
      ["CreditRefilled", { module, subscriptionId: id, from: alice, token, amount: AMOUNT + 7n }],
    ]);
    expect(await credit(id)).toBe(AMOUNT + 7n);
    expect(await balance(chain.processor)).toBe(AMOUNT + 7n);
    expect(await balance(alice)).toBe(aliceBefore - AMOUNT - 7n);

    await approve("alice", 0n); // the allowance path would fail: this charge must come from credit
    const receipt = await chain.charge(module, id);
    expect(processorEvents(receipt)[0]!.args).toMatchObject({ amount: AMOUNT, fee: FEE });
    expect(await credit(id)).toBe(7n);
    expect(await balance(chain.processor)).toBe(7n);
    expect(await balance(merchant)).toBe(AMOUNT - FEE);
    expect(await balance(chain.feeRecipient)).toBe(FEE);
    expect(await balance(alice)).toBe(aliceBefore - AMOUNT - 7n);
    expect((await sub(id)).totalSpent).toBe(AMOUNT);
  });

  test("partial credit is never drawn: the allowance pays, or the charge fails with credit intact", async () => {
    const alice = chain.address("alice");
    const id = await chain.subscribe("alice", module, PLAN);
    await refill("alice", id, AMOUNT - 1n);
    const aliceBefore = await balance(alice);

    expect(processorEvents(await chain.charge(module, id))[0]!.eventName).toBe("ChargeSucceeded");
    expect(await credit(id)).toBe(AMOUNT - 1n);
    expect(await balance(alice)).toBe(aliceBefore - AMOUNT);
    expect(await balance(chain.processor)).toBe(AMOUNT - 1n);

    await approve("alice", 0n);
    await chain.setNextTimestamp((await sub(id)).nextChargeAt);
    await chain.charge(module, id).then((r) => {
      expect(processorEvents(r)[0]!.args).toMatchObject({ reason: Reason.InsufficientAllowance });
    });
    expect(await credit(id)).toBe(AMOUNT - 1n);
  });

  test("anyone may refill; only the subscriber withdraws, all of it, also after cancel", async () => {
    const alice = chain.address("alice");
    const bob = chain.address("bob");
    await chain.fund("bob", token, 5n * AMOUNT);
    const id = await chain.subscribe("alice", module, PLAN);
    const refilled = await refill("bob", id, 2n * AMOUNT);
    expect(processorEvents(refilled)[0]!.args).toMatchObject({ from: bob, amount: 2n * AMOUNT });
    await refill("alice", id, 3n);
    expect(await credit(id)).toBe(2n * AMOUNT + 3n);

    const withdraw = (name: WalletName) =>
      chain
        .wallet(name)
        .writeContract({ ...chain.processorContract, functionName: "withdrawCredit", args: [module, id] });
    expect((await revertOf(withdraw("bob"))).errorName).toBe("NotSubscriber");
    expect((await revertOf(withdraw("merchant"))).errorName).toBe("NotSubscriber");

    await moduleWrite("alice", "cancel", id);
    expect(await revertOf(refill("alice", id, 1n))).toEqual({ errorName: "InvalidState", args: [] });

    const aliceBefore = await balance(alice);
    const receipt = await chain.send(withdraw("alice"));
    expect(processorEvents(receipt).map((e) => [e.eventName, e.args])).toEqual([
      ["CreditWithdrawn", { module, subscriptionId: id, to: alice, token, amount: 2n * AMOUNT + 3n }],
    ]);
    expect(await balance(alice)).toBe(aliceBefore + 2n * AMOUNT + 3n);
    expect(await balance(chain.processor)).toBe(0n);
    expect(await credit(id)).toBe(0n);
    expect(await revertOf(withdraw("alice"))).toEqual({ errorName: "InvalidState", args: [] });
  });

  test("refill rejects zero amounts, unknown subscriptions and unknown modules", async () => {
    const id = await chain.subscribe("alice", module, PLAN);
    expect((await revertOf(refill("alice", id, 0n))).errorName).toBe("InvalidState");
    expect((await revertOf(refill("alice", 12345n, 1n))).errorName).toBe("UnknownSubscription");
    const unknownModule = chain
      .wallet("alice")
      .writeContract({ ...chain.processorContract, functionName: "refill", args: [chain.address("bob"), id, 1n] });
    expect((await revertOf(unknownModule)).errorName).toBe("UnknownModule");
  });

  test("credit is kept per subscription", async () => {
    await chain.fund("bob", token, 5n * AMOUNT);
    const a = await chain.subscribe("alice", module, PLAN);
    const b = await chain.subscribe("bob", module, PLAN);
    await refill("alice", a, AMOUNT);
    expect(await credit(a)).toBe(AMOUNT);
    expect(await credit(b)).toBe(0n);
    await chain.charge(module, b);
    expect(await credit(a)).toBe(AMOUNT);
  });
});
