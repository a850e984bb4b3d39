/**
 * At the head with the Spend Permission source on, the manager's `eth_getLogs` are skipped for blocks whose header
 * blooms (read in the same poll) rule the manager out, through a hosted provider (testkit/provider-proxy.ts) that
 * counts them; no permission log is missed.
 */
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import type { Address } from "viem";
import { testTokenAbi } from "../../src/chain/abis";
import { publicClientFor } from "../../src/chain/clients";
import type { SpendPermissionSource } from "../../src/common/config";
import { createTestChain, type TestChain } from "../../testkit/chain";
import { dumpChainData } from "../../testkit/compare";
import { createTestDb } from "../../testkit/db";
import { indexTo, testIndexer } from "../../testkit/indexer";
import { startProviderProxy } from "../../testkit/provider-proxy";
import { TEST_ALLOWANCE, deploySpendPermissions, type SpendPermissionKit } from "../../testkit/spend-permissions";

let chain: TestChain;
let kit: SpendPermissionKit;
let token: Address;
let merchant: Address; // a configured spender
let other: Address; // a spender nobody configured: its logs are the manager's, not ours
let alice: Address;
let source: SpendPermissionSource;

const head = () => chain.publicClient.getBlockNumber({ cacheTime: 0 });

beforeAll(async () => {
  chain = await createTestChain();
  kit = await deploySpendPermissions(chain);
  token = await chain.deployToken();
  merchant = await kit.createAccount("merchant", { managerOwner: false });
  other = await kit.createAccount("merchant2", { managerOwner: false });
  alice = await kit.createAccount("alice");
  await chain.send(
    chain
      .wallet("deployer")
      .writeContract({ address: token, abi: testTokenAbi, functionName: "mint", args: [alice, 10n ** 12n] }),
  );
  source = kit.source([merchant]);
}, 60_000);

afterAll(async () => {
  await chain?.stop();
});

/** Base Pay's first charge of a new permission of alice: Approved and Used in one block; returns that block. */
async function firstCharge(spender: Address, salt: bigint): Promise<bigint> {
  const start = Number(await chain.now());
  const p = kit.permission({ account: alice, spender, token, start, salt });
  const owner = spender === merchant ? "merchant" : "merchant2";
  const receipt = await kit.executeAs(owner, spender, [
    kit.managerCall("approveWithSignature", [p, await kit.sign("alice", p)]),
    kit.managerCall("spend", [p, TEST_ALLOWANCE]),
  ]);
  return receipt.blockNumber;
}

describe("the header bloom covers the Spend Permission manager", () => {
  test("at the head, blocks whose blooms rule the manager out cost no manager eth_getLogs, and no log is missed", async () => {
    const proxy = startProviderProxy(chain.rpcUrl, {
      latencyMs: 2,
      cuPerSecond: 1e6,
      burstCu: 1e6,
      stripBlockTimestamp: false,
    });
    const db = await createTestDb();
    const fresh = await createTestDb();
    const indexer = testIndexer(db, chain, {
      client: publicClientFor(proxy.url, 2000),
      pollMs: 5,
      spendPermissions: source,
    });
    try {
      await indexer.start();
      await indexer.waitForBlock(await head(), 60_000);
      // Empty blocks, a token's log (not ours), charges of the configured spender (ours) and of another spender (the
      // manager's, filtered out), in a fixed shuffled order, the indexer at the head after each.
      const kinds = ["empty", "other", "ours", "empty", "theirs", "other", "ours", "empty", "empty", "ours", "other"];
      const ours: bigint[] = [];
      const theirs: bigint[] = [];
      const first = (await head()) + 1n;
      const callsBefore = proxy.stats.getLogs.length;
      let salt = 0n;
      for (const kind of kinds) {
        if (kind === "empty") await chain.testClient.mine({ blocks: 1 });
        else if (kind === "other") {
          await chain.send(
            chain
              .wallet("deployer")
              .writeContract({ address: token, abi: testTokenAbi, functionName: "mint", args: [alice, 1n] }),
          );
        } else if (kind === "ours") ours.push(await firstCharge(merchant, ++salt));
        else theirs.push(await firstCharge(other, ++salt));
        await indexer.waitForBlock(await head(), 20_000);
      }
      const last = await head();
      expect(last - first + 1n).toBe(BigInt(kinds.length));
      // The blocks the manager's eth_getLogs covered during the sequence.
      const asked = new Set<bigint>();
      proxy.stats.getLogs.slice(callsBefore).forEach((range, i) => {
        if (proxy.stats.getLogsAddresses[callsBefore + i] !== source.manager) return;
        const [from, to] = range.split("-").map(BigInt) as [bigint, bigint];
        for (let n = from; n <= to; n++) if (n >= first) asked.add(n);
      });
      // Blocks with the manager's logs are always asked; empty and foreign blocks mostly are not.
      for (const n of [...ours, ...theirs]) expect(asked.has(n)).toBe(true);
      expect(asked.size).toBeLessThan(kinds.length);
      await indexer.stop();
      const permissions = await db.sql`select hash from spend_permissions where chain_id = ${chain.chainId}`;
      expect(permissions).toHaveLength(ours.length);

      await indexTo(fresh, chain, last, { spendPermissions: source });
      const [a, b] = [await dumpChainData(db.sql, chain.chainId), await dumpChainData(fresh.sql, chain.chainId)];
      for (const table of Object.keys(a) as (keyof typeof a)[])
        expect({ [table]: a[table] }).toEqual({ [table]: b[table] });
    } finally {
      await indexer.stop();
      proxy.stop();
      await db.close();
      await fresh.close();
    }
  }, 120_000);
});
