/**
 * The Spend Permission keeper against a real anvil chain, the project's manager and smart accounts, and the real
 * indexer (spend-permissions spec §5, §10 tests 5 and 14): a PENDING permission is spent within one pass and once per
 * period after that, two instances of the key send one spend per period, a revoked permission is never spent, a
 * short balance sends nothing and is retried on the schedule, a second spend in a period reverts and the keeper sends
 * none, and nothing is sent when less than two poll intervals remain in the period.
 */
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { encodeFunctionData, getAbiItem, type Address, type Hash } from "viem";
import { spendPermissionManagerAbi, testTokenAbi } from "../../src/chain/abis";
import { publicClientFor } from "../../src/chain/clients";
import type { SpendPermissionSource } from "../../src/common/config";
import type { Db } from "../../src/db/client";
import type { SpendPermission } from "../../src/domain/spend-permission";
import type { Indexer } from "../../src/indexer";
import { createSpendPermissionKeeper, type Keeper, type KeeperOptions, type TickResult } from "../../src/keeper";
import { revertName } from "../../src/keeper/errors";
import { findDuePermissions } from "../../src/keeper/spend-permission-queries";
import { spendPermissionTarget, type SpendPermissionKeeperConfig } from "../../src/keeper/spend-permissions";
import type { WalletName } from "../../testkit/chain";
import { createTestChain, type TestChain } from "../../testkit/chain";
import { morePasses, until } from "../../testkit/cli";
import { createTestDb } from "../../testkit/db";
import { testIndexer } from "../../testkit/indexer";
import {
  TEST_ALLOWANCE,
  TEST_PERIOD,
  deploySpendPermissions,
  type SpendPermissionKit,
} from "../../testkit/spend-permissions";

const SCHEDULE = [3600, 21600];

let chain: TestChain;
let kit: SpendPermissionKit;
let db: Db;
let token: Address;
let merchant: Address;
let source: SpendPermissionSource;
let indexer: Indexer;

beforeAll(async () => {
  chain = await createTestChain();
  kit = await deploySpendPermissions(chain);
  db = await createTestDb();
  token = await chain.deployToken({ symbol: "USDC", decimals: 6 });
  // The keeper spends as the spender, so the merchant's spender is an EOA whose key the keeper holds.
  merchant = chain.address("merchant");
  source = kit.source([merchant]);
  indexer = testIndexer(db, chain, { spendPermissions: source, pollMs: 50 });
  await indexer.start();
}, 60_000);

afterAll(async () => {
  await indexer?.stop();
  await db?.close();
  await chain?.stop();
}, 60_000);

/** A keeper of the merchant's key (not started: tests run its passes with `tick`). */
function makeKeeper(
  extra: Partial<Omit<KeeperOptions<SpendPermissionKeeperConfig>, "config">> & { pollMs?: number } = {},
): Keeper {
  const { pollMs = 200, ...rest } = extra;
  return createSpendPermissionKeeper({
    sql: db.sql,
    client: publicClientFor(chain.rpcUrl),
    wallet: chain.wallet("merchant"),
    config: { chainId: chain.chainId, manager: kit.manager, POLL_INTERVAL_MS: pollMs, retrySchedule: SCHEDULE },
    ...rest,
  });
}

/** Runs `fn` with keepers made by `make`, stopping them (and so giving up the key's lock) afterwards. */
async function withKeepers<T>(keepers: Keeper[], fn: () => Promise<T>): Promise<T> {
  try {
    return await fn();
  } finally {
    await Promise.all(keepers.map((k) => k.stop()));
  }
}

const head = () => chain.publicClient.getBlockNumber({ cacheTime: 0 });
const synced = async () => indexer.waitForBlock(await head(), 30_000);
const idOf = (p: SpendPermission) => BigInt(kit.hash(p)).toString();

/** A smart account of `owner` (the manager one of its owners) holding `balance` USDC. */
async function account(owner: WalletName, balance: bigint): Promise<Address> {
  const a = await kit.createAccount(owner);
  if (balance > 0n) await mint(a, balance);
  return a;
}

async function mint(to: Address, amount: bigint) {
  await chain.send(
    chain
      .wallet("deployer")
      .writeContract({ address: token, abi: testTokenAbi, functionName: "mint", args: [to, amount] }),
  );
}

/** The account approves a permission for the merchant starting now (or at `fields.start`), and the index has it. */
async function approved(owner: WalletName, acct: Address, fields: Partial<SpendPermission> = {}) {
  const p = kit.permission({ account: acct, spender: merchant, token, start: Number(await chain.now()), ...fields });
  await kit.executeAs(owner, acct, [kit.managerCall("approve", [p])]);
  await synced();
  return p;
}

/** Mines a block at `t` and waits for the index to reach it. */
async function warp(t: number | bigint) {
  await chain.mineAt(BigInt(t));
  await synced();
}

const sentFor = (r: TickResult, p: SpendPermission) => r.sent.filter((s) => s.subscriptionId === idOf(p));
const skippedFor = (r: TickResult, p: SpendPermission) =>
  r.skipped.filter((s) => s.subscriptionId === idOf(p)).map((s) => s.reason);

/** Waits until a sent spend is mined and indexed. */
async function minedAndIndexed(hash: Hash) {
  const receipt = await chain.publicClient.waitForTransactionReceipt({ hash, pollingInterval: 20 });
  expect(receipt.status).toBe("success");
  await indexer.waitForBlock(receipt.blockNumber, 30_000);
  return receipt;
}

async function row(p: SpendPermission) {
  const [r] = await db.sql<{ times_executed: number; next_charge_at: string; last_period_start: string | null }[]>`
    select times_executed, next_charge_at::text as next_charge_at, last_period_start::text as last_period_start
    from spend_permissions where chain_id = ${chain.chainId} and hash = ${kit.hash(p)}`;
  return r!;
}

async function charges(p: SpendPermission) {
  return [
    ...(await db.sql<{ type: string; amount: string; keeper: string; period_start: string; tx_hash: string }[]>`
    select type, amount::text as amount, keeper, period_start::text as period_start, tx_hash from activity
    where chain_id = ${chain.chainId} and permission_hash = ${kit.hash(p)} order by block_number, log_index`),
  ];
}

async function recheck(p: SpendPermission) {
  const [r] = await db.sql<{ failures: number; checked_at: string; period_end: string; times_executed: number }[]>`
    select failures, checked_at::text as checked_at, period_end::text as period_end, times_executed
    from keeper_rechecks where chain_id = ${chain.chainId} and subscription_id = ${idOf(p)}`;
  return r;
}

/** The webhook events of `p`, by type. */
async function eventsOf(p: SpendPermission) {
  return (
    await db.sql<{ type: string }[]>`
      select type from merchant_events where chain_id = ${chain.chainId} and s_subscription_id = ${idOf(p)}
      order by seq`
  ).map((e) => e.type);
}

/** Used logs of `p` on chain: what was really spent, whoever indexed it. */
async function usedOnChain(p: SpendPermission) {
  const logs = await chain.publicClient.getLogs({
    address: kit.manager,
    event: getAbiItem({ abi: spendPermissionManagerAbi, name: "SpendPermissionUsed" }),
    args: { hash: kit.hash(p) },
    fromBlock: 0n,
    toBlock: "latest",
  });
  return logs.map((l) => l.args.periodSpend!.start);
}

/** The permissions due to the merchant's keeper at `now` (as a fresh keeper instance would read them). */
async function dueIds(now: bigint) {
  const due = await findDuePermissions(db.sql, {
    chainId: chain.chainId,
    manager: kit.manager,
    spender: merchant,
    now,
    retrySchedule: SCHEDULE,
    owner: "test:reader",
    limit: 100,
  });
  return due.map((d) => d.subscription_id);
}

/** Transactions of the merchant's key that spend `p`, mined from block `from` on (reverted ones included). */
async function spendTxs(p: SpendPermission, from: bigint) {
  const target = spendPermissionTarget(chain.chainId, kit.manager);
  const found: Hash[] = [];
  for (let n = from; n <= (await head()); n++) {
    const block = await chain.publicClient.getBlock({ blockNumber: n, includeTransactions: true });
    for (const tx of block.transactions) {
      if (tx.from.toLowerCase() !== merchant.toLowerCase()) continue;
      if (target.decode(tx.input)?.subscriptionId === idOf(p)) found.push(tx.hash);
    }
  }
  return found;
}

describe("the Spend Permission keeper", () => {
  test("a PENDING permission is spent within one pass; after the rollover it is spent once more, and only once", async () => {
    const outcomes: string[] = [];
    const keeper = makeKeeper({ observer: { charge: (o) => void outcomes.push(o) } });
    await withKeepers([keeper], async () => {
      const acct = await account("alice", 100_000_000n);
      const p = await approved("alice", acct);
      expect((await row(p)).times_executed).toBe(0);

      const first = await keeper.tick();
      const [sent] = sentFor(first, p);
      expect(sent).toBeDefined();
      expect(sent!.module).toBe(kit.manager.toLowerCase());
      const receipt = await minedAndIndexed(sent!.hash);
      expect(receipt.from.toLowerCase()).toBe(merchant.toLowerCase());
      expect(await charges(p)).toEqual([
        {
          type: "CHARGE",
          amount: TEST_ALLOWANCE.toString(),
          keeper: merchant.toLowerCase(),
          period_start: String(p.start),
          tx_hash: sent!.hash,
        },
      ]);
      // The next pass collects the receipt (the observer hears it), and nothing is due until the next period.
      const again = await keeper.tick();
      expect(sentFor(again, p)).toEqual([]);
      expect(outcomes).toEqual(["sent", "succeeded"]);
      expect((await row(p)).next_charge_at).toBe(String(p.start + TEST_PERIOD));

      await warp(p.start + TEST_PERIOD);
      const renewal = await keeper.tick();
      const [second] = sentFor(renewal, p);
      expect(second).toBeDefined();
      // Mined at once (automine) but not indexed yet: the next pass holds it as in flight, it sends nothing.
      expect(sentFor(await keeper.tick(), p)).toEqual([]);
      await minedAndIndexed(second!.hash);
      expect(sentFor(await keeper.tick(), p)).toEqual([]);
      expect(sentFor(await keeper.tick(), p)).toEqual([]);
      expect((await row(p)).times_executed).toBe(2);
      expect((await charges(p)).map((c) => c.period_start)).toEqual([String(p.start), String(p.start + TEST_PERIOD)]);
      expect(await usedOnChain(p)).toEqual([p.start, p.start + TEST_PERIOD]);
    });
  }, 60_000);

  test("two keeper instances of the key on one database send one spend per period", async () => {
    const a = makeKeeper();
    const b = makeKeeper();
    await withKeepers([a, b], async () => {
      const acct = await account("bob", 100_000_000n);
      const p = await approved("bob", acct);
      await Promise.all([a.start(), b.start()]);
      await until("the first spend to be indexed", async () => (await row(p)).times_executed === 1);
      await morePasses(3, a, b);
      await synced();
      expect(await usedOnChain(p)).toEqual([p.start]);

      await warp(p.start + TEST_PERIOD);
      await until("the renewal to be indexed", async () => (await row(p)).times_executed === 2);
      await morePasses(3, a, b);
      await synced();
      expect(await usedOnChain(p)).toEqual([p.start, p.start + TEST_PERIOD]);
      expect((await row(p)).times_executed).toBe(2);
    });
  }, 60_000);

  test("a revoked permission is never spent, in its period or later", async () => {
    const keeper = makeKeeper();
    await withKeepers([keeper], async () => {
      const acct = await account("carol", 100_000_000n);
      const p = await approved("carol", acct);
      await kit.executeAs("carol", acct, [kit.managerCall("revoke", [p])]);
      await synced();
      const from = await head();
      const r = await keeper.tick();
      expect(sentFor(r, p)).toEqual([]);
      expect(await dueIds(BigInt(r.now))).not.toContain(idOf(p));
      await warp(p.start + TEST_PERIOD + 10);
      expect(sentFor(await keeper.tick(), p)).toEqual([]);
      expect(await usedOnChain(p)).toEqual([]);
      expect(await spendTxs(p, from)).toEqual([]);
    });
  }, 60_000);

  test("a short balance sends no transaction: the failure is counted and retried on the schedule", async () => {
    const keeper = makeKeeper();
    await withKeepers([keeper], async () => {
      const acct = await account("dave", 4_000_000n);
      const p = await approved("dave", acct);
      const from = await head();

      const r1 = await keeper.tick();
      expect(sentFor(r1, p)).toEqual([]);
      expect(skippedFor(r1, p)).toEqual(["SafeERC20FailedOperation"]);
      const now1 = BigInt(r1.now);
      expect(await recheck(p)).toEqual({
        failures: 1,
        checked_at: r1.now,
        period_end: String(p.start + TEST_PERIOD),
        times_executed: 0,
      });
      // Nothing recorded: no activity, no log beyond the Approved.
      expect(await charges(p)).toEqual([]);
      const [{ n }] = await db.sql<{ n: number }[]>`
        select count(*)::int as n from events where chain_id = ${chain.chainId} and subscription_id = ${idOf(p)}`;
      expect(n).toBe(1);
      // Due again KEEPER_RETRY_SCHEDULE[0] after the failure, not before; a pass meanwhile leaves it alone.
      expect(await dueIds(now1 + 3599n)).not.toContain(idOf(p));
      expect(await dueIds(now1 + 3600n)).toContain(idOf(p));
      expect(skippedFor(await keeper.tick(), p)).toEqual([]);

      await warp(now1 + 3600n);
      const r2 = await keeper.tick();
      expect(skippedFor(r2, p)).toEqual(["SafeERC20FailedOperation"]);
      expect((await recheck(p))!.failures).toBe(2);
      // Then after KEEPER_RETRY_SCHEDULE[1] (the last entry repeats).
      const now2 = BigInt(r2.now);
      expect(await dueIds(now2 + 21599n)).not.toContain(idOf(p));
      expect(await dueIds(now2 + 21600n)).toContain(idOf(p));

      // A new period starts the count over: due at once, one failure.
      await warp(p.start + TEST_PERIOD);
      expect(await dueIds(BigInt(p.start + TEST_PERIOD))).toContain(idOf(p));
      const r3 = await keeper.tick();
      expect(skippedFor(r3, p)).toEqual(["SafeERC20FailedOperation"]);
      expect(await recheck(p)).toMatchObject({ failures: 1, period_end: String(p.start + 2 * TEST_PERIOD) });
      expect(await spendTxs(p, from)).toEqual([]);

      // Topped up, it is spent at its next retry.
      await mint(acct, 10_000_000n);
      await warp(BigInt(r3.now) + 3600n);
      const [sent] = sentFor(await keeper.tick(), p);
      expect(sent).toBeDefined();
      await minedAndIndexed(sent!.hash);
      expect(await spendTxs(p, from)).toEqual([sent!.hash]);
      expect((await charges(p)).map((c) => c.period_start)).toEqual([String(p.start + TEST_PERIOD)]);
      // The Used log changed the permission: the old count no longer applies, and nothing is due this period.
      expect(await dueIds(BigInt(r3.now) + 3600n)).not.toContain(idOf(p));
    });
  }, 60_000);

  test("a second spend in a period reverts ExceededSpendPermission with no record or event; the keeper sends nothing", async () => {
    const keeper = makeKeeper();
    await withKeepers([keeper], async () => {
      const acct = await account("erin", 100_000_000n);
      const p = await approved("erin", acct);
      const [sent] = sentFor(await keeper.tick(), p);
      await minedAndIndexed(sent!.hash);
      const eventsBefore = await eventsOf(p);

      // The merchant tries a second spend of the same period itself.
      const second = { address: kit.manager, abi: spendPermissionManagerAbi, functionName: "spend", args: [p, 1n] };
      const err = await chain.publicClient
        .simulateContract({ ...second, account: merchant } as Parameters<typeof chain.publicClient.simulateContract>[0])
        .then(
          () => null,
          (e: unknown) => e,
        );
      expect(revertName(err)).toBe("ExceededSpendPermission");
      const reverted = await chain.publicClient.waitForTransactionReceipt({
        hash: await chain.wallet("merchant").sendTransaction({
          to: kit.manager,
          data: encodeFunctionData({ abi: spendPermissionManagerAbi, functionName: "spend", args: [p, 1n] }),
          gas: 300_000n,
        }),
      });
      expect(reverted.status).toBe("reverted");
      await synced();
      expect(await charges(p)).toHaveLength(1);
      expect(await eventsOf(p)).toEqual(eventsBefore);
      const from = await head();
      const r = await keeper.tick();
      expect(sentFor(r, p)).toEqual([]);
      expect(skippedFor(r, p)).toEqual([]);
      expect(await spendTxs(p, from + 1n)).toEqual([]);
    });
  }, 60_000);

  test("a spend the merchant made itself and the index has not seen: the simulation reverts, nothing is sent", async () => {
    const keeper = makeKeeper();
    await withKeepers([keeper], async () => {
      const acct = await account("alice", 100_000_000n);
      const p = await approved("alice", acct, { salt: 7n });
      await indexer.stop();
      try {
        await chain.send(
          chain.wallet("merchant").writeContract({
            address: kit.manager,
            abi: spendPermissionManagerAbi,
            functionName: "spend",
            args: [p, TEST_ALLOWANCE],
          }),
        );
        const from = await head();
        const r = await keeper.tick();
        expect(sentFor(r, p)).toEqual([]);
        expect(skippedFor(r, p)).toEqual(["ExceededSpendPermission"]);
        expect(await spendTxs(p, from + 1n)).toEqual([]);
        expect((await recheck(p))!.failures).toBe(1);
      } finally {
        indexer = testIndexer(db, chain, { spendPermissions: source, pollMs: 50 });
        await indexer.start();
      }
      await synced();
      // The Used log is indexed: the permission is paid for the period and no longer due.
      const r = await keeper.tick();
      expect(sentFor(r, p)).toEqual([]);
      expect(skippedFor(r, p)).toEqual([]);
      expect((await row(p)).times_executed).toBe(1);
      expect(await usedOnChain(p)).toEqual([p.start]);
    });
  }, 60_000);

  test("nothing is sent when less than two poll intervals remain before the period's end", async () => {
    // Polls of 60 s: the keeper stays off the last 120 s of a period.
    const keeper = makeKeeper({ pollMs: 60_000 });
    await withKeepers([keeper], async () => {
      const acct = await account("bob", 100_000_000n);
      const start = Number(await chain.now()) + 10;
      const p = await approved("bob", acct, { start, period: 1000, salt: 9n });
      const from = await head();
      await warp(start + 1000 - 119);
      const r = await keeper.tick();
      expect(sentFor(r, p)).toEqual([]);
      expect(skippedFor(r, p)).toEqual(["period_ending"]);
      expect(await spendTxs(p, from)).toEqual([]);
      // Not a failure: no recheck and no claim is left.
      expect(await recheck(p)).toBeUndefined();
      const claims = await db.sql`select 1 from keeper_claims where subscription_id = ${idOf(p)}`;
      expect(claims).toHaveLength(0);

      // In the next period, with time to spare, it is spent for that period.
      await warp(start + 1000 + 10);
      const [sent] = sentFor(await keeper.tick(), p);
      expect(sent).toBeDefined();
      await minedAndIndexed(sent!.hash);
      expect(await usedOnChain(p)).toEqual([start + 1000]);
    });
  }, 60_000);
  test("a new holder of the key adopts the spend its predecessor left pending, and sends no second one", async () => {
    const acct = await account("carol", 100_000_000n);
    const p = await approved("carol", acct, { salt: 11n });
    const from = (await head()) + 1n;
    const first = makeKeeper();
    const next = makeKeeper();
    await withKeepers([next], async () => {
      await chain.testClient.setAutomine(false);
      try {
        const [sent] = sentFor(await first.tick(), p);
        expect(sent).toBeDefined();
        // Stopped with its spend still pending: the lock is given up, the claim (naming the transaction) stays.
        await first.stop();
        const [claim] = await db.sql<{ tx_hash: string }[]>`
          select tx_hash from keeper_claims where chain_id = ${chain.chainId} and subscription_id = ${idOf(p)}`;
        expect(claim?.tx_hash).toBe(sent!.hash);
        const taken = await next.tick();
        expect(sentFor(taken, p)).toEqual([]);
        expect(skippedFor(taken, p)).toEqual(["in_flight"]);
        await chain.testClient.mine({ blocks: 1 });
      } finally {
        await chain.testClient.setAutomine(true);
      }
      const collected = await next.tick();
      expect(collected.mined.filter((m) => m.subscriptionId === idOf(p)).map((m) => m.status)).toEqual(["success"]);
      await synced();
      expect(sentFor(await next.tick(), p)).toEqual([]);
      expect(await usedOnChain(p)).toEqual([p.start]);
      expect((await spendTxs(p, from)).length).toBe(1);
    });
  }, 60_000);
});

test("the target reads a spend's calldata back as the permission's id (a new holder of the key adopts it)", () => {
  const target = spendPermissionTarget(chain.chainId, kit.manager);
  const p = kit.permission({ account: merchant, spender: merchant, token, start: 1, salt: 42n });
  const data = encodeFunctionData({ abi: spendPermissionManagerAbi, functionName: "spend", args: [p, 5n] });
  expect(target.decode(data)).toEqual({ module: kit.manager, subscriptionId: idOf(p) });
  expect(target.decode(encodeFunctionData({ abi: spendPermissionManagerAbi, functionName: "revoke", args: [p] }))).toBe(
    null,
  );
});
