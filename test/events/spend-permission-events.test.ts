/** Webhook events of spend permissions (spend-permissions spec §3; §10 scenarios 1, 4, 6). */
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import type { Address } from "viem";
import { testTokenAbi } from "../../src/chain/abis";
import type { SpendPermissionSource } from "../../src/common/config";
import type { Db } from "../../src/db/client";
import type { SpendPermission } from "../../src/domain/spend-permission";
import { eventsHook } from "../../src/events/hook";
import { withPermissionEvents } from "../../src/events/spend-permission-events";
import { createTestChain, type TestChain } from "../../testkit/chain";
import { createTestDb } from "../../testkit/db";
import { indexTo, testIndexer } from "../../testkit/indexer";
import { until } from "../../testkit/cli";
import {
  TEST_ALLOWANCE,
  TEST_PERIOD,
  deploySpendPermissions,
  type SpendPermissionKit,
} from "../../testkit/spend-permissions";

const G = 86400;
let chain: TestChain;
let kit: SpendPermissionKit;
let db: Db;
let token: Address;
let merchant: Address;
let alice: Address;
let source: SpendPermissionSource;
let S: number;
let paid: SpendPermission;

const index = async () =>
  indexTo(db, chain, await chain.publicClient.getBlockNumber(), {
    spendPermissions: source,
    hooks: [eventsHook({ extra: withPermissionEvents() })],
  });

type Row = { type: string; block_number: string; sub_index: number; ts: Date; data: any; a_type: string | null };
/** The merchant's events after seq `after`, in log order. */
const eventsAfter = async (after: string) =>
  db.sql<(Row & { seq: string })[]>`
    select seq::text, type, block_number::text, sub_index, ts, data, a_type from event_log
    where merchant = ${merchant.toLowerCase()} and seq > ${after}::bigint order by event_log.seq`;
let last = "0";
const newEvents = async () => {
  const rows = await eventsAfter(last);
  if (rows.length) last = rows.at(-1)!.seq;
  return rows;
};
const summary = (rows: Row[]) =>
  rows.map((r) =>
    r.type === "charge.succeeded" ? r.type : `${r.type}:${r.data.previous_status ?? ""}>${r.data.object.status}`,
  );

beforeAll(async () => {
  chain = await createTestChain();
  kit = await deploySpendPermissions(chain);
  db = await createTestDb();
  token = await chain.deployToken({ symbol: "USDC", decimals: 6 });
  merchant = await kit.createAccount("merchant", { managerOwner: false });
  alice = await kit.createAccount("alice");
  await chain.send(
    chain
      .wallet("deployer")
      .writeContract({ address: token, abi: testTokenAbi, functionName: "mint", args: [alice, 10n ** 12n] }),
  );
  source = kit.source([merchant], { graceS: G });
  S = Number(await chain.now()) + 10;
}, 60_000);

afterAll(async () => {
  await db?.close();
  await chain?.stop();
});

describe("permission events", () => {
  test("scenario 1: the Base Pay first charge gives created (PENDING), charge.succeeded, PENDING→ACTIVE in one block", async () => {
    await chain.setNextTimestamp(S);
    paid = kit.permission({ account: alice, spender: merchant, token, start: S, salt: 1n });
    const receipt = await kit.sendUserOp("merchant", merchant, [
      kit.managerCall("approveWithSignature", [paid, await kit.sign("alice", paid)]),
      kit.managerCall("spend", [paid, TEST_ALLOWANCE]),
    ]);
    await index();
    const rows = await newEvents();
    expect(summary(rows)).toEqual([
      "subscription.created:>PENDING",
      "charge.succeeded",
      "subscription.status_changed:PENDING>ACTIVE",
    ]);
    expect(new Set(rows.map((r) => r.block_number))).toEqual(new Set([String(receipt.blockNumber)]));
    expect(rows[0]!.data.object).toMatchObject({ on_chain_id: kit.hash(paid), source: "spend_permission" });
    expect(rows[2]!.data.object.times_executed).toBe(1);
  });

  test("scenario 4: one lapse at S+P+G, only once a block at or after it is indexed; a charge reactivates", async () => {
    await chain.mineAt(S + TEST_PERIOD + G - 1);
    await index();
    expect((await newEvents()).length).toBe(0);
    await chain.mineAt(S + TEST_PERIOD + G + 50);
    await index();
    await chain.mineAt(S + TEST_PERIOD + G + 60);
    await index();
    const rows = await newEvents();
    expect(summary(rows)).toEqual(["subscription.status_changed:ACTIVE>EXPIRED"]);
    expect(rows[0]!.ts.getTime() / 1000).toBe(S + TEST_PERIOD + G);
    await kit.executeAs("merchant", merchant, [kit.managerCall("spend", [paid, TEST_ALLOWANCE])]);
    await index();
    const after = await newEvents();
    expect(summary(after)).toEqual(["charge.succeeded", "subscription.status_changed:EXPIRED>ACTIVE"]);
    expect(after[1]!.data.object.times_executed).toBe(2);
  });

  test("scenario 6: a revoke is one status change → CANCELLED naming who revoked; nothing expires after it", async () => {
    await kit.executeAs("alice", alice, [kit.managerCall("revoke", [paid])]);
    await index();
    const rows = await newEvents();
    expect(summary(rows)).toEqual(["subscription.status_changed:ACTIVE>CANCELLED"]);
    expect(rows[0]!.data.object.spend_permission.revoked_by).toBe("subscriber");
    await chain.mineAt(S + 3 * TEST_PERIOD);
    await index();
    expect((await newEvents()).length).toBe(0);
  });

  test("a never-charged permission expires at its end, PENDING→EXPIRED", async () => {
    const now = Number(await chain.now()) + 1;
    const end = now + 1000;
    const p = kit.permission({ account: alice, spender: merchant, token, start: now, end, salt: 9n });
    await chain.setNextTimestamp(now);
    await kit.executeAs("alice", alice, [kit.managerCall("approve", [p])]);
    await index();
    expect(summary(await newEvents())).toEqual(["subscription.created:>PENDING"]);
    await chain.mineAt(end + 5);
    await index();
    const rows = await newEvents();
    expect(summary(rows)).toEqual(["subscription.status_changed:PENDING>EXPIRED"]);
    expect(rows[0]!.ts.getTime() / 1000).toBe(end);
  });

  test("scenario 13: a reorg withdraws the first charge's three events; the new branch's replace them", async () => {
    const live = testIndexer(db, chain, {
      spendPermissions: source,
      hooks: [eventsHook({ extra: withPermissionEvents() })],
    });
    await live.start();
    try {
      await live.waitForBlock(await chain.publicClient.getBlockNumber(), 30_000);
      await newEvents();
      const snap = await chain.snapshot();
      const start = Number(await chain.now()) + 1;
      const p = kit.permission({ account: alice, spender: merchant, token, start, salt: 20n });
      await chain.setNextTimestamp(start);
      await kit.executeAs("merchant", merchant, [
        kit.managerCall("approveWithSignature", [p, await kit.sign("alice", p)]),
        kit.managerCall("spend", [p, TEST_ALLOWANCE]),
      ]);
      await live.waitForBlock(await chain.publicClient.getBlockNumber(), 30_000);
      const first = await newEvents();
      expect(summary(first)).toEqual([
        "subscription.created:>PENDING",
        "charge.succeeded",
        "subscription.status_changed:PENDING>ACTIVE",
      ]);
      await chain.revert(snap);
      const q = kit.permission({ account: alice, spender: merchant, token, start, salt: 21n });
      await chain.setNextTimestamp(start + 1);
      await kit.executeAs("merchant", merchant, [
        kit.managerCall("approveWithSignature", [q, await kit.sign("alice", q)]),
        kit.managerCall("spend", [q, 7n]),
      ]);
      await chain.testClient.mine({ blocks: 2 });
      const reverted = await until("the withdrawals and the new branch", async () => {
        const rows = await eventsAfter(last);
        return rows.filter((r) => r.type === "event.reverted").length === 3 &&
          rows.some((r) => r.type === "subscription.created")
          ? rows
          : null;
      });
      const withdrawn = reverted.filter((r) => r.type === "event.reverted").map((r) => r.data.object.type);
      expect(withdrawn.sort()).toEqual(
        ["charge.succeeded", "subscription.created", "subscription.status_changed"].sort(),
      );
      const created = reverted.find((r) => r.type === "subscription.created")!;
      expect(created.data.object.on_chain_id).toBe(kit.hash(q));
      expect(live.status().lastError).toBeNull();
    } finally {
      await live.stop();
    }
  }, 60_000);
});
