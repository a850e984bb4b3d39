/**
 * `mode=onchain` and `mode=both` against a real anvil with the real contracts. The index is written here from the
 * contracts' own state (getSubscription, getPlan, isBlocked) — what the indexer would derive from the events — so
 * indexed and on-chain answers can be compared. A differential test over random scenarios through the real indexer
 * belongs with the indexer's tests.
 */
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import type { Address } from "viem";
import { subscriptionModuleAbi } from "../../../src/chain/abis";
import { createApp } from "../../../src/http/app";
import { createChainRegistry } from "../../../src/chain/clients";
import type { Db } from "../../../src/db/client";
import { createTestDb } from "../../../testkit/db";
import { createTestChain, type TestChain, type WalletName } from "../../../testkit/chain";
import { request, testConfig } from "../../../testkit/app";

let chain: TestChain;
let db: Db;
let app: ReturnType<typeof createApp>;
let module: Address;
const subs: { id: bigint; wallet: WalletName }[] = [];
const DAY = 86_400;
const GRACE = 3_600;

/** Writes the chains, plans, subscriptions and blocked_subscribers rows from the contracts' current state. */
async function indexFromChain(): Promise<void> {
  const sql = db.sql;
  const block = await chain.publicClient.getBlock({ blockTag: "latest" });
  const mod = module.toLowerCase();
  await sql`delete from chains`;
  await sql`delete from plans`;
  await sql`delete from subscriptions`;
  await sql`delete from blocked_subscribers`;
  await sql`insert into chains (chain_id, processor, start_block, indexed_block, indexed_hash, indexed_time, head_block, head_seen_at)
    values (${chain.chainId}, ${chain.processor.toLowerCase()}, 0, ${block.number.toString()}, ${block.hash},
      ${new Date(Number(block.timestamp) * 1000)}, ${block.number.toString()}, now())`;
  for (const planId of [1, 2]) {
    const p = await chain.publicClient.readContract({
      address: module,
      abi: subscriptionModuleAbi,
      functionName: "getPlan",
      args: [planId],
    });
    await sql`insert into plans (chain_id, module, plan_id, token, amount, interval_s, grace_s, block_number, log_index)
      values (${chain.chainId}, ${mod}, ${planId}, ${p.token.toLowerCase()}, ${p.amount.toString()}, ${p.interval},
        ${p.gracePeriod}, 1, ${planId})`;
  }
  for (const [i, { id }] of subs.entries()) {
    const x = await chain.publicClient.readContract({
      address: module,
      abi: subscriptionModuleAbi,
      functionName: "getSubscription",
      args: [id],
    });
    await sql`insert into subscriptions (chain_id, subscription_id, module, merchant, subscriber, plan_id, max_executions,
        times_executed, total_spent, created_at, last_paid_at, next_charge_at, allowance_expiry, paused, cancelled,
        block_number, log_index, tx_hash)
      values (${chain.chainId}, ${id.toString()}, ${mod}, ${chain.address("merchant").toLowerCase()},
        ${x.subscriber.toLowerCase()}, ${x.planId}, ${x.maxExecutions}, ${x.timesExecuted}, ${x.totalSpent.toString()},
        ${x.createdAt.toString()}, ${x.lastPaidAt.toString()}, ${x.nextChargeAt.toString()}, ${x.allowanceExpiry.toString()},
        ${x.paused}, ${x.cancelled}, ${i + 1}, 0, ${"0x" + "00".repeat(32)})`;
  }
  for (const name of ["alice", "bob", "carol"] as const) {
    const blocked = await chain.publicClient.readContract({
      address: module,
      abi: subscriptionModuleAbi,
      functionName: "isBlocked",
      args: [chain.address(name)],
    });
    if (blocked) {
      await sql`insert into blocked_subscribers (chain_id, module, subscriber, blocked, block_number, log_index)
        values (${chain.chainId}, ${mod}, ${chain.address(name).toLowerCase()}, true, 1, 0)`;
    }
  }
}

const check = (wallet: WalletName, plans: string, mode: string) =>
  request(
    app,
    `/v0/auth/check?module_address=${module}&wallet=${chain.address(wallet)}&plan_ids=${plans}&mode=${mode}`,
    {},
  );

beforeAll(async () => {
  chain = await createTestChain();
  db = await createTestDb();
  const token = await chain.deployToken();
  module = await chain.createModule("merchant");
  await chain.createPlan("merchant", module, {
    planId: 1,
    token,
    amount: 1_000_000n,
    interval: DAY,
    gracePeriod: GRACE,
  });
  await chain.createPlan("merchant", module, { planId: 2, token, amount: 2_000_000n, interval: 7 * DAY });
  for (const name of ["alice", "bob", "carol"] as const) await chain.fund(name, token, 100_000_000n);
  subs.push({ id: await chain.subscribe("alice", module, 1), wallet: "alice" });
  await chain.charge(module, subs[0].id);
  subs.push({ id: await chain.subscribe("bob", module, 1), wallet: "bob" }); // PENDING
  subs.push({ id: await chain.subscribe("carol", module, 2), wallet: "carol" });
  await chain.charge(module, subs[2].id);
  await indexFromChain();
  const config = testConfig({ RPC_URL: chain.rpcUrl, CHAIN_ID: String(chain.chainId) });
  app = createApp({ sql: db.sql, config, chains: await createChainRegistry(config) });
}, 60_000);

afterAll(async () => {
  await db?.close();
  await chain?.stop();
});

describe("mode=onchain", () => {
  test("isActive for one plan, isActiveAny for several; no indexed object", async () => {
    const one = await check("alice", "1", "onchain");
    expect(one.status).toBe(200);
    expect(one.body).toEqual({
      authorized: true,
      mode: "onchain",
      wallet: chain.address("alice").toLowerCase(),
      module_address: module.toLowerCase(),
      chain_id: chain.chainId,
      plan_ids: ["1"],
      onchain: { authorized: true, method: "isActive" },
    });
    expect(one.headers.get("x-indexed-block")).toBeNull();
    const any = await check("carol", "1,2", "onchain");
    expect(any.body.onchain).toEqual({ authorized: true, method: "isActiveAny" });
    expect((await check("bob", "1", "onchain")).body.authorized).toBe(false);
    expect((await check("bob", "1,2", "onchain")).body.onchain).toEqual({ authorized: false, method: "isActiveAny" });
  });

  test("an address without module code is a 400 on module_address", async () => {
    const res = await request(
      app,
      `/v0/auth/check?module_address=${chain.address("dave")}&wallet=${chain.address("alice")}&plan_ids=1&mode=onchain`,
      {},
    );
    expect(res.status).toBe(400);
    expect(res.body.error.param).toBe("module_address");
  });
});

describe("mode=both", () => {
  test("returns both objects; they agree with each other for every wallet and plan set", async () => {
    for (const wallet of ["alice", "bob", "carol", "dave"] as const) {
      for (const plans of ["1", "2", "1,2", "2,1"]) {
        const res = await check(wallet, plans, "both");
        expect(res.status).toBe(200);
        expect(res.body.indexed.authorized).toBe(res.body.onchain.authorized);
        expect(res.body.authorized).toBe(res.body.onchain.authorized);
        expect(res.body.onchain.method).toBe(plans.includes(",") ? "isActiveAny" : "isActive");
        expect(res.headers.get("x-indexed-block")).toBe(res.body.indexed.indexed_block);
      }
    }
  });

  test("top-level authorized is the on-chain answer when the index lags", async () => {
    const snap = await chain.snapshot();
    try {
      await chain.send(
        chain.wallet("merchant").writeContract({
          address: module,
          abi: subscriptionModuleAbi,
          functionName: "blockSubscriber",
          args: [chain.address("alice")],
        }),
      );
      const lagging = await check("alice", "1", "both");
      expect(lagging.body.indexed.authorized).toBe(true);
      expect(lagging.body.onchain.authorized).toBe(false);
      expect(lagging.body.authorized).toBe(false);
      await indexFromChain();
      const caughtUp = await check("alice", "1", "both");
      expect(caughtUp.body.indexed).toMatchObject({ authorized: false, details: [{ status: "BLOCKED" }] });
      expect(caughtUp.body.onchain.authorized).toBe(false);
    } finally {
      await chain.revert(snap);
      await indexFromChain();
    }
  });

  test("grace boundary: both agree at the last active second and one second past it", async () => {
    const snap = await chain.snapshot();
    try {
      const x = await chain.publicClient.readContract({
        address: module,
        abi: subscriptionModuleAbi,
        functionName: "getSubscription",
        args: [subs[0].id],
      });
      const deadline = x.lastPaidAt + BigInt(DAY + GRACE);
      await chain.mineAt(deadline);
      await indexFromChain();
      const at = await check("alice", "1", "both");
      expect(at.body.onchain.authorized).toBe(true);
      expect(at.body.indexed.authorized).toBe(true);
      await chain.mineAt(deadline + 1n);
      await indexFromChain();
      const past = await check("alice", "1", "both");
      expect(past.body.onchain.authorized).toBe(false);
      expect(past.body.indexed).toMatchObject({ authorized: false, details: [{ status: "EXPIRED" }] });
    } finally {
      await chain.revert(snap);
      await indexFromChain();
    }
  });
});
