/** Spend permissions served by the subscriptions and activity routes (spend-permissions spec §2, §10 scenarios 1–4, 8, 12). */
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import type { Address } from "viem";
import { testTokenAbi } from "../../../src/chain/abis";
import { createChainRegistry } from "../../../src/chain/clients";
import type { SpendPermissionSource } from "../../../src/common/config";
import type { Db } from "../../../src/db/client";
import { createNotifier } from "../../../src/db/notify";
import { FOREVER_END, type SpendPermission } from "../../../src/domain/spend-permission";
import { createApp } from "../../../src/http/app";
import { statsRollupsHook } from "../../../src/indexer/rollups";
import { request, testConfig, type Res } from "../../../testkit/app";
import { createTestChain, type TestChain } from "../../../testkit/chain";
import { createTestDb } from "../../../testkit/db";
import { until } from "../../../testkit/cli";
import { indexTo } from "../../../testkit/indexer";
import {
  TEST_ALLOWANCE,
  TEST_PERIOD,
  deploySpendPermissions,
  type SpendPermissionKit,
} from "../../../testkit/spend-permissions";

const G = 86400;
let chain: TestChain;
let kit: SpendPermissionKit;
let db: Db;
let app: ReturnType<typeof createApp>;
let token: Address;
let merchant: Address;
let other: Address;
let alice: Address;
let bob: Address;
let source: SpendPermissionSource;
let S: number;
let paid: SpendPermission;
let bundleTx: string;

const iso = (t: number) => new Date(t * 1000).toISOString();
// The app's notifier: each indexed batch invalidates its cached answers, as in the service.
let notifier: ReturnType<typeof createNotifier>;
const index = async () =>
  indexTo(db, chain, await chain.publicClient.getBlockNumber(), {
    spendPermissions: source,
    notifier,
    hooks: [statsRollupsHook()],
  });
const get = (path: string): Promise<Res> =>
  request(app, `${path}${path.includes("?") ? "&" : "?"}chain_id=${chain.chainId}`);
const list = async (spender: Address = merchant, query = "") =>
  (await get(`/v0/subscriptions/${spender}${query}`)).body as Record<string, any>[];
const recordOf = async (p: SpendPermission) => (await get(`/v0/subscriptions/${merchant}/${kit.hash(p)}`)).body;
/** Mines a block at `t` and indexes it: the API's "now" is that block's time (ahead of the wall clock). */
const at = async (t: number) => {
  await chain.mineAt(t);
  await index();
};

beforeAll(async () => {
  chain = await createTestChain();
  kit = await deploySpendPermissions(chain);
  db = await createTestDb();
  token = await chain.deployToken({ symbol: "USDC", decimals: 6 });
  merchant = await kit.createAccount("merchant", { managerOwner: false });
  other = await kit.createAccount("merchant2", { managerOwner: false });
  alice = await kit.createAccount("alice");
  bob = await kit.createAccount("bob");
  for (const to of [alice, bob]) {
    await chain.send(
      chain
        .wallet("deployer")
        .writeContract({ address: token, abi: testTokenAbi, functionName: "mint", args: [to, 10n ** 12n] }),
    );
  }
  source = kit.source([merchant], { graceS: G });
  const config = testConfig({
    CHAIN_ID: String(chain.chainId),
    RPC_URL: chain.rpcUrl,
    PROCESSOR_ADDRESS: chain.processor,
    SPEND_PERMISSION_MANAGER: kit.manager,
    SPEND_PERMISSION_SPENDERS: merchant,
  });
  notifier = createNotifier(db);
  app = createApp({ sql: db.sql, config, chains: await createChainRegistry(config), notifier });
  // Base Pay's first charge, as one user operation of the spender: approveWithSignature then spend.
  S = Number(await chain.now()) + 10;
  await chain.setNextTimestamp(S);
  paid = kit.permission({ account: alice, spender: merchant, token, start: S, salt: 1n });
  const receipt = await kit.sendUserOp("merchant", merchant, [
    kit.managerCall("approveWithSignature", [paid, await kit.sign("alice", paid)]),
    kit.managerCall("spend", [paid, TEST_ALLOWANCE]),
  ]);
  bundleTx = receipt.transactionHash.toLowerCase();
  // Another spender's permission and charge: never the merchant's.
  const theirs = kit.permission({ account: alice, spender: other, token, start: S, salt: 2n });
  await kit.executeAs("merchant2", other, [
    kit.managerCall("approveWithSignature", [theirs, await kit.sign("alice", theirs)]),
    kit.managerCall("spend", [theirs, 5n]),
  ]);
  await index();
}, 60_000);

afterAll(async () => {
  await db?.close();
  await chain?.stop();
});

describe("GET /v0/subscriptions for a spender", () => {
  test("scenario 1: the Base Pay first charge is one ACTIVE record keyed by the hash", async () => {
    const records = await list();
    expect(records).toHaveLength(1);
    const hash = kit.hash(paid);
    expect(records[0]).toEqual({
      allocation_id: `${chain.chainId}:${kit.manager.toLowerCase()}:${hash}`,
      on_chain_id: hash,
      module_address: kit.manager.toLowerCase(),
      user_address: alice.toLowerCase(),
      plan_id: `${chain.chainId}:${kit.manager.toLowerCase()}:${merchant.toLowerCase()}:${token.toLowerCase()}:${TEST_ALLOWANCE}:${TEST_PERIOD}`,
      status: "ACTIVE",
      total_spent: TEST_ALLOWANCE.toString(),
      times_executed: 1,
      next_charge_date: iso(S + TEST_PERIOD),
      expires_at: null,
      remaining_executions: null,
      created_at: iso(S),
      is_blocked: false,
      renewal: null,
      source: "spend_permission",
      spend_permission: {
        hash,
        spender: merchant.toLowerCase(),
        token: token.toLowerCase(),
        allowance: TEST_ALLOWANCE.toString(),
        period_s: TEST_PERIOD,
        start: String(S),
        end: String(FOREVER_END),
        salt: "1",
        extra_data: "0x",
        is_subscribed: true,
        current_period_start: iso(S),
        current_period_end: iso(S + TEST_PERIOD),
        spent_in_period: TEST_ALLOWANCE.toString(),
        remaining_in_period: "0",
        paid_through: iso(S + TEST_PERIOD),
        revoked_by: null,
        revoked_at: null,
      },
    });
    expect(await recordOf(paid)).toEqual(records[0]!);
    expect((await get(`/v0/subscriptions/${merchant}/${BigInt(hash)}`)).body).toEqual(records[0]!);
  });

  test("the charge is a CHARGE activity record without fee, kept by the spender, in the token's units", async () => {
    const activity = (await get(`/v0/activity/${merchant}`)).body as Record<string, unknown>[];
    expect(activity).toHaveLength(1);
    expect(activity[0]).toMatchObject({
      allocation_id: `${chain.chainId}:${kit.manager.toLowerCase()}:${kit.hash(paid)}`,
      module_address: kit.manager.toLowerCase(),
      type: "CHARGE",
      amount_charged: TEST_ALLOWANCE.toString(),
      fee_paid: "0",
      keeper_address: merchant.toLowerCase(),
      currency: "USDC",
      token_decimals: 6,
      tx_hash: bundleTx,
      source: "spend_permission",
    });
    const payments = (await get(`/v0/payments/${merchant}`)).body as Record<string, unknown>[];
    expect(payments).toEqual(activity);
    const csv = await request(app, `/v0/activity/${merchant}?chain_id=${chain.chainId}&format=csv`);
    expect(csv.body).toContain(`,${kit.hash(paid)},`.slice(1));
    expect(csv.body).toContain("spend_permission");
  });

  test("scenario 12 and the errors: another spender's records stay out; bad ids are 400, foreign hashes 404", async () => {
    expect(await list(other)).toEqual([]);
    const theirs = kit.permission({ account: alice, spender: other, token, start: S, salt: 2n });
    expect((await get(`/v0/subscriptions/${merchant}/${kit.hash(theirs)}`)).status).toBe(404);
    expect((await get(`/v0/subscriptions/${merchant}/0x1234`)).status).toBe(400);
    expect(await list(merchant, "?source=subscription_module")).toEqual([]);
    expect(await list(merchant, "?source=spend_permission")).toHaveLength(1);
    expect((await get(`/v0/subscriptions/${merchant}?source=nope`)).status).toBe(400);
  });

  test("scenarios 2 and 3: approved only is PENDING, due at start; a future start is not subscribed yet", async () => {
    const now = Number(await chain.now()) + 1;
    const approved = kit.permission({ account: bob, spender: merchant, token, start: now, salt: 3n });
    const future = kit.permission({ account: bob, spender: merchant, token, start: now + 10 * 86400, salt: 4n });
    await chain.setNextTimestamp(now);
    await kit.executeAs("bob", bob, [kit.managerCall("approve", [approved]), kit.managerCall("approve", [future])]);
    await index();
    const a = await recordOf(approved);
    expect(a).toMatchObject({ status: "PENDING", next_charge_date: iso(now), times_executed: 0 });
    expect(a.spend_permission).toMatchObject({ is_subscribed: true, remaining_in_period: TEST_ALLOWANCE.toString() });
    const f = await recordOf(future);
    expect(f).toMatchObject({ status: "PENDING", next_charge_date: iso(now + 10 * 86400) });
    expect(f.spend_permission).toMatchObject({
      is_subscribed: false,
      current_period_start: null,
      current_period_end: null,
      remaining_in_period: null,
    });
    // Creation order: the first charge, then these two.
    expect((await list()).map((r) => r.on_chain_id)).toEqual([kit.hash(paid), kit.hash(approved), kit.hash(future)]);
    const page = await get(`/v0/subscriptions/${merchant}?limit=1`);
    expect(page.body).toHaveLength(1);
    const next = /starting_after=([^&>]+)/.exec(page.headers.get("link") ?? "")![1]!;
    const rest = (await get(`/v0/subscriptions/${merchant}?limit=5&starting_after=${next}`)).body;
    expect(rest.map((r: { on_chain_id: string }) => r.on_chain_id)).toEqual([kit.hash(approved), kit.hash(future)]);
  });

  test("scenario 4: rollover keeps ACTIVE through grace, lapses at S+P+G, a charge makes it ACTIVE again", async () => {
    await at(S + TEST_PERIOD);
    let r = await recordOf(paid);
    expect(r).toMatchObject({ status: "ACTIVE", next_charge_date: iso(S + TEST_PERIOD) });
    expect(r.spend_permission.remaining_in_period).toBe(TEST_ALLOWANCE.toString());
    await at(S + TEST_PERIOD + G - 1);
    expect((await recordOf(paid)).status).toBe("ACTIVE");
    await at(S + TEST_PERIOD + G);
    expect((await recordOf(paid)).status).toBe("EXPIRED");
    expect((await list(merchant, "?status=EXPIRED")).map((x) => x.on_chain_id)).toEqual([kit.hash(paid)]);
    await kit.executeAs("merchant", merchant, [kit.managerCall("spend", [paid, TEST_ALLOWANCE])]);
    await index();
    r = await recordOf(paid);
    expect(r).toMatchObject({ status: "ACTIVE", next_charge_date: iso(S + 2 * TEST_PERIOD), times_executed: 2 });
  });

  test("scenario 8: a finite end shows as expires_at; after the cut-short last period nothing is due", async () => {
    const now = Number(await chain.now()) + 1;
    const end = now + 2 * TEST_PERIOD + 100;
    const finite = kit.permission({ account: bob, spender: merchant, token, start: now, end, salt: 5n });
    await chain.setNextTimestamp(now);
    await kit.executeAs("bob", bob, [kit.managerCall("approve", [finite])]);
    await index();
    expect(await recordOf(finite)).toMatchObject({ expires_at: String(end), status: "PENDING" });
    await chain.setNextTimestamp(now + 2 * TEST_PERIOD + 1);
    await kit.executeAs("merchant", merchant, [kit.managerCall("spend", [finite, 1n])]);
    await index();
    const r = await recordOf(finite);
    expect(r).toMatchObject({ status: "ACTIVE", next_charge_date: null });
    expect(r.spend_permission.current_period_end).toBe(iso(end));
    await at(end);
    expect((await recordOf(finite)).status).toBe("EXPIRED");
  });

  test("scenario 6: a revoked permission is CANCELLED by the subscriber with nothing due", async () => {
    await kit.executeAs("alice", alice, [kit.managerCall("revoke", [paid])]);
    await index();
    const r = await recordOf(paid);
    expect(r).toMatchObject({ status: "CANCELLED", next_charge_date: null, renewal: null });
    expect(r.spend_permission).toMatchObject({ revoked_by: "subscriber", is_subscribed: false });
    expect(r.spend_permission.revoked_at).toBe(iso(Number(await chain.now())));
  });

  test("scenario 11: the three modes agree in scenarios 1, 2, 4 (inside and past grace) and 6, with and without plan_ids", async () => {
    const check = (wallet: Address, extra = "") =>
      request(
        app,
        `/v0/auth/check?module_address=${kit.manager}&wallet=${wallet}&chain_id=${chain.chainId}${extra}`,
        {},
      );
    const missing = await check(alice);
    expect(missing.status).toBe(400);
    expect(missing.body.error.code).toBe("missing_parameter");
    expect(missing.body.error.param).toBe("spender");
    const key = `${token.toLowerCase()}:${TEST_ALLOWANCE}:${TEST_PERIOD}`;
    /** Every mode, with the plan key and without plan_ids, gives `expected` (the index first waited for). */
    const agree = async (wallet: Address, expected: boolean) => {
      await until(`the index to say ${expected} for ${wallet}`, async () => {
        const x = await check(wallet, `&spender=${merchant}&plan_ids=${key}`);
        return x.body.indexed.authorized === expected;
      });
      for (const plans of [`&plan_ids=${key}`, ""]) {
        for (const mode of ["indexed", "onchain", "both"]) {
          const x = await check(wallet, `&spender=${merchant}${plans}&mode=${mode}`);
          expect({ mode, plans, status: x.status, authorized: x.body.authorized }).toEqual({
            mode,
            plans,
            status: 200,
            authorized: expected,
          });
          if (mode !== "indexed") expect(x.body.onchain.method).toBe("isValid+getLastUpdatedPeriod");
          if (mode !== "onchain") {
            expect(x.body.indexed.authorized).toBe(expected);
            expect(x.body.indexed.matching_plan_ids).toEqual(expected ? [key] : []);
          }
        }
      }
    };
    // Scenario 6: alice's permission was revoked above: CANCELLED, not authorized.
    let r = await check(alice, `&spender=${merchant}`);
    expect(r.body.indexed.details[0]).toMatchObject({
      status: "CANCELLED",
      is_subscribed: false,
      plan_id_on_chain: key,
    });
    await agree(alice, false);
    // Scenario 2: carol's permission is approved only (PENDING, subscribed but unpaid): not authorized.
    const carol = await kit.createAccount("carol");
    const approvedOnly = kit.permission({
      account: carol,
      spender: merchant,
      token,
      start: Number(await chain.now()),
      salt: 60n,
    });
    await kit.executeAs("carol", carol, [kit.managerCall("approve", [approvedOnly])]);
    await index();
    r = await check(carol, `&spender=${merchant}`);
    expect(r.body.indexed.details).toMatchObject([{ status: "PENDING", is_subscribed: true }]);
    await agree(carol, false);
    // Scenario 1: a fresh Base Pay charge for bob is ACTIVE: authorized for its plan key, not for another.
    const now = Number(await chain.now()) + 1;
    const p = kit.permission({ account: bob, spender: merchant, token, start: now, salt: 50n });
    await chain.setNextTimestamp(now);
    await kit.executeAs("merchant", merchant, [
      kit.managerCall("approveWithSignature", [p, await kit.sign("bob", p)]),
      kit.managerCall("spend", [p, TEST_ALLOWANCE]),
    ]);
    await index();
    await agree(bob, true);
    r = await check(bob, `&spender=${merchant}&plan_ids=${key}`);
    expect(r.body.indexed.valid_until).toBe(iso(now + TEST_PERIOD + G));
    r = await check(bob, `&spender=${merchant}&plan_ids=${token}:1:${TEST_PERIOD}`);
    expect(r.body.indexed.authorized).toBe(false);
    r = await check(bob, `&spender=${other}`);
    expect(r.body.indexed).toMatchObject({ authorized: false, details: [] });
    expect((await check(bob, `&spender=${merchant}&plan_ids=1,2`)).status).toBe(400);
    // Scenario 4: the next period has begun, uncharged: still ACTIVE inside grace, on the chain as in the index…
    await at(now + TEST_PERIOD);
    await agree(bob, true);
    await at(now + TEST_PERIOD + G - 1);
    await agree(bob, true);
    // …and past grace the same permission lapses, and every mode follows.
    await at(now + TEST_PERIOD + G);
    r = await until("the lapse in the check", async () => {
      const x = await check(bob, `&spender=${merchant}&plan_ids=${key}`);
      return x.body.indexed.authorized ? null : x;
    });
    expect(r.body.indexed.details[0]).toMatchObject({ status: "EXPIRED" });
    await agree(bob, false);
  });

  test("stats count the permissions by status, their charges as revenue and the ACTIVE ones in the run rate", async () => {
    const records = await list();
    const activity = (await get(`/v0/activity/${merchant}`)).body as { amount_charged: string }[];
    const from = iso(S - 86400);
    const stats = (await get(`/v0/stats/${merchant}?interval=month&since=${from}`)).body;
    const byStatus = stats.subscriptions.by_status as Record<string, number>;
    expect(Object.values(byStatus).reduce((a, b) => a + b, 0)).toBe(records.length);
    for (const st of ["ACTIVE", "PENDING", "EXPIRED", "CANCELLED"]) {
      expect(byStatus[st]).toBe(records.filter((r) => r.status === st).length);
    }
    const gross = (stats.revenue as { gross: string }[]).reduce((a, r) => a + BigInt(r.gross), 0n);
    expect(gross).toBe(activity.reduce((a, r) => a + BigInt(r.amount_charged), 0n));
    expect(gross).toBeGreaterThan(0n);
    const created = (stats.subscriptions.periods as { created: number }[]).reduce((a, p) => a + p.created, 0);
    expect(created).toBe(records.length);
    const active = records.filter((r) => r.status === "ACTIVE").length;
    expect((stats.run_rate as { active_subscriptions: number }[]).reduce((a, r) => a + r.active_subscriptions, 0)).toBe(
      active,
    );
  });
});
