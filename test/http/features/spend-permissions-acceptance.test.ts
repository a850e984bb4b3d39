/**
 * Spend permission acceptance scenarios at the API, with the events hook indexing the webhook events (spend-permissions
 * spec §10): 3 (a future start stays PENDING when its start passes, with no event), 5 (a second spend in a period
 * reverts and leaves nothing), 7 (`revoked_by` of a spender's own revoke and of a bundle with both kinds), 9 (native
 * ETH) and 16 (a plan change by approveWithRevoke).
 */
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { BaseError, ContractFunctionRevertedError, type Address } from "viem";
import { spendPermissionManagerAbi, testTokenAbi } from "../../../src/chain/abis";
import { createChainRegistry } from "../../../src/chain/clients";
import type { SpendPermissionSource } from "../../../src/common/config";
import type { Db } from "../../../src/db/client";
import { createNotifier } from "../../../src/db/notify";
import { NATIVE_TOKEN, type PeriodSpend, type SpendPermission } from "../../../src/domain/spend-permission";
import { eventsHook } from "../../../src/events/hook";
import { withPermissionEvents } from "../../../src/events/spend-permission-events";
import { createApp } from "../../../src/http/app";
import { statsRollupsHook } from "../../../src/indexer/rollups";
import { request, testConfig } from "../../../testkit/app";
import { createTestChain, type TestChain } from "../../../testkit/chain";
import { until } from "../../../testkit/cli";
import { createTestDb } from "../../../testkit/db";
import { indexTo } from "../../../testkit/indexer";
import {
  TEST_ALLOWANCE,
  TEST_PERIOD,
  deploySpendPermissions,
  managerEvents,
  type SpendPermissionKit,
} from "../../../testkit/spend-permissions";

let chain: TestChain;
let kit: SpendPermissionKit;
let db: Db;
let app: ReturnType<typeof createApp>;
let notifier: ReturnType<typeof createNotifier>;
let source: SpendPermissionSource;
let token: Address;
let merchant: Address; // a smart-account spender, as Base Pay's
let dave: Address; // an EOA spender
let alice: Address;
let bob: Address;

/** The block the last `index()` reached: answers are awaited until they are of it (caches follow batches). */
let indexed = 0n;
const index = async () => {
  const head = await chain.publicClient.getBlockNumber();
  await indexTo(db, chain, head, {
    spendPermissions: source,
    notifier,
    hooks: [statsRollupsHook(), eventsHook({ extra: withPermissionEvents() })],
  });
  indexed = head;
};
/** GET `path` once its answer is of the last indexed block (a cached page is replaced when the batch is announced). */
const get = async (path: string) => {
  const url = `${path}${path.includes("?") ? "&" : "?"}chain_id=${chain.chainId}`;
  const res = await until(`${path} at block ${indexed}`, async () => {
    const r = await request(app, url);
    const at = r.headers.get("x-indexed-block");
    return at === null || BigInt(at) >= indexed ? r : null;
  });
  return res.body;
};
const recordOf = (spender: Address, p: SpendPermission) => get(`/v0/subscriptions/${spender}/${kit.hash(p)}`);
const activityOf = async (spender: Address, p: SpendPermission) =>
  ((await get(`/v0/activity/${spender}?limit=100`)) as { allocation_id: string }[]).filter((a) =>
    a.allocation_id.endsWith(kit.hash(p)),
  );
type Event = { id: string; type: string; block_number: string; data: any };
/** The spender's events about `p` (by its hash), in log order. */
const eventsOf = async (spender: Address, p: SpendPermission): Promise<Event[]> =>
  ((await get(`/v0/events/${spender}?limit=100`)) as Event[]).filter((e) =>
    String(e.data.object.allocation_id).endsWith(kit.hash(p)),
  );
const summary = (events: Event[]) =>
  events.map((e) =>
    e.type === "subscription.status_changed" ? `${e.type}:${e.data.previous_status}>${e.data.object.status}` : e.type,
  );

/** The custom error a simulated call of the manager reverts with. */
async function revertName(p: Promise<unknown>): Promise<string> {
  try {
    await p;
  } catch (err) {
    const reverted = err instanceof BaseError ? err.walk((e) => e instanceof ContractFunctionRevertedError) : null;
    if (reverted instanceof ContractFunctionRevertedError) return reverted.data?.errorName ?? reverted.signature ?? "";
    throw err;
  }
  throw new Error("the call did not revert");
}

beforeAll(async () => {
  chain = await createTestChain();
  kit = await deploySpendPermissions(chain);
  db = await createTestDb();
  token = await chain.deployToken({ symbol: "USDC", decimals: 6 });
  merchant = await kit.createAccount("merchant", { managerOwner: false });
  dave = chain.address("dave");
  alice = await kit.createAccount("alice");
  bob = await kit.createAccount("bob");
  for (const to of [alice, bob]) {
    await chain.send(
      chain
        .wallet("deployer")
        .writeContract({ address: token, abi: testTokenAbi, functionName: "mint", args: [to, 10n ** 12n] }),
    );
  }
  source = kit.source([merchant, dave]);
  const config = testConfig({
    CHAIN_ID: String(chain.chainId),
    RPC_URL: chain.rpcUrl,
    PROCESSOR_ADDRESS: chain.processor,
    SPEND_PERMISSION_MANAGER: kit.manager,
    SPEND_PERMISSION_SPENDERS: `${merchant},${dave}`,
  });
  notifier = createNotifier(db);
  app = createApp({ sql: db.sql, config, chains: await createChainRegistry(config), notifier });
}, 60_000);

afterAll(async () => {
  await db?.close();
  await chain?.stop();
});

describe("spend permission scenarios at the API", () => {
  test("scenario 3: a future start is PENDING and not subscribed; once the start passes, still PENDING with no event", async () => {
    const start = Number(await chain.now()) + 10 * 86400;
    const p = kit.permission({ account: alice, spender: merchant, token, start, salt: 300n });
    await kit.executeAs("alice", alice, [kit.managerCall("approve", [p])]);
    await index();
    expect(await recordOf(merchant, p)).toMatchObject({
      status: "PENDING",
      spend_permission: { is_subscribed: false },
    });
    expect(summary(await eventsOf(merchant, p))).toEqual(["subscription.created"]);
    await chain.mineAt(start + 5);
    await index();
    await chain.mineAt(start + 10);
    await index();
    const r = await until("the index past the start", async () => {
      const x = await recordOf(merchant, p);
      return x.spend_permission.is_subscribed ? x : null;
    });
    expect(r).toMatchObject({ status: "PENDING", next_charge_date: new Date(start * 1000).toISOString() });
    expect(r.spend_permission.current_period_start).toBe(new Date(start * 1000).toISOString());
    expect(summary(await eventsOf(merchant, p))).toEqual(["subscription.created"]);
  });

  test("scenario 5: a second spend in the same period reverts ExceededSpendPermission; no record, no event", async () => {
    const start = Number(await chain.now()) + 1;
    const p = kit.permission({ account: alice, spender: merchant, token, start, salt: 500n });
    await chain.setNextTimestamp(start);
    await kit.executeAs("merchant", merchant, [
      kit.managerCall("approveWithSignature", [p, await kit.sign("alice", p)]),
      kit.managerCall("spend", [p, TEST_ALLOWANCE]),
    ]);
    await index();
    const before = { record: await recordOf(merchant, p), events: await eventsOf(merchant, p) };
    expect(before.record).toMatchObject({ status: "ACTIVE", times_executed: 1 });
    expect(summary(before.events)).toEqual([
      "subscription.created",
      "charge.succeeded",
      "subscription.status_changed:PENDING>ACTIVE",
    ]);
    const spend = (value: bigint) =>
      chain.publicClient.simulateContract({
        address: kit.manager,
        abi: spendPermissionManagerAbi,
        functionName: "spend",
        args: [p, value],
        account: merchant,
      });
    expect(await revertName(spend(1n))).toBe("ExceededSpendPermission");
    // Sent anyway: the transaction is mined and reverts; the chain has no log of it.
    await expect(kit.executeAs("merchant", merchant, [kit.managerCall("spend", [p, 1n])])).rejects.toThrow(/reverted/);
    await index();
    expect(await recordOf(merchant, p)).toEqual(before.record);
    expect(await eventsOf(merchant, p)).toEqual(before.events);
    expect(await activityOf(merchant, p)).toHaveLength(1);
  });

  test("scenario 9: a native ETH charge is in wei, with the chain's currency and 18 decimals", async () => {
    const allowance = 10n ** 16n;
    const start = Number(await chain.now()) + 1;
    const p = kit.permission({ account: bob, spender: merchant, token: NATIVE_TOKEN, allowance, start, salt: 900n });
    await chain.setNextTimestamp(start);
    const before = await chain.publicClient.getBalance({ address: merchant });
    await kit.executeAs("merchant", merchant, [
      kit.managerCall("approveWithSignature", [p, await kit.sign("bob", p)]),
      kit.managerCall("spend", [p, allowance]),
    ]);
    expect((await chain.publicClient.getBalance({ address: merchant })) - before).toBe(allowance);
    await index();
    expect(await recordOf(merchant, p)).toMatchObject({
      status: "ACTIVE",
      total_spent: allowance.toString(),
      plan_id: `${chain.chainId}:${kit.manager.toLowerCase()}:${merchant.toLowerCase()}:${NATIVE_TOKEN.toLowerCase()}:${allowance}:${TEST_PERIOD}`,
    });
    const activity = await activityOf(merchant, p);
    expect(activity).toHaveLength(1);
    expect(activity[0]).toMatchObject({
      type: "CHARGE",
      amount_charged: allowance.toString(),
      currency: "ETH",
      token_decimals: 18,
      source: "spend_permission",
    });
    const charge = (await eventsOf(merchant, p)).find((e) => e.type === "charge.succeeded")!;
    expect(charge.data.object).toMatchObject({
      amount_charged: allowance.toString(),
      currency: "ETH",
      token_decimals: 18,
    });
  });

  test("scenario 16: approveWithRevoke cancels the old permission (by the subscriber) and creates the new one in one tx, in log order", async () => {
    const start = Number(await chain.now()) + 1;
    const old = kit.permission({ account: alice, spender: merchant, token, start, salt: 1600n });
    await chain.setNextTimestamp(start);
    await kit.executeAs("merchant", merchant, [
      kit.managerCall("approveWithSignature", [old, await kit.sign("alice", old)]),
      kit.managerCall("spend", [old, TEST_ALLOWANCE]),
    ]);
    await index();
    const upgraded = kit.permission({
      account: alice,
      spender: merchant,
      token,
      allowance: 2n * TEST_ALLOWANCE,
      start: Number(await chain.now()) + 1,
      salt: 1601n,
    });
    const last = (await chain.publicClient.readContract({
      address: kit.manager,
      abi: spendPermissionManagerAbi,
      functionName: "getLastUpdatedPeriod",
      args: [old],
    })) as PeriodSpend;
    const receipt = await kit.executeAs("alice", alice, [
      kit.managerCall("approveWithRevoke", [upgraded, old, { start: last.start, end: last.end, spend: last.spend }]),
    ]);
    await index();
    const o = await recordOf(merchant, old);
    expect(o).toMatchObject({ status: "CANCELLED", next_charge_date: null });
    expect(o.spend_permission).toMatchObject({ revoked_by: "subscriber" });
    expect(o.spend_permission.revoked_at).toBe(new Date(Number(await chain.now()) * 1000).toISOString());
    const n = await recordOf(merchant, upgraded);
    expect(n).toMatchObject({ status: "PENDING", times_executed: 0 });
    expect(n.created_at).toBe(o.spend_permission.revoked_at);
    // As events: the old one's cancellation, then the new one's creation, in the same block, in log order.
    const all = ((await get(`/v0/events/${merchant}?limit=100`)) as Event[]).filter(
      (e) => e.block_number === String(receipt.blockNumber),
    );
    expect(all.map((e) => [e.type, e.data.object.on_chain_id])).toEqual([
      ["subscription.status_changed", kit.hash(old)],
      ["subscription.created", kit.hash(upgraded)],
    ]);
    expect(all[0]!.data).toMatchObject({ previous_status: "ACTIVE", object: { status: "CANCELLED" } });
    expect(all[0]!.data.object.spend_permission.revoked_by).toBe("subscriber");
    // The chain's order: Revoked(old) then Approved(new), one call.
    expect(managerEvents(receipt, kit.manager).map((e) => [e.eventName, e.args.hash])).toEqual([
      ["SpendPermissionRevoked", kit.hash(old)],
      ["SpendPermissionApproved", kit.hash(upgraded)],
    ]);
  });

  test("scenario 7: revokeAsSpender from an EOA is the merchant's; in one bundle with a user revoke each is told apart by its user operation", async () => {
    const start = Number(await chain.now());
    const byDave = kit.permission({ account: bob, spender: dave, token, start, salt: 700n });
    await kit.executeAs("bob", bob, [kit.managerCall("approve", [byDave])]);
    await chain.send(
      chain.wallet("dave").writeContract({
        address: kit.manager,
        abi: spendPermissionManagerAbi,
        functionName: "revokeAsSpender",
        args: [byDave],
      }),
    );
    const userSide = kit.permission({ account: alice, spender: merchant, token, start, salt: 701n });
    const merchantSide = kit.permission({ account: bob, spender: merchant, token, start, salt: 702n });
    await kit.executeAs("alice", alice, [kit.managerCall("approve", [userSide])]);
    await kit.executeAs("bob", bob, [kit.managerCall("approve", [merchantSide])]);
    // One handleOps bundle sent by a third party: the user's revoke, then the spender's.
    const bundle = await kit.sendUserOps([
      { owner: "alice", account: alice, calls: [kit.managerCall("revoke", [userSide])] },
      { owner: "merchant", account: merchant, calls: [kit.managerCall("revokeAsSpender", [merchantSide])] },
    ]);
    await index();
    const d = await recordOf(dave, byDave);
    expect(d).toMatchObject({ status: "CANCELLED" });
    expect(d.spend_permission.revoked_by).toBe("merchant");
    const u = await recordOf(merchant, userSide);
    const m = await recordOf(merchant, merchantSide);
    expect([u.status, u.spend_permission.revoked_by]).toEqual(["CANCELLED", "subscriber"]);
    expect([m.status, m.spend_permission.revoked_by]).toEqual(["CANCELLED", "merchant"]);
    expect(u.spend_permission.revoked_at).toBe(m.spend_permission.revoked_at);
    const cancelled = (await eventsOf(merchant, userSide)).concat(await eventsOf(merchant, merchantSide));
    expect(
      cancelled
        .filter((e) => e.type === "subscription.status_changed")
        .map((e) => [e.block_number, e.data.object.spend_permission.revoked_by]),
    ).toEqual([
      [String(bundle.blockNumber), "subscriber"],
      [String(bundle.blockNumber), "merchant"],
    ]);
  });
});
