/**
 * Random histories of spend permissions — approvals, Base Pay first charges, spends, revocations by either side, time
 * jumps, reorgs (evm_snapshot/evm_revert, each withdrawing indexed permission events), graceful indexer restarts and
 * kills (an indexer process killed with SIGKILL while it follows the chain, then a restart) — followed by a live
 * indexer with the event log: at the end its rows and its standing events equal a fresh index of the final chain.
 * One seed indexes the processor beside the manager, the other the manager alone (a permission-only chain).
 */
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import type { Address, Hex } from "viem";
import { testTokenAbi } from "../../src/chain/abis";
import type { SpendPermissionSource } from "../../src/common/config";
import { createDb, type Db } from "../../src/db/client";
import { migrate } from "../../src/db/migrate";
import type { SpendPermission } from "../../src/domain/spend-permission";
import { eventsHook } from "../../src/events/hook";
import { withPermissionEvents } from "../../src/events/spend-permission-events";
import type { Indexer } from "../../src/indexer";
import { createTestChain, type TestChain } from "../../testkit/chain";
import { dumpChainData } from "../../testkit/compare";
import { createTestDb, testDbKind } from "../../testkit/db";
import { indexTo, testIndexer } from "../../testkit/indexer";
import { spawnIndexer } from "../../testkit/indexer-child";
import { until } from "../../testkit/cli";
import { deploySpendPermissions, type SpendPermissionKit } from "../../testkit/spend-permissions";

/** A small deterministic generator (mulberry32). */
function rng(seed: number) {
  let a = seed >>> 0;
  return (n: number) => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return (((t ^ (t >>> 14)) >>> 0) / 4294967296) * n;
  };
}

/** Steps where the history forces a snapshot, a kill, a revert and a restart, beside the random ones. */
const FORCED: Record<number, "snapshot" | "kill" | "revert" | "restart"> = {
  8: "snapshot",
  14: "kill",
  20: "revert",
  27: "restart",
};

describe.each([
  [3, true],
  [11, false],
])(
  "random spend permission history with reorgs, restarts and kills, seed %d (processor indexed: %p)",
  (seed, withProcessor) => {
    let chain: TestChain;
    let kit: SpendPermissionKit;
    // The index: a Postgres database, or a PGlite data directory (closed while a child process holds it).
    let server: Db | null = null;
    let dir: string | null = null;
    let live: Db;
    let token: Address;
    let merchant: Address;
    let owners: { name: "alice" | "bob"; account: Address }[];
    let source: SpendPermissionSource;
    const hooks = () => [eventsHook({ extra: withPermissionEvents() })];
    const processor = () => (withProcessor ? chain.processor : null);
    const openLive = async () => server ?? (await createDb({ dataDir: dir! }));

    beforeAll(async () => {
      chain = await createTestChain();
      kit = await deploySpendPermissions(chain);
      if (testDbKind === "postgres") server = await createTestDb();
      else {
        dir = mkdtempSync(join(tmpdir(), "sp-random-"));
        const db = await createDb({ dataDir: dir });
        await migrate(db.sql);
        await db.close();
      }
      live = await openLive();
      token = await chain.deployToken({ symbol: "USDC", decimals: 6 });
      merchant = await kit.createAccount("merchant", { managerOwner: false });
      owners = [
        { name: "alice", account: await kit.createAccount("alice") },
        { name: "bob", account: await kit.createAccount("bob") },
      ];
      for (const o of owners) {
        await chain.send(
          chain
            .wallet("deployer")
            .writeContract({ address: token, abi: testTokenAbi, functionName: "mint", args: [o.account, 10n ** 15n] }),
        );
      }
      source = kit.source([merchant], { graceS: 3600 });
    }, 60_000);

    afterAll(async () => {
      await live?.close();
      if (dir) rmSync(dir, { recursive: true, force: true });
      await chain?.stop();
    });

    test("the live index and its event log equal a fresh index of the final chain", async () => {
      const r = rng(seed);
      const pick = <T>(xs: T[]) => xs[Math.floor(r(xs.length))]!;
      let salt = BigInt(seed) * 1000n;
      const perms: { p: SpendPermission; owner: "alice" | "bob" }[] = [];
      const done = { reorgs: 0, restarts: 0, kills: 0 };
      const start = (step: number) =>
        testIndexer(live, chain, {
          processor: processor(),
          spendPermissions: source,
          hooks: hooks(),
          tuning: { initialRange: 1 + (step % 3), maxRange: 4 },
        });
      let indexer: Indexer = start(seed);
      await indexer.start();
      let snap: Hex | null = null;
      const ignoreRevert = async (f: () => Promise<unknown>) => {
        try {
          await f();
        } catch (err) {
          if (!/reverted/.test(String(err))) throw err;
        }
      };
      const newPermission = (owner: (typeof owners)[number], now: number) =>
        kit.permission({
          account: owner.account,
          spender: merchant,
          token,
          start: now + 1,
          period: pick([3600, 86400]),
          end: r(2) < 1 ? 281474976710655 : now + 1 + Math.floor(r(3 * 86400)) + 100,
          allowance: BigInt(1 + Math.floor(r(1000))),
          salt: ++salt,
        });
      /** Base Pay's first charge of a new permission of `owner`. */
      const firstCharge = async (owner: (typeof owners)[number]) => {
        const now = Number(await chain.now());
        const p = newPermission(owner, now);
        await chain.setNextTimestamp(now + 1);
        await kit.executeAs("merchant", merchant, [
          kit.managerCall("approveWithSignature", [p, await kit.sign(owner.name, p)]),
          kit.managerCall("spend", [p, p.allowance]),
        ]);
        perms.push({ p, owner: owner.name });
      };
      /** One change of the chain's permissions (actions 0 to 6). */
      const act = async (action: number) => {
        const owner = pick(owners);
        const now = Number(await chain.now());
        if (action === 0) {
          const p = newPermission(owner, now);
          await kit.executeAs(owner.name, owner.account, [kit.managerCall("approve", [p])]);
          perms.push({ p, owner: owner.name });
        } else if (action <= 2) {
          await firstCharge(owner);
        } else if (action <= 4 && perms.length > 0) {
          const { p } = pick(perms);
          await ignoreRevert(() =>
            kit.executeAs("merchant", merchant, [kit.managerCall("spend", [p, BigInt(1 + Math.floor(r(3)))])]),
          );
        } else if (action === 5 && perms.length > 0) {
          const { p, owner: who } = pick(perms);
          const asSpender = r(2) < 1;
          // Permissions approved above a reverted snapshot are gone: revoking one still works (a Revoked with no row).
          await kit.executeAs(asSpender ? "merchant" : who, asSpender ? merchant : p.account, [
            kit.managerCall(asSpender ? "revokeAsSpender" : "revoke", [p]),
          ]);
        } else if (action === 6) {
          await chain.mineAt(now + 1 + Math.floor(r(2 * 86400)));
        }
      };
      const childEnv = {
        RPC_URL: chain.rpcUrl,
        PROCESSOR_ADDRESS: processor() ?? "",
        START_BLOCK: chain.startBlock.toString(),
        CHAIN_ID: String(chain.chainId),
        POLL_INTERVAL_MS: "20",
        INITIAL_RANGE: "1",
        MAX_RANGE: "2",
        SPEND_PERMISSION_MANAGER: source.manager,
        SPEND_PERMISSION_SPENDERS: merchant,
        SPEND_PERMISSION_GRACE_S: String(source.graceS),
        ENTRYPOINT_ADDRESSES: kit.entryPoint,
        EVENTS: "1",
        ...(server ? { DATABASE_URL: server.url! } : { PGLITE_DIR: dir! }),
      };
      try {
        for (let step = 0; step < 40; step++) {
          const forced = FORCED[step];
          const action = Math.floor(r(9));
          if (forced === undefined && action <= 6) await act(action);
          else if (forced === "snapshot" || forced === "revert" || (forced === undefined && action === 7)) {
            if (forced === "snapshot" && snap !== null) continue;
            if (snap === null && forced !== "revert") snap = await chain.snapshot();
            else if (snap !== null) {
              // Permission events above the snapshot, indexed before the revert withdraws them.
              await firstCharge(pick(owners));
              await indexer.waitForBlock(await chain.publicClient.getBlockNumber(), 30_000);
              await chain.revert(snap);
              snap = null;
              done.reorgs++;
              // Permissions created above the snapshot are gone with it: later steps may still try them (and revert).
              await chain.mineAt(Number(await chain.now()) + 7);
            }
          } else if (forced === "kill" || (forced === undefined && r(2) < 1)) {
            // An indexer process takes over the index and is killed while it follows new permission logs.
            await indexer.stop();
            if (!server) await live.close();
            const child = spawnIndexer(childEnv);
            try {
              await firstCharge(pick(owners));
              await act(Math.floor(r(7)));
              await child.waitFor((l) => l.batch !== undefined, 60_000);
              await firstCharge(pick(owners));
              await Bun.sleep(step % 7);
            } finally {
              await child.kill("SIGKILL");
            }
            done.kills++;
            live = await openLive();
            indexer = start(step);
            await indexer.start();
          } else {
            await indexer.stop();
            indexer = start(step);
            await indexer.start();
            done.restarts++;
          }
        }
        await chain.testClient.mine({ blocks: 2 });
        // After a revert the old branch may stand higher than the new head: wait for the head's own hash.
        const headBlock = await chain.publicClient.getBlock();
        await until(
          "the live index at the head",
          async () =>
            (
              await live.sql`select 1 from chains where chain_id = ${chain.chainId}
              and indexed_block = ${headBlock.number.toString()} and indexed_hash = ${headBlock.hash}`
            ).length > 0,
          60_000,
        );
        expect(indexer.status().lastError).toBeNull();
      } finally {
        await indexer.stop();
      }
      // The history did reorganize (withdrawing permission events), restart and kill the indexer.
      expect(done.reorgs).toBeGreaterThanOrEqual(1);
      expect(done.kills).toBeGreaterThanOrEqual(1);
      expect(done.restarts).toBeGreaterThanOrEqual(1);
      const [{ n: withdrawn }] = await live.sql<{ n: number }[]>`
      select count(*)::int as n from event_log where type = 'event.reverted'`;
      expect(withdrawn).toBeGreaterThan(0);
      const fresh = await createTestDb();
      try {
        await indexTo(fresh, chain, await chain.publicClient.getBlockNumber(), {
          processor: processor(),
          spendPermissions: source,
          hooks: hooks(),
        });
        const a = await dumpChainData(live.sql, chain.chainId);
        const b = await dumpChainData(fresh.sql, chain.chainId);
        expect(a.spend_permissions.length).toBeGreaterThan(0);
        expect(a.chains[0]!.processor).toBe(withProcessor ? chain.processor.toLowerCase() : null);
        expect(a.spend_permissions).toEqual(b.spend_permissions);
        expect(a.activity).toEqual(b.activity);
        expect(a.events).toEqual(b.events);
        const standing = (db: Db) =>
          db.sql<{ id: string; type: string; data: unknown }[]>`
          select id, type, data from event_log
          where reverted_by is null and type <> 'event.reverted' and data is not null
          order by block_number, log_index, sub_index, id`;
        const [x, y] = [await standing(live), await standing(fresh)];
        expect(x.map((e) => [e.id, e.type])).toEqual(y.map((e) => [e.id, e.type]));
        expect(x.map((e) => e.data)).toEqual(y.map((e) => e.data));
      } finally {
        await fresh.close();
      }
    }, 240_000);
  },
);
