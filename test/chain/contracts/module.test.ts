import { afterAll, afterEach, beforeAll, beforeEach, describe, expect, setDefaultTimeout, test } from "bun:test";
import { parseEventLogs, zeroAddress, type Address, type Hex, type TransactionReceipt } from "viem";
import { subscriptionModuleAbi, subscriptionProcessorAbi } from "../../../src/chain/abis";
import { createTestChain, revertOf, type TestChain, type WalletName } from "../../../testkit/chain";

// Starts a real anvil: more than the 5 s default on a busy machine.
setDefaultTimeout(60_000);

const PLAN = 7;
const AMOUNT = 5_000_000n;
const INTERVAL = 3_600;
const GRACE = 600;

let chain: TestChain;
let token: Address;
let module: Address;
let snap: Hex;

function moduleEvents(receipt: TransactionReceipt) {
  return parseEventLogs({ abi: subscriptionModuleAbi, logs: receipt.logs }).map((e) => [e.eventName, e.args]);
}

function sub(id: bigint, at: Address = module) {
  return chain.publicClient.readContract({
    address: at,
    abi: subscriptionModuleAbi,
    functionName: "getSubscription",
    args: [id],
  });
}

function subscriptionOf(name: WalletName, planId = PLAN) {
  return chain.publicClient.readContract({
    address: module,
    abi: subscriptionModuleAbi,
    functionName: "subscriptionOf",
    args: [chain.address(name), planId],
  });
}

/** Sends a module transaction as `name`; returns the pending hash (await via chain.send or revertOf). */
function act(
  name: WalletName,
  functionName: "pause" | "resume" | "cancel",
  id: bigint,
  at: Address = module,
): Promise<Hex> {
  return chain.wallet(name).writeContract({ address: at, abi: subscriptionModuleAbi, functionName, args: [id] });
}

function setBlocked(name: WalletName, who: WalletName, blocked: boolean) {
  return chain.wallet(name).writeContract({
    address: module,
    abi: subscriptionModuleAbi,
    functionName: blocked ? "blockSubscriber" : "unblockSubscriber",
    args: [chain.address(who)],
  });
}

function createPlan(name: WalletName, planId: number, tkn: Address, amount: bigint, interval: number, grace = 0) {
  return chain.wallet(name).writeContract({
    address: module,
    abi: subscriptionModuleAbi,
    functionName: "createPlan",
    args: [planId, tkn, amount, interval, grace],
  });
}

const err = (errorName: string, args: unknown[] = []) => ({ errorName, args });

beforeAll(async () => {
  chain = await createTestChain();
  token = await chain.deployToken();
  module = await chain.createModule("merchant");
  await chain.createPlan("merchant", module, {
    planId: PLAN,
    token,
    amount: AMOUNT,
    interval: INTERVAL,
    gracePeriod: GRACE,
  });
  for (const name of ["alice", "bob", "carol"] as const) await chain.fund(name, token, 100n * AMOUNT);
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

describe("modules and plans", () => {
  test("createModule makes the caller the owner and registers the module with its processor", async () => {
    const receipt = await chain.send(
      chain.wallet("merchant2").writeContract({ ...chain.processorContract, functionName: "createModule" }),
    );
    const [created] = parseEventLogs({ abi: subscriptionProcessorAbi, eventName: "ModuleCreated", logs: receipt.logs });
    const address = created!.args.module;
    expect(created!.args.merchant).toBe(chain.address("merchant2"));
    const read = (functionName: "owner" | "processor") =>
      chain.publicClient.readContract({ address, abi: subscriptionModuleAbi, functionName });
    expect(await read("owner")).toBe(chain.address("merchant2"));
    expect(await read("processor")).toBe(chain.processor);
    const isModule = (a: Address) =>
      chain.publicClient.readContract({ ...chain.processorContract, functionName: "isModule", args: [a] });
    expect(await isModule(address)).toBe(true);
    expect(await isModule(chain.address("merchant2"))).toBe(false);
  });

  test("createPlan stores the plan and emits PlanCreated; plans are immutable", async () => {
    const receipt = await chain.send(createPlan("merchant", 0, token, 10n, 60, 5));
    expect(moduleEvents(receipt)).toEqual([
      ["PlanCreated", { planId: 0, token, amount: 10n, interval: 60, gracePeriod: 5 }],
    ]);
    const plan = await chain.publicClient.readContract({
      address: module,
      abi: subscriptionModuleAbi,
      functionName: "getPlan",
      args: [0],
    });
    expect(plan).toEqual({ token, amount: 10n, interval: 60, gracePeriod: 5, exists: true });
    expect(await revertOf(createPlan("merchant", 0, token, 11n, 60))).toEqual(err("PlanExists"));
    expect(await revertOf(createPlan("merchant", PLAN, token, 11n, 60))).toEqual(err("PlanExists"));
  });

  test("InvalidPlan for a zero amount, a zero interval or the zero token; NotOwner for others", async () => {
    expect(await revertOf(createPlan("merchant", 1, token, 0n, 60))).toEqual(err("InvalidPlan"));
    expect(await revertOf(createPlan("merchant", 1, token, 1n, 0))).toEqual(err("InvalidPlan"));
    expect(await revertOf(createPlan("merchant", 1, zeroAddress, 1n, 60))).toEqual(err("InvalidPlan"));
    expect(await revertOf(createPlan("merchant2", 1, token, 1n, 60))).toEqual(err("NotOwner"));
    expect(await revertOf(createPlan("alice", 1, token, 1n, 60))).toEqual(err("NotOwner"));
  });

  test("module-internal entry points only answer their processor", async () => {
    const record = chain.wallet("merchant").writeContract({
      address: module,
      abi: subscriptionModuleAbi,
      functionName: "recordPayment",
      args: [1n, 1n],
    });
    expect(await revertOf(record)).toEqual(err("NotProcessor"));
    const allocate = chain
      .wallet("merchant")
      .writeContract({ ...chain.processorContract, functionName: "allocateSubscriptionId" });
    expect(await revertOf(allocate)).toEqual(err("UnknownModule"));
    const settle = chain.wallet("keeper").writeContract({
      ...chain.processorContract,
      functionName: "settle",
      args: [module, 1n, token, chain.address("alice"), chain.address("keeper"), 1n, 0n],
    });
    expect(await revertOf(settle)).toEqual(err("NotSelf"));
  });
});

describe("subscribe", () => {
  test("creates a PENDING subscription due at once and emits SubscriptionCreated", async () => {
    const receipt = await chain.send(
      chain.wallet("alice").writeContract({
        address: module,
        abi: subscriptionModuleAbi,
        functionName: "subscribe",
        args: [PLAN, 12, 1_900_000_000n],
      }),
    );
    const events = parseEventLogs({ abi: subscriptionModuleAbi, eventName: "SubscriptionCreated", logs: receipt.logs });
    expect(events).toHaveLength(1);
    const id = events[0]!.args.subscriptionId;
    expect(events[0]!.args).toEqual({
      subscriptionId: id,
      subscriber: chain.address("alice"),
      planId: PLAN,
      maxExecutions: 12,
      allowanceExpiry: 1_900_000_000n,
    });
    const ts = (await chain.publicClient.getBlock({ blockNumber: receipt.blockNumber })).timestamp;
    expect(await sub(id)).toEqual({
      subscriber: chain.address("alice"),
      planId: PLAN,
      maxExecutions: 12,
      timesExecuted: 0,
      createdAt: ts,
      lastPaidAt: 0n,
      nextChargeAt: ts,
      allowanceExpiry: 1_900_000_000n,
      totalSpent: 0n,
      paused: false,
      cancelled: false,
    });
    expect(await subscriptionOf("alice")).toBe(id);
    expect(await subscriptionOf("bob")).toBe(0n);
  });

  test("UnknownPlan, AlreadySubscribed", async () => {
    const subscribe = (name: WalletName, planId: number) =>
      chain.wallet(name).writeContract({
        address: module,
        abi: subscriptionModuleAbi,
        functionName: "subscribe",
        args: [planId, 0, 0n],
      });
    expect(await revertOf(subscribe("alice", 99))).toEqual(err("UnknownPlan"));
    await chain.subscribe("alice", module, PLAN);
    expect(await revertOf(subscribe("alice", PLAN))).toEqual(err("AlreadySubscribed"));
    await chain.send(act("alice", "pause", await subscriptionOf("alice")));
    expect(await revertOf(subscribe("alice", PLAN))).toEqual(err("AlreadySubscribed"));
  });

  test("ids come from one processor counter: unique and sequential across modules of two merchants", async () => {
    const other = await chain.createModule("merchant2");
    await chain.createPlan("merchant2", other, { planId: PLAN, token, amount: AMOUNT, interval: INTERVAL });
    const last = await chain.publicClient.readContract({
      ...chain.processorContract,
      functionName: "lastSubscriptionId",
    });
    const ids = [
      await chain.subscribe("alice", module, PLAN),
      await chain.subscribe("alice", other, PLAN),
      await chain.subscribe("bob", other, PLAN),
      await chain.subscribe("bob", module, PLAN),
    ];
    expect(ids).toEqual([last + 1n, last + 2n, last + 3n, last + 4n]);
    expect((await sub(ids[1]!, other)).subscriber).toBe(chain.address("alice"));
    expect((await sub(ids[1]!, module)).subscriber).toBe(zeroAddress); // the id lives on the other module only
  });

  test("the very first id on a fresh processor is 1", async () => {
    const fresh = await createTestChain();
    try {
      const tkn = await fresh.deployToken();
      const m = await fresh.createModule("merchant");
      await fresh.createPlan("merchant", m, { planId: 1, token: tkn, amount: 1n, interval: 1 });
      expect(await fresh.subscribe("alice", m, 1)).toBe(1n);
      expect(await fresh.subscribe("bob", m, 1)).toBe(2n);
    } finally {
      await fresh.stop();
    }
  });
});

describe("pause, resume, cancel", () => {
  test("subscriber or owner may pause and resume; nextChargeAt is kept", async () => {
    const id = await chain.subscribe("alice", module, PLAN);
    await chain.charge(module, id);
    const { nextChargeAt } = await sub(id);

    expect(moduleEvents(await chain.send(act("alice", "pause", id)))).toEqual([
      ["SubscriptionPaused", { subscriptionId: id, by: chain.address("alice") }],
    ]);
    expect(await sub(id)).toMatchObject({ paused: true, nextChargeAt });
    expect(moduleEvents(await chain.send(act("merchant", "resume", id)))).toEqual([
      ["SubscriptionResumed", { subscriptionId: id, by: chain.address("merchant") }],
    ]);
    expect(await sub(id)).toMatchObject({ paused: false, nextChargeAt });
    expect(moduleEvents(await chain.send(act("merchant", "pause", id)))).toEqual([
      ["SubscriptionPaused", { subscriptionId: id, by: chain.address("merchant") }],
    ]);
    await chain.send(act("alice", "resume", id));
    expect(await sub(id)).toMatchObject({ paused: false, nextChargeAt });
    expect(await revertOf(chain.charge(module, id))).toEqual(err("NotDue", [id, nextChargeAt]));
  });

  test("InvalidState for pausing a paused or resuming an active one; others may not touch it", async () => {
    const id = await chain.subscribe("alice", module, PLAN);
    expect(await revertOf(act("alice", "resume", id))).toEqual(err("InvalidState"));
    await chain.send(act("alice", "pause", id));
    expect(await revertOf(act("alice", "pause", id))).toEqual(err("InvalidState"));
    expect(await revertOf(act("merchant", "pause", id))).toEqual(err("InvalidState"));
    expect(await revertOf(act("bob", "resume", id))).toEqual(err("NotSubscriberOrOwner"));
    expect(await revertOf(act("merchant2", "resume", id))).toEqual(err("NotSubscriberOrOwner"));
    expect(await revertOf(act("alice", "pause", 4242n))).toEqual(err("UnknownSubscription"));
  });

  test("resume after nextChargeAt has passed: due at once", async () => {
    const id = await chain.subscribe("alice", module, PLAN);
    await chain.charge(module, id);
    const { nextChargeAt } = await sub(id);
    await chain.send(act("alice", "pause", id));
    await chain.mineAt(nextChargeAt + 5n * BigInt(INTERVAL));
    await chain.send(act("alice", "resume", id));
    expect((await sub(id)).nextChargeAt).toBe(nextChargeAt);
    const receipt = await chain.charge(module, id);
    const [event] = parseEventLogs({ abi: subscriptionProcessorAbi, logs: receipt.logs });
    expect(event!.eventName).toBe("ChargeSucceeded");
    expect((await sub(id)).timesExecuted).toBe(2);
  });

  test("cancel: subscriber only, allowed while paused, final; the wallet may subscribe again with a new id", async () => {
    const id = await chain.subscribe("alice", module, PLAN);
    await chain.send(act("alice", "pause", id));
    expect(await revertOf(act("merchant", "cancel", id))).toEqual(err("NotSubscriber"));
    expect(await revertOf(act("bob", "cancel", id))).toEqual(err("NotSubscriber"));
    expect(moduleEvents(await chain.send(act("alice", "cancel", id)))).toEqual([
      ["SubscriptionCancelled", { subscriptionId: id, by: chain.address("alice") }],
    ]);
    expect(await sub(id)).toMatchObject({ cancelled: true });
    expect(await subscriptionOf("alice")).toBe(0n);

    expect(await revertOf(act("alice", "cancel", id))).toEqual(err("InvalidState"));
    expect(await revertOf(act("alice", "resume", id))).toEqual(err("InvalidState"));
    expect(await revertOf(act("merchant", "resume", id))).toEqual(err("InvalidState"));
    const setExpiry = chain.wallet("alice").writeContract({
      address: module,
      abi: subscriptionModuleAbi,
      functionName: "setAllowanceExpiry",
      args: [id, 5n],
    });
    expect(await revertOf(setExpiry)).toEqual(err("InvalidState"));

    const again = await chain.subscribe("alice", module, PLAN);
    expect(again).toBeGreaterThan(id);
    expect(await subscriptionOf("alice")).toBe(again);
    expect(await sub(id)).toMatchObject({ cancelled: true, subscriber: chain.address("alice") });
  });

  test("cancel an active one; pausing a cancelled one is InvalidState", async () => {
    const id = await chain.subscribe("bob", module, PLAN);
    await chain.charge(module, id);
    await chain.send(act("bob", "cancel", id));
    expect(await revertOf(act("bob", "pause", id))).toEqual(err("InvalidState"));
    expect(await revertOf(act("merchant", "pause", id))).toEqual(err("InvalidState"));
  });

  test("setAllowanceExpiry: subscriber only, a no-op is InvalidState", async () => {
    const id = await chain.subscribe("alice", module, PLAN, { allowanceExpiry: 100n });
    const setExpiry = (name: WalletName, value: bigint) =>
      chain.wallet(name).writeContract({
        address: module,
        abi: subscriptionModuleAbi,
        functionName: "setAllowanceExpiry",
        args: [id, value],
      });
    expect(await revertOf(setExpiry("merchant", 200n))).toEqual(err("NotSubscriber"));
    expect(await revertOf(setExpiry("alice", 100n))).toEqual(err("InvalidState"));
    expect(moduleEvents(await chain.send(setExpiry("alice", 200n)))).toEqual([
      ["AllowanceExpiryUpdated", { subscriptionId: id, allowanceExpiry: 200n }],
    ]);
    expect((await sub(id)).allowanceExpiry).toBe(200n);
  });
});

describe("block list", () => {
  test("block and unblock: owner only, events, subscribe reverts Blocked, no-ops are InvalidState", async () => {
    const id = await chain.subscribe("bob", module, PLAN);
    expect(await revertOf(setBlocked("alice", "bob", true))).toEqual(err("NotOwner"));
    expect(await revertOf(setBlocked("merchant", "bob", false))).toEqual(err("InvalidState"));
    expect(moduleEvents(await chain.send(setBlocked("merchant", "bob", true)))).toEqual([
      ["SubscriberBlocked", { subscriber: chain.address("bob") }],
    ]);
    expect(await revertOf(setBlocked("merchant", "bob", true))).toEqual(err("InvalidState"));
    const isBlocked = (name: WalletName) =>
      chain.publicClient.readContract({
        address: module,
        abi: subscriptionModuleAbi,
        functionName: "isBlocked",
        args: [chain.address(name)],
      });
    expect(await isBlocked("bob")).toBe(true);
    expect(await isBlocked("alice")).toBe(false);

    // The blocked wallet keeps its subscription (not chargeable) but may not open a new one.
    await chain.send(act("bob", "cancel", id));
    const subscribe = chain.wallet("bob").writeContract({
      address: module,
      abi: subscriptionModuleAbi,
      functionName: "subscribe",
      args: [PLAN, 0, 0n],
    });
    expect(await revertOf(subscribe)).toEqual(err("Blocked"));

    expect(await revertOf(setBlocked("merchant2", "bob", false))).toEqual(err("NotOwner"));
    expect(moduleEvents(await chain.send(setBlocked("merchant", "bob", false)))).toEqual([
      ["SubscriberUnblocked", { subscriber: chain.address("bob") }],
    ]);
    expect(await isBlocked("bob")).toBe(false);
    expect(await chain.subscribe("bob", module, PLAN)).toBeGreaterThan(id);
  });
});
