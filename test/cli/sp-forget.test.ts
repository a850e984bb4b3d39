/**
 * `bun run sp:forget` as a real command over a real index (PGlite data directory, or a Postgres database): a start
 * without a spender is refused until the spender is forgotten; forgetting deletes its permissions, charges, logs,
 * webhook events and deliveries and stats, and nothing of another spender or of the module side of the same address;
 * the start is then accepted, and MRR movements, rollups and the event log equal a fresh index's without the spender
 * (a customer with only its permissions has none left; one that also subscribed to its module is folded again from
 * the module's status events). Naming the spender again catches its history up to a fresh index's. Refusals exit 2
 * with one line and change nothing.
 */
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { encodeFunctionData, parseEventLogs, type Address } from "viem";
import { mrrAnalytics } from "../../src/analytics/hook";
import { spendPermissionManagerAbi, subscriptionModuleAbi, testTokenAbi } from "../../src/chain/abis";
import type { SpendPermissionSource } from "../../src/common/config";
import { createDb, type Db } from "../../src/db/client";
import { migrate } from "../../src/db/migrate";
import { EVENT_COLUMNS } from "../../src/events/envelope";
import { eventsHook } from "../../src/events/hook";
import { withPermissionEvents } from "../../src/events/spend-permission-events";
import { statsRollupsHook } from "../../src/indexer/rollups";
import { drainFanOut, enqueueFanOut } from "../../src/webhooks/fanout";
import { createTestChain, type TestChain } from "../../testkit/chain";
import { runCommand } from "../../testkit/cli";
import { dumpChainData } from "../../testkit/compare";
import { createTestDb, testDbKind } from "../../testkit/db";
import { indexTo, testIndexer } from "../../testkit/indexer";
import { TEST_ALLOWANCE, deploySpendPermissions, type SpendPermissionKit } from "../../testkit/spend-permissions";
import { endpointForAll } from "../../testkit/webhooks";

let chain: TestChain;
let kit: SpendPermissionKit;
let token: Address;
let merchant: Address; // a smart-account spender: kept
let dave: Address; // an EOA spender that also owns a module: forgotten
let alice: Address; // a customer of dave's module and of a permission to dave, in one token
let bob: Address; // a customer of dave's permissions only
let carol: string; // a customer of dave's module only (an EOA)
let both: SpendPermissionSource;
let withoutDave: SpendPermissionSource;
/** Where the index lives: a Postgres database kept open by the test, or a PGlite data directory opened per step. */
let server: Db | undefined;
let dataDir: string | undefined;
let dbEnv: Record<string, string>;

const head = () => chain.publicClient.getBlockNumber();
/** Runs `fn` on the index (opening the PGlite directory for it, so the command can open it after). */
async function withDb<T>(fn: (db: Db) => Promise<T>): Promise<T> {
  if (server) return fn(server);
  const db = await createDb({ dataDir });
  try {
    return await fn(db);
  } finally {
    await db.close();
  }
}
async function indexToHead(db: Db, source: SpendPermissionSource) {
  const mrr = mrrAnalytics();
  await indexTo(db, chain, await head(), {
    spendPermissions: source,
    hooks: [
      statsRollupsHook(),
      eventsHook({ onEvents: enqueueFanOut, extra: withPermissionEvents(), derive: mrr.derive, now: () => 0 }),
      mrr.hook,
    ],
  });
  while (await drainFanOut(db.sql));
}

/** The MRR tables, the event log (without seqs, by id) and the deliveries' events of the index. */
async function derived(db: Db) {
  return {
    movements: await db.sql`select * from mrr_movements order by id`,
    daily: await db.sql`
      select merchant, token, day, kind, reason, recovered, stretch_day, prev_churn_day, count::text, amount::text
      from mrr_daily where count <> 0 or amount <> 0
      order by merchant, token, day, kind, reason, recovered, stretch_day, prev_churn_day`,
    cohorts: await db.sql`
      select merchant, token, interval, cohort_start::text, period_start::text, amount::text, customers::text,
        size::text
      from mrr_cohorts where amount <> 0 or customers <> 0 or size <> 0
      order by merchant, token, interval, cohort_start, period_start`,
    stats: await db.sql`select * from stats_daily order by merchant, day, token, type, reason`,
    events: (await db.sql`select ${db.sql.unsafe(EVENT_COLUMNS)} from event_log e order by e.id`).map(
      ({ seq: _seq, ...r }) => r,
    ),
    deliveries: (await db.sql`select event_id from webhook_deliveries order by event_id`).map((r) => r.event_id),
  };
}
const forget = (env: Record<string, string>, ...args: string[]) =>
  runCommand("src/cli/sp-forget.ts", { ...dbEnv, ...env }, ...args);

/** Counts of dave's rows, by table, on the index. */
async function daveRows(db: Db) {
  const d = dave.toLowerCase();
  const manager = kit.manager.toLowerCase();
  const [row] = await db.sql<Record<string, number>[]>`
    select
      (select count(*)::int from spend_permissions where merchant = ${d}) as permissions,
      (select count(*)::int from activity where merchant = ${d} and module = ${manager}) as sp_charges,
      (select count(*)::int from activity where merchant = ${d} and module <> ${manager}) as module_charges,
      (select count(*)::int from events where address = ${manager} and args->>'spender' = ${d}) as sp_logs,
      (select count(*)::int from merchant_events where merchant = ${d}
        and data->'object'->>'allocation_id' like ${`%:${manager}:%`}) as sp_events,
      (select count(*)::int from merchant_events where merchant = ${d}
        and s_module is not null and s_module <> ${manager}) as module_events,
      (select count(*)::int from merchant_events where merchant = ${d} and type like 'customer.%') as customer_events,
      (select count(*)::int from webhook_deliveries w join webhook_endpoints e on e.id = w.endpoint_id
        where e.merchant = ${d}) as deliveries,
      (select coalesce(sum(count), 0)::int from stats_daily where merchant = ${d}) as stats_count`;
  return row!;
}

/** dave's MRR movements in chain order: the customer, the kind, and whether they name a permission. */
async function daveMovements(db: Db) {
  const manager = kit.manager.toLowerCase();
  return db.sql<{ customer: string; kind: string; permission: boolean }[]>`
    select customer, kind, exists (select 1 from unnest(allocation_ids) a where a like ${`%:${manager}:%`}) as permission
    from mrr_movements where merchant = ${dave.toLowerCase()} order by block_number, at, customer`.then((r) => [...r]);
}

beforeAll(async () => {
  chain = await createTestChain();
  kit = await deploySpendPermissions(chain);
  token = await chain.deployToken({ symbol: "USDC", decimals: 6 });
  merchant = await kit.createAccount("merchant", { managerOwner: false });
  dave = chain.address("dave");
  carol = chain.address("carol").toLowerCase();
  alice = await kit.createAccount("alice");
  bob = await kit.createAccount("bob");
  for (const to of [alice, bob]) {
    await chain.send(
      chain
        .wallet("deployer")
        .writeContract({ address: token, abi: testTokenAbi, functionName: "mint", args: [to, 10n ** 12n] }),
    );
  }
  // dave's module: a plan and a charged subscription (the module side of the same address).
  const module = await chain.createModule("dave");
  await chain.createPlan("dave", module, { planId: 1, token, amount: 1_000n, interval: 86_400 });
  await chain.fund("carol", token, 1_000_000n);
  await chain.charge(module, await chain.subscribe("carol", module, 1));
  // alice's account subscribes to it too: a customer of dave's in the token of her permission to him.
  const receipt = await kit.executeAs("alice", alice, [
    {
      target: token,
      value: 0n,
      data: encodeFunctionData({ abi: testTokenAbi, functionName: "approve", args: [chain.processor, 2n ** 255n] }),
    },
    {
      target: module,
      value: 0n,
      data: encodeFunctionData({ abi: subscriptionModuleAbi, functionName: "subscribe", args: [1, 0, 0n] }),
    },
  ]);
  const [created] = parseEventLogs({
    abi: subscriptionModuleAbi,
    eventName: "SubscriptionCreated",
    logs: receipt.logs,
  });
  await chain.charge(module, created!.args.subscriptionId);
  // Permissions: alice → merchant (charged), alice → dave (charged by dave), bob → dave (approved then revoked), and
  // a Revoked of dave's for a permission never approved.
  const start = Number(await chain.now());
  const forMerchant = kit.permission({ account: alice, spender: merchant, token, start, salt: 1n });
  await kit.executeAs("merchant", merchant, [
    kit.managerCall("approveWithSignature", [forMerchant, await kit.sign("alice", forMerchant)]),
    kit.managerCall("spend", [forMerchant, TEST_ALLOWANCE]),
  ]);
  const forDave = kit.permission({ account: alice, spender: dave, token, start, salt: 2n });
  const revoked = kit.permission({ account: bob, spender: dave, token, start, salt: 3n });
  const never = kit.permission({ account: bob, spender: dave, token, start, salt: 4n });
  await kit.executeAs("alice", alice, [kit.managerCall("approve", [forDave])]);
  await kit.executeAs("bob", bob, [kit.managerCall("approve", [revoked]), kit.managerCall("revoke", [revoked])]);
  await kit.executeAs("bob", bob, [kit.managerCall("revoke", [never])]);
  // bob: a permission dave charges, then bob revokes (a customer of dave's permissions only: new, then churn).
  const paid = kit.permission({ account: bob, spender: dave, token, start, salt: 5n });
  await kit.executeAs("bob", bob, [kit.managerCall("approve", [paid])]);
  for (const p of [forDave, paid]) {
    await chain.send(
      chain.wallet("dave").writeContract({
        address: kit.manager,
        abi: spendPermissionManagerAbi,
        functionName: "spend",
        args: [p, 5_000n],
      }),
    );
  }
  await kit.executeAs("bob", bob, [kit.managerCall("revoke", [paid])]);
  const base = {
    manager: kit.manager.toLowerCase(),
    startBlock: Number(chain.startBlock),
    graceS: 86400,
    entryPoints: [kit.entryPoint.toLowerCase()],
  };
  both = { ...base, spenders: [merchant.toLowerCase(), dave.toLowerCase()].sort() };
  withoutDave = { ...base, spenders: [merchant.toLowerCase()] };
  if (testDbKind === "postgres") {
    server = await createTestDb({ max: 4 });
    dbEnv = { DATABASE_URL: server.url! };
  } else {
    dataDir = mkdtempSync(join(tmpdir(), "sp-forget-"));
    dbEnv = { DATA_DIR: dataDir };
    const db = await createDb({ dataDir });
    await migrate(db.sql);
    await db.close();
  }
  await withDb(async (db) => {
    await endpointForAll(db.sql, dave.toLowerCase(), "https://hooks.example.com/dave");
    await endpointForAll(db.sql, merchant.toLowerCase(), "https://hooks.example.com/merchant");
    await indexToHead(db, both);
  });
}, 120_000);

afterAll(async () => {
  await server?.close();
  if (dataDir) rmSync(dataDir, { recursive: true, force: true });
  await chain?.stop();
});

describe("bun run sp:forget", () => {
  test("before: dave's rows are indexed, and a start without dave is refused naming him", async () => {
    await withDb(async (db) => {
      expect(await daveRows(db)).toEqual({
        permissions: 3,
        sp_charges: 2,
        module_charges: 2,
        sp_logs: 6,
        sp_events: 7,
        module_events: 4,
        customer_events: 1,
        deliveries: 16,
        stats_count: 4,
      });
      // MRR: carol's and alice's module subscriptions, then alice's permission (an expansion); bob's permission (new,
      // then churn).
      expect(await daveMovements(db)).toEqual([
        { customer: carol, kind: "new", permission: false },
        { customer: alice.toLowerCase(), kind: "new", permission: false },
        { customer: alice.toLowerCase(), kind: "expansion", permission: true },
        { customer: bob.toLowerCase(), kind: "new", permission: true },
        { customer: bob.toLowerCase(), kind: "churn", permission: true },
      ]);
      const removed = testIndexer(db, chain, { spendPermissions: withoutDave });
      await expect(removed.start()).rejects.toThrow(`SPEND_PERMISSION_SPENDERS no longer names ${dave.toLowerCase()}`);
      await removed.stop();
    });
  });

  test("bad arguments and refusals exit 2 with one line and change nothing", async () => {
    const cases: [Record<string, string>, string[], RegExp][] = [
      [{}, [], /--chain and --spender are required/],
      [{}, ["--chain", "x", "--spender", dave], /--chain "x" is not a chain id/],
      [{}, ["--chain", String(chain.chainId), "--spender", "0x12"], /--spender "0x12" is not an address/],
      [{}, ["--chain", String(chain.chainId), "--spender", dave, "--yes"], /unexpected argument --yes/],
      // The environment still names dave for this chain: the indexer would index him again.
      [
        {
          RPC_URL: chain.rpcUrl,
          CHAIN_ID: String(chain.chainId),
          SPEND_PERMISSION_MANAGER: kit.manager,
          SPEND_PERMISSION_SPENDERS: `${merchant},${dave}`,
        },
        ["--chain", String(chain.chainId), "--spender", dave],
        /SPEND_PERMISSION_SPENDERS names 0x[0-9a-f]{40} for chain \d+: remove the spender/,
      ],
      [{}, ["--chain", "999", "--spender", dave], /chain 999 is not indexed in this database/],
      [{}, ["--chain", String(chain.chainId), "--spender", chain.address("erin")], /is not an indexed spender/],
    ];
    for (const [env, args, message] of cases) {
      const r = await forget(env, ...args);
      expect({ args, code: r.code }).toEqual({ args, code: 2 });
      expect(r.stderr.trim().split("\n")).toHaveLength(1);
      expect(r.stderr).toMatch(message);
    }
    // The index in use: an indexer holding the chain's lock (Postgres), or a process holding the data directory.
    const holder = server ? testIndexer(server, chain, { spendPermissions: both }) : null;
    const held = server ? null : await createDb({ dataDir });
    try {
      await holder?.start();
      const r = await forget({}, "--chain", String(chain.chainId), "--spender", dave);
      expect(r.code).toBe(2);
      expect(r.stderr.trim().split("\n")).toHaveLength(1);
      expect(r.stderr).toMatch(server ? /an indexer of chain \d+ is running/ : /in use|holds/);
    } finally {
      await holder?.stop();
      await held?.close();
    }
    await withDb(async (db) => expect((await daveRows(db)).permissions).toBe(3));
  });

  test("forgetting deletes dave's permission rows and nothing else; the start without him is accepted", async () => {
    const before = await withDb((db) => dumpChainData(db.sql, chain.chainId));
    const r = await forget({}, "--chain", String(chain.chainId), "--spender", dave);
    expect({ code: r.code, stderr: r.stderr }).toEqual({ code: 0, stderr: "" });
    expect(r.stdout).toContain(`forgot spender ${dave.toLowerCase()} on chain ${chain.chainId}: 3 permissions`);
    expect(r.stdout).toContain("2 MRR movements");
    expect(r.stdout).toContain("the MRR of 1 customers with module subscriptions");
    await withDb(async (db) => {
      expect(await daveRows(db)).toEqual({
        permissions: 0,
        sp_charges: 0,
        module_charges: 2,
        sp_logs: 0,
        sp_events: 0,
        module_events: 4,
        customer_events: 0,
        deliveries: 6,
        stats_count: 2,
      });
      // bob's movements went with the permissions; alice's wait for the indexer's start to be folded again.
      expect(await daveMovements(db)).toEqual([
        { customer: carol, kind: "new", permission: false },
        { customer: alice.toLowerCase(), kind: "new", permission: false },
        { customer: alice.toLowerCase(), kind: "expansion", permission: true },
      ]);
      expect((await db.sql`select mrr_rebuild_due from chains`).map((x) => x.mrr_rebuild_due)).toEqual([true]);
      const after = await dumpChainData(db.sql, chain.chainId);
      const [sp] = await db.sql`select spend_permission_spenders from chains`;
      expect(sp!.spend_permission_spenders).toBe(merchant.toLowerCase());
      // Exactly dave's permission rows are gone: the merchant's and the module side's stay as they were.
      const d = dave.toLowerCase();
      const manager = kit.manager.toLowerCase();
      type Row = Record<string, any>;
      expect(after.spend_permissions).toEqual(before.spend_permissions.filter((x: Row) => x.merchant !== d));
      expect(after.activity).toEqual(before.activity.filter((x: Row) => !(x.module === manager && x.merchant === d)));
      expect(after.events).toEqual(before.events.filter((x: Row) => !(x.address === manager && x.args.spender === d)));
      for (const t of ["modules", "plans", "subscriptions", "tokens", "blocks"] as const) {
        expect(after[t]).toEqual(before[t]);
      }
      // A start without dave is accepted, and indexes on: alice's MRR is folded again from her module subscription.
      await indexToHead(db, withoutDave);
      expect(await daveMovements(db)).toEqual([
        { customer: carol, kind: "new", permission: false },
        { customer: alice.toLowerCase(), kind: "new", permission: false },
      ]);
      expect((await db.sql`select mrr_rebuild_due from chains`).map((x) => x.mrr_rebuild_due)).toEqual([false]);
    });
    // The MRR movements and rollups, the stats, the event log and its deliveries equal a fresh index's without dave.
    const fresh = await createTestDb();
    try {
      await endpointForAll(fresh.sql, dave.toLowerCase(), "https://hooks.example.com/dave");
      await endpointForAll(fresh.sql, merchant.toLowerCase(), "https://hooks.example.com/merchant");
      await indexToHead(fresh, withoutDave);
      expect(await withDb(derived)).toEqual(await derived(fresh));
    } finally {
      await fresh.close();
    }
  });

  test("naming dave again catches his history up: the index equals a fresh one with both spenders", async () => {
    await withDb((db) => indexToHead(db, both));
    const fresh = await createTestDb();
    try {
      await endpointForAll(fresh.sql, dave.toLowerCase(), "https://hooks.example.com/dave");
      await endpointForAll(fresh.sql, merchant.toLowerCase(), "https://hooks.example.com/merchant");
      await indexToHead(fresh, both);
      const a = await withDb((db) => dumpChainData(db.sql, chain.chainId));
      const b = await dumpChainData(fresh.sql, chain.chainId);
      expect(a.spend_permissions).toEqual(b.spend_permissions);
      expect(a.activity).toEqual(b.activity);
      expect(a.events).toEqual(b.events);
      // alice (a customer of both kinds) is folded again at the start; bob's movements, his churn event and its
      // delivery come back from the catch-up as a fresh index made them.
      expect(await withDb(derived)).toEqual(await derived(fresh));
    } finally {
      await fresh.close();
    }
  });
});
