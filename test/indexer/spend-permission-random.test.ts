/**
 * Random histories of spend permissions — approvals, Base Pay first charges, spends, revocations by either side, time
 * jumps, reorgs (evm_snapshot/evm_revert) and indexer restarts — followed by a live indexer with the event log: at
 * the end its rows and its standing events equal a fresh index of the final chain.
 */
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import type { Address, Hex } from "viem";
import { testTokenAbi } from "../../src/chain/abis";
import type { SpendPermissionSource } from "../../src/common/config";
import type { Db } from "../../src/db/client";
import type { SpendPermission } from "../../src/domain/spend-permission";
import { eventsHook } from "../../src/events/hook";
import { withPermissionEvents } from "../../src/events/spend-permission-events";
import type { Indexer } from "../../src/indexer";
import { createTestChain, type TestChain } from "../../testkit/chain";
import { dumpChainData } from "../../testkit/compare";
import { createTestDb } from "../../testkit/db";
import { indexTo, testIndexer } from "../../testkit/indexer";
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

describe.each([3, 11])("random spend permission history with reorgs and restarts, seed %d", (seed) => {
  let chain: TestChain;
  let kit: SpendPermissionKit;
  let live: Db;
  let token: Address;
  let merchant: Address;
  let owners: { name: "alice" | "bob"; account: Address }[];
  let source: SpendPermissionSource;
  const hooks = () => [eventsHook({ extra: withPermissionEvents() })];

  beforeAll(async () => {
    chain = await createTestChain();
    kit = await deploySpendPermissions(chain);
    live = await createTestDb();
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
    source = {
      manager: kit.manager.toLowerCase(),
      spenders: [merchant.toLowerCase()],
      startBlock: Number(chain.startBlock),
      graceS: 3600,
      entryPoints: [kit.entryPoint.toLowerCase()],
    };
  }, 60_000);

  afterAll(async () => {
    await live?.close();
    await chain?.stop();
  });

  test("the live index and its event log equal a fresh index of the final chain", async () => {
    const r = rng(seed);
    const pick = <T>(xs: T[]) => xs[Math.floor(r(xs.length))]!;
    let salt = BigInt(seed) * 1000n;
    const perms: { p: SpendPermission; owner: "alice" | "bob" }[] = [];
    let indexer: Indexer = testIndexer(live, chain, {
      spendPermissions: source,
      hooks: hooks(),
      tuning: { initialRange: 1 + (seed % 3), maxRange: 4 },
    });
    await indexer.start();
    let snap: Hex | null = null;
    const ignoreRevert = async (f: () => Promise<unknown>) => {
      try {
        await f();
      } catch (err) {
        if (!/reverted/.test(String(err))) throw err;
      }
    };
    try {
      for (let step = 0; step < 40; step++) {
        const action = Math.floor(r(9));
        const owner = pick(owners);
        const now = Number(await chain.now());
        const fresh = () =>
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
        if (action === 0) {
          const p = fresh();
          await kit.executeAs(owner.name, owner.account, [kit.managerCall("approve", [p])]);
          perms.push({ p, owner: owner.name });
        } else if (action <= 2) {
          const p = fresh();
          await chain.setNextTimestamp(now + 1);
          await kit.executeAs("merchant", merchant, [
            kit.managerCall("approveWithSignature", [p, await kit.sign(owner.name, p)]),
            kit.managerCall("spend", [p, p.allowance]),
          ]);
          perms.push({ p, owner: owner.name });
        } else if (action <= 4 && perms.length > 0) {
          const { p } = pick(perms);
          await ignoreRevert(() =>
            kit.executeAs("merchant", merchant, [kit.managerCall("spend", [p, BigInt(1 + Math.floor(r(3)))])]),
          );
        } else if (action === 5 && perms.length > 0) {
          const { p, owner: who } = pick(perms);
          const asSpender = r(2) < 1;
          await kit.executeAs(asSpender ? "merchant" : who, asSpender ? merchant : p.account, [
            kit.managerCall(asSpender ? "revokeAsSpender" : "revoke", [p]),
          ]);
        } else if (action === 6) {
          await chain.mineAt(now + 1 + Math.floor(r(2 * 86400)));
        } else if (action === 7) {
          if (snap === null) snap = await chain.snapshot();
          else {
            await chain.revert(snap);
            snap = null;
            // Permissions created above the snapshot are gone with it: later steps may still try them (and revert).
            await chain.mineAt(Number(await chain.now()) + 7);
          }
        } else {
          await indexer.stop();
          indexer = testIndexer(live, chain, {
            spendPermissions: source,
            hooks: hooks(),
            tuning: { initialRange: 1 + (step % 3), maxRange: 4 },
          });
          await indexer.start();
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
    const fresh = await createTestDb();
    try {
      await indexTo(fresh, chain, await chain.publicClient.getBlockNumber(), {
        spendPermissions: source,
        hooks: hooks(),
      });
      const a = await dumpChainData(live.sql, chain.chainId);
      const b = await dumpChainData(fresh.sql, chain.chainId);
      expect(a.spend_permissions.length).toBeGreaterThan(0);
      console.log(
        "STATS",
        a.spend_permissions.length,
        a.activity.length,
        (await live.sql`select count(*)::int as n from event_log where type = 'event.reverted'`)[0]!.n,
        (await live.sql`select count(*)::int as n from event_log`)[0]!.n,
      );
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
  }, 180_000);
});
