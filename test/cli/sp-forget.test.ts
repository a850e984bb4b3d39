/**
 * `bun run sp:forget` as a real command over a real index (PGlite data directory, or a Postgres database): a start
 * without a spender is refused until the spender is forgotten; forgetting deletes its permissions, charges, logs,
 * webhook events and deliveries and stats, and nothing of another spender or of the module side of the same address;
 * the start is then accepted, and naming the spender again catches its history up to a fresh index's. Refusals exit 2
 * with one line and change nothing.
 */
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import type { Address } from "viem";
import { spendPermissionManagerAbi, testTokenAbi } from "../../src/chain/abis";
import type { SpendPermissionSource } from "../../src/common/config";
import { createDb, type Db } from "../../src/db/client";
import { migrate } from "../../src/db/migrate";
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
  await indexTo(db, chain, await head(), {
    spendPermissions: source,
    hooks: [statsRollupsHook(), eventsHook({ onEvents: enqueueFanOut, extra: withPermissionEvents() })],
  });
  while (await drainFanOut(db.sql));
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
      (select count(*)::int from webhook_deliveries w join webhook_endpoints e on e.id = w.endpoint_id
        where e.merchant = ${d}) as deliveries,
      (select coalesce(sum(count), 0)::int from stats_daily where merchant = ${d}) as stats_count`;
  return row!;
}

beforeAll(async () => {
  chain = await createTestChain();
  kit = await deploySpendPermissions(chain);
  token = await chain.deployToken({ symbol: "USDC", decimals: 6 });
  merchant = await kit.createAccount("merchant", { managerOwner: false });
  dave = chain.address("dave");
  const alice = await kit.createAccount("alice");
  const bob = await kit.createAccount("bob");
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
  await chain.send(
    chain.wallet("dave").writeContract({
      address: kit.manager,
      abi: spendPermissionManagerAbi,
      functionName: "spend",
      args: [forDave, 5_000n],
    }),
  );
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
        permissions: 2,
        sp_charges: 1,
        module_charges: 1,
        sp_logs: 4,
        sp_events: 4,
        module_events: 2,
        deliveries: 8,
        stats_count: 2,
      });
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
    await withDb(async (db) => expect((await daveRows(db)).permissions).toBe(2));
  });

  test("forgetting deletes dave's permission rows and nothing else; the start without him is accepted", async () => {
    const before = await withDb((db) => dumpChainData(db.sql, chain.chainId));
    const r = await forget({}, "--chain", String(chain.chainId), "--spender", dave);
    expect({ code: r.code, stderr: r.stderr }).toEqual({ code: 0, stderr: "" });
    expect(r.stdout).toContain(`forgot spender ${dave.toLowerCase()} on chain ${chain.chainId}: 2 permissions`);
    await withDb(async (db) => {
      expect(await daveRows(db)).toEqual({
        permissions: 0,
        sp_charges: 0,
        module_charges: 1,
        sp_logs: 0,
        sp_events: 0,
        module_events: 2,
        deliveries: 3,
        stats_count: 1,
      });
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
      // A start without dave is accepted, and indexes on.
      await indexToHead(db, withoutDave);
    });
  });

  test("naming dave again catches his history up: the index equals a fresh one with both spenders", async () => {
    await withDb((db) => indexToHead(db, both));
    const fresh = await createTestDb();
    try {
      await indexToHead(fresh, both);
      const a = await withDb((db) => dumpChainData(db.sql, chain.chainId));
      const b = await dumpChainData(fresh.sql, chain.chainId);
      expect(a.spend_permissions).toEqual(b.spend_permissions);
      expect(a.activity).toEqual(b.activity);
      expect(a.events).toEqual(b.events);
    } finally {
      await fresh.close();
    }
  });
});
