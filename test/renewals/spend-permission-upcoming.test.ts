/**
 * `subscription.renewal_upcoming` of spend permissions (spend-permissions spec §3) on a real anvil chain and the
 * indexer: at N − RENEWAL_NOTICE_S for the N an Approved or Used log set, in the first block at or after that instant
 * and only once such a block is indexed; once per due instant; none when a revoke comes first or when the instant is
 * at or before the log that set N; the same ids after a re-index from scratch.
 */
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import type { Address } from "viem";
import { testTokenAbi } from "../../src/chain/abis";
import type { SpendPermissionSource } from "../../src/common/config";
import type { Db } from "../../src/db/client";
import type { SpendPermission } from "../../src/domain/spend-permission";
import { eventsHook } from "../../src/events/hook";
import { withPermissionEvents } from "../../src/events/spend-permission-events";
import { permissionUpcomingEvents } from "../../src/renewals/permission-upcoming";
import { createTestChain, type TestChain } from "../../testkit/chain";
import { createTestDb } from "../../testkit/db";
import { indexTo } from "../../testkit/indexer";
import {
  TEST_ALLOWANCE,
  TEST_PERIOD,
  deploySpendPermissions,
  type SpendPermissionKit,
} from "../../testkit/spend-permissions";

const DAY = 86_400;
const NOTICE = 3 * DAY;
let chain: TestChain;
let kit: SpendPermissionKit;
let db: Db;
let token: Address;
let merchant: Address;
let alice: Address;
let source: SpendPermissionSource;

const index = async (into = db) =>
  indexTo(into, chain, await chain.publicClient.getBlockNumber(), {
    spendPermissions: source,
    hooks: [
      eventsHook({
        extra: withPermissionEvents((tx, ctx, inFlight) => permissionUpcomingEvents(tx, ctx, inFlight, NOTICE)),
      }),
    ],
  });
type Row = { id: string; block_number: string; ts: Date; data: any };
/** The renewal_upcoming events of `p` (all of them when omitted), in order. */
const upcoming = async (p?: SpendPermission, from = db) =>
  (
    await from.sql<Row[]>`
      select id, block_number::text, ts, data from event_log
      where merchant = ${merchant.toLowerCase()} and type = 'subscription.renewal_upcoming' order by seq`
  ).filter((r) => !p || r.data.object.on_chain_id === kit.hash(p));
const now = async () => Number(await chain.now());

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
  source = kit.source([merchant], { graceS: DAY });
}, 60_000);

afterAll(async () => {
  await db?.close();
  await chain?.stop();
});

describe("renewal_upcoming of a spend permission", () => {
  test("a future start: at start − notice, in the first block at or after it, once that block is indexed", async () => {
    const start = (await now()) + 5 * DAY;
    const p = kit.permission({ account: alice, spender: merchant, token, start, salt: 1n });
    await kit.executeAs("alice", alice, [kit.managerCall("approve", [p])]);
    await index();
    await chain.mineAt(start - NOTICE - 1);
    await index();
    expect(await upcoming(p)).toEqual([]);
    const block = await chain.mineAt(start - NOTICE + 50);
    await index();
    const [e, ...more] = await upcoming(p);
    expect(more).toEqual([]);
    expect(e!.block_number).toBe(block.toString());
    expect(e!.ts.getTime() / 1000).toBe(start - NOTICE);
    expect(e!.data).toMatchObject({
      due_at: new Date(start * 1000).toISOString(),
      amount: TEST_ALLOWANCE.toString(),
      currency: "USDC",
      token_decimals: 6,
    });
    expect(e!.data.object).toMatchObject({
      on_chain_id: kit.hash(p),
      source: "spend_permission",
      status: "PENDING",
      renewal: null,
    });
    // Never twice for one due instant.
    await chain.mineAt(start - NOTICE + 100);
    await index();
    expect((await upcoming(p)).length).toBe(1);
  });

  test("the Base Pay first charge at S: one notice for S+P, at S+P − notice", async () => {
    const S = (await now()) + 10;
    const p = kit.permission({ account: alice, spender: merchant, token, start: S, salt: 2n });
    await chain.setNextTimestamp(S);
    await kit.executeAs("merchant", merchant, [
      kit.managerCall("approveWithSignature", [p, await kit.sign("alice", p)]),
      kit.managerCall("spend", [p, TEST_ALLOWANCE]),
    ]);
    await index();
    expect(await upcoming(p)).toEqual([]);
    await chain.mineAt(S + TEST_PERIOD - NOTICE + 5);
    await index();
    const list = await upcoming(p);
    expect(list.map((e) => [e.ts.getTime() / 1000, e.data.due_at, e.data.object.status])).toEqual([
      [S + TEST_PERIOD - NOTICE, new Date((S + TEST_PERIOD) * 1000).toISOString(), "ACTIVE"],
    ]);
  });

  test("none when a revoke comes before the instant, nor when the instant is at or before the log that set N", async () => {
    const t = await now();
    const revoked = kit.permission({ account: alice, spender: merchant, token, start: t + 5 * DAY, salt: 3n });
    await kit.executeAs("alice", alice, [kit.managerCall("approve", [revoked])]);
    await index();
    // A period shorter than the notice: the charge at t + 100 sets N = t + 100 + period, whose notice instant (t + 50)
    // lies inside this batch's time range but before the charge.
    const short = kit.permission({
      account: alice,
      spender: merchant,
      token,
      start: t + 100,
      period: NOTICE - 50,
      salt: 4n,
    });
    await chain.setNextTimestamp(t + 100);
    await kit.executeAs("merchant", merchant, [
      kit.managerCall("approveWithSignature", [short, await kit.sign("alice", short)]),
      kit.managerCall("spend", [short, TEST_ALLOWANCE]),
    ]);
    await index();
    await chain.mineAt(t + DAY);
    await kit.executeAs("alice", alice, [kit.managerCall("revoke", [revoked])]);
    await index();
    await chain.mineAt(t + 5 * DAY);
    await index();
    expect(await upcoming(revoked)).toEqual([]);
    expect(await upcoming(short)).toEqual([]);
  });

  test("a re-index from scratch gives the same events", async () => {
    const fresh = await createTestDb();
    try {
      await index(fresh);
      const ids = (rows: Row[]) => rows.map((r) => [r.id, r.block_number]);
      expect(ids(await upcoming(undefined, fresh))).toEqual(ids(await upcoming()));
      expect((await upcoming()).length).toBe(2);
    } finally {
      await fresh.close();
    }
  });
});
