import { afterAll, beforeAll, describe, expect, setDefaultTimeout, test } from "bun:test";
import type { Address } from "viem";
import { subscriptionModuleAbi } from "../../../src/chain/abis";
import { createTestChain, revertOf, type TestChain, type WalletName } from "../../../testkit/chain";

// Starts a real anvil: more than the 5 s default on a busy machine.
setDefaultTimeout(60_000);

const PLAN = 1;
const OTHER_PLAN = 2;
const INTERVAL = 1_000;
const GRACE = 500;

let chain: TestChain;
let module: Address;
let token: Address;

/** Which wallet is in which status on PLAN (set up in beforeAll). */
const who = {
  none: "erin",
  pending: "bob",
  active: "alice",
  paused: "carol",
  cancelled: "dave",
  blocked: "keeper2",
} as const satisfies Record<string, WalletName>;

function isActive(name: WalletName, planId: number, blockNumber?: bigint) {
  return chain.publicClient.readContract({
    address: module,
    abi: subscriptionModuleAbi,
    functionName: "isActive",
    args: [chain.address(name), planId],
    blockNumber,
  });
}

function isActiveAny(name: WalletName, planIds: number[], blockNumber?: bigint) {
  return chain.publicClient.readContract({
    address: module,
    abi: subscriptionModuleAbi,
    functionName: "isActiveAny",
    args: [chain.address(name), planIds],
    blockNumber,
  });
}

async function sub(name: WalletName, planId = PLAN) {
  const id = await chain.publicClient.readContract({
    address: module,
    abi: subscriptionModuleAbi,
    functionName: "subscriptionOf",
    args: [chain.address(name), planId],
  });
  const s = await chain.publicClient.readContract({
    address: module,
    abi: subscriptionModuleAbi,
    functionName: "getSubscription",
    args: [id],
  });
  return { id, ...s };
}

function act(name: WalletName, functionName: "pause" | "resume" | "cancel", id: bigint) {
  return chain.send(
    chain.wallet(name).writeContract({ address: module, abi: subscriptionModuleAbi, functionName, args: [id] }),
  );
}

function setBlocked(wallet: WalletName, blocked: boolean) {
  return chain.send(
    chain.wallet("merchant").writeContract({
      address: module,
      abi: subscriptionModuleAbi,
      functionName: blocked ? "blockSubscriber" : "unblockSubscriber",
      args: [chain.address(wallet)],
    }),
  );
}

beforeAll(async () => {
  chain = await createTestChain();
  token = await chain.deployToken();
  module = await chain.createModule("merchant");
  await chain.createPlan("merchant", module, {
    planId: PLAN,
    token,
    amount: 1_000n,
    interval: INTERVAL,
    gracePeriod: GRACE,
  });
  await chain.createPlan("merchant", module, { planId: OTHER_PLAN, token, amount: 1_000n, interval: 10 * INTERVAL });
  for (const name of Object.values(who)) await chain.fund(name, token, 1_000_000n);

  await chain.subscribe(who.pending, module, PLAN);
  for (const name of [who.paused, who.cancelled, who.blocked, who.active]) {
    const id = await chain.subscribe(name, module, PLAN);
    await chain.charge(module, id);
  }
  await act(who.paused, "pause", (await sub(who.paused)).id);
  const cancelledId = (await sub(who.cancelled)).id;
  await act(who.cancelled, "cancel", cancelledId);
  await setBlocked(who.blocked, true);

  // The pending wallet is active on the other plan: isActiveAny must find it there.
  const other = await chain.subscribe(who.pending, module, OTHER_PLAN);
  await chain.charge(module, other);
});

afterAll(async () => {
  await chain?.stop();
});

describe("isActive / isActiveAny truth table", () => {
  const expected: Record<keyof typeof who, boolean> = {
    none: false,
    pending: false,
    active: true,
    paused: false,
    cancelled: false,
    blocked: false,
  };

  for (const [status, active] of Object.entries(expected) as [keyof typeof who, boolean][]) {
    test(`${status}: isActive = ${active}`, async () => {
      const name = who[status];
      expect(await isActive(name, PLAN)).toBe(active);
      expect(await isActiveAny(name, [PLAN])).toBe(active);
      expect(await isActiveAny(name, [99, PLAN, 98])).toBe(active);
      expect(await isActiveAny(name, [])).toBe(false);
      expect(await isActive(name, 99)).toBe(false);
    });
  }

  test("isActiveAny is true when any listed plan is active", async () => {
    expect(await isActive(who.pending, OTHER_PLAN)).toBe(true);
    expect(await isActiveAny(who.pending, [PLAN])).toBe(false);
    expect(await isActiveAny(who.pending, [PLAN, OTHER_PLAN])).toBe(true);
    expect(await isActiveAny(who.pending, [OTHER_PLAN, PLAN])).toBe(true);
  });

  test("state behind the table", async () => {
    expect((await sub(who.none)).id).toBe(0n);
    expect(await sub(who.pending)).toMatchObject({ timesExecuted: 0, paused: false, cancelled: false });
    expect(await sub(who.paused)).toMatchObject({ timesExecuted: 1, paused: true });
    expect((await sub(who.cancelled)).id).toBe(0n); // subscriptionOf forgets cancelled subscriptions
    expect(await sub(who.blocked)).toMatchObject({ timesExecuted: 1, paused: false, cancelled: false });
  });
});

describe("the grace boundary and recoveries", () => {
  test("active through lastPaidAt + interval + grace inclusive, EXPIRED one second later", async () => {
    const snap = await chain.snapshot();
    try {
      const { lastPaidAt, nextChargeAt } = await sub(who.active);
      expect(nextChargeAt).toBe(lastPaidAt + BigInt(INTERVAL));
      const end = lastPaidAt + BigInt(INTERVAL + GRACE);

      // Overdue but inside the grace period: still active.
      const overdue = await chain.mineAt(nextChargeAt + 1n);
      expect(await isActive(who.active, PLAN, overdue)).toBe(true);

      const atEnd = await chain.mineAt(end);
      expect((await chain.publicClient.getBlock({ blockNumber: atEnd })).timestamp).toBe(end);
      expect(await isActive(who.active, PLAN, atEnd)).toBe(true);
      expect(await isActiveAny(who.active, [OTHER_PLAN, PLAN], atEnd)).toBe(true);

      const after = await chain.mineAt(end + 1n);
      expect(await isActive(who.active, PLAN, after)).toBe(false);
      expect(await isActiveAny(who.active, [OTHER_PLAN, PLAN], after)).toBe(false);
      for (const status of ["none", "pending", "paused", "cancelled", "blocked"] as const) {
        expect(await isActive(who[status], PLAN, after)).toBe(false);
      }
      // The reading at the earlier block is unchanged: the answer depends only on that block's timestamp.
      expect(await isActive(who.active, PLAN, atEnd)).toBe(true);

      // A late charge revives it for a new period.
      await chain.charge(module, (await sub(who.active)).id);
      expect(await isActive(who.active, PLAN)).toBe(true);
    } finally {
      await chain.revert(snap);
    }
  });

  test("resume and unblock inside the paid period make the wallet active again", async () => {
    const snap = await chain.snapshot();
    try {
      await act(who.paused, "resume", (await sub(who.paused)).id);
      expect(await isActive(who.paused, PLAN)).toBe(true);
      await setBlocked(who.blocked, false);
      expect(await isActive(who.blocked, PLAN)).toBe(true);
      await setBlocked(who.active, true);
      expect(await isActive(who.active, PLAN)).toBe(false);
    } finally {
      await chain.revert(snap);
    }
  });

  test("executions used up: active until the paid period (plus grace) ends", async () => {
    const snap = await chain.snapshot();
    try {
      await chain.fund("merchant2", token, 10_000n);
      const id = await chain.subscribe("merchant2", module, PLAN, { maxExecutions: 1 });
      await chain.charge(module, id);
      await chain.mineAt((await sub("merchant2")).nextChargeAt);
      expect(await revertOf(chain.charge(module, id))).toEqual({ errorName: "NotChargeable", args: [id] });
      const { lastPaidAt } = await sub("merchant2");
      const end = lastPaidAt + BigInt(INTERVAL + GRACE);
      expect(await isActive("merchant2", PLAN, await chain.mineAt(end))).toBe(true);
      expect(await isActive("merchant2", PLAN, await chain.mineAt(end + 1n))).toBe(false);
    } finally {
      await chain.revert(snap);
    }
  });
});
