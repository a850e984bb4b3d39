/**
 * MRR analytics end to end: random scenarios on a real anvil (several plans per customer in two modules of one
 * merchant, upgrades by subscribing to a pricier plan and cancelling the cheaper, pauses and cancellations by
 * either side, blocks, charges failing for every reason, expiries, re-subscriptions, three tokens, and a reorg)
 * go through the real indexer with the event log and the MRR hook; then every figure of the API (movements, each
 * period of day/week/month, the figures now, LTV, cohorts) must equal what test/analytics/oracle.ts computes on its
 * own from the status timeline and the plans, the identity MRR(end) − MRR(start) = Σ movements must hold over
 * random ranges, and the customer.churned / customer.reactivated events must be the churn and reactivation
 * movements, the orphaned branch's withdrawn.
 */
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import type { Address } from "viem";
import { subscriptionModuleAbi, testTokenAbi } from "../../src/chain/abis";
import { createApp } from "../../src/http/app";
import { createChainRegistry } from "../../src/chain/clients";
import type { Db } from "../../src/db/client";
import { eventsHook } from "../../src/events/hook";
import { mrrAnalytics } from "../../src/analytics/hook";
import { createTestDb } from "../../testkit/db";
import { createTestChain, type TestChain, type WalletName } from "../../testkit/chain";
import { indexOnce } from "../../testkit/indexer";
import { testConfig } from "../../testkit/app";
import { loadOracle, type OraclePlan } from "./oracle";
import { compareAll, compareEvents, prng } from "./figures";

const DAY = 86_400;
const WALLETS: WalletName[] = ["alice", "bob", "carol", "dave", "erin"];
const MONTH = 2_629_800n;

let chain: TestChain;
let db: Db;
let app: ReturnType<typeof createApp>;
let merchant: string;
const plans: (OraclePlan & { grace: number; address: Address })[] = [];
const tokens: Record<string, Address> = {};
const mrr = mrrAnalytics();
const hooks = [eventsHook({ derive: mrr.derive, now: () => 0 }), mrr.hook];
const index = () =>
  indexOnce(db.sql, chain.rpcUrl, chain.processor, { db, startBlock: chain.startBlock, hooks, timeoutMs: 20_000 });

const figures = () => ({ app, db, merchant, chainId: chain.chainId });

beforeAll(async () => {
  chain = await createTestChain();
  db = await createTestDb();
  merchant = chain.address("merchant").toLowerCase();
  tokens.usdc = await chain.deployToken({ symbol: "USDC", decimals: 6 });
  tokens.dai = await chain.deployToken({ symbol: "DAI", decimals: 18 });
  tokens.bad = await chain.deployToken({ symbol: "BAD", decimals: 6, kind: "false" });
  const m1 = await chain.createModule("merchant");
  const m2 = await chain.createModule("merchant");
  const defs = [
    { module: m1, planId: 1, token: tokens.usdc, amount: 10_000_000n, interval: 7 * DAY, grace: DAY },
    { module: m1, planId: 2, token: tokens.usdc, amount: 25_000_000n, interval: 7 * DAY, grace: DAY },
    { module: m1, planId: 3, token: tokens.usdc, amount: 90_000_000n, interval: 30 * DAY, grace: 2 * DAY },
    { module: m1, planId: 4, token: tokens.dai, amount: 5n * 10n ** 18n, interval: 14 * DAY, grace: 0 },
    { module: m1, planId: 5, token: tokens.bad, amount: 1_000_000n, interval: 7 * DAY, grace: 0 },
    { module: m2, planId: 1, token: tokens.usdc, amount: 3_000_000n, interval: DAY, grace: 3_600 },
  ];
  for (const d of defs) {
    await chain.createPlan("merchant", d.module, { ...d, gracePeriod: d.grace });
    plans.push({
      module: d.module.toLowerCase(),
      address: d.module,
      planId: String(d.planId),
      token: d.token.toLowerCase(),
      amount: d.amount,
      interval: d.interval,
      grace: d.grace,
    });
  }
  for (const w of WALLETS) {
    await chain.fund(w, tokens.usdc, 10n ** 12n);
    await chain.fund(w, tokens.dai, 10n ** 24n);
    await chain.fund(w, tokens.bad, 10n ** 12n);
  }
  const config = testConfig({ RPC_URL: chain.rpcUrl, CHAIN_ID: String(chain.chainId) });
  app = createApp({ sql: db.sql, config, chains: await createChainRegistry(config) });
}, 120_000);

afterAll(async () => {
  await db?.close();
  await chain?.stop();
});

const subs: { id: bigint; plan: (typeof plans)[number]; wallet: WalletName }[] = [];
const actions: Record<string, number> = {};

/** One random step; every action may revert on chain (that changes nothing). */
async function step(rnd: ReturnType<typeof prng>) {
  const attempt = async (name: string, fn: () => Promise<unknown>) => {
    try {
      await fn();
      actions[name] = (actions[name] ?? 0) + 1;
    } catch {
      actions[`${name} (reverted)`] = (actions[`${name} (reverted)`] ?? 0) + 1;
    }
  };
  const call = (who: WalletName, module: Address, functionName: string, args: unknown[]) =>
    chain.send(
      chain.wallet(who).writeContract({ address: module, abi: subscriptionModuleAbi, functionName, args } as never),
    );
  const token = (who: WalletName, address: Address, functionName: string, args: unknown[]) =>
    chain.send(chain.wallet(who).writeContract({ address, abi: testTokenAbi, functionName, args } as never));
  const wallet = rnd.pick(WALLETS);
  const sub = subs.length ? rnd.pick(subs) : undefined;
  const roll = rnd.int(100);
  if (roll < 18 || !sub) {
    const plan = rnd.pick(plans);
    const expiry = rnd.int(5) === 0 ? (await chain.now()) + BigInt(DAY * (1 + rnd.int(10))) : 0n;
    await attempt("subscribe", async () => {
      const id = await chain.subscribe(wallet, plan.address, Number(plan.planId), { allowanceExpiry: expiry });
      subs.push({ id, plan, wallet });
      await chain.charge(plan.address, id);
    });
  } else if (roll < 24) {
    // Upgrade: the pricier weekly plan, then cancel the cheaper one.
    const cheap = subs.find(
      (s) => s.wallet === wallet && s.plan.planId === "1" && s.plan.address === plans[0]!.address,
    );
    await attempt("upgrade", async () => {
      const id = await chain.subscribe(wallet, plans[1]!.address, 2);
      subs.push({ id, plan: plans[1]!, wallet });
      await chain.charge(plans[1]!.address, id);
      if (cheap) await call(wallet, cheap.plan.address, "cancel", [cheap.id]);
    });
  } else if (roll < 40) {
    // A keeper run: every allocation tried.
    for (const s of subs) await attempt("charge", () => chain.charge(s.plan.address, s.id));
  } else if (roll < 46) {
    await attempt("pause", () => call(rnd.int(2) ? "merchant" : sub.wallet, sub.plan.address, "pause", [sub.id]));
  } else if (roll < 52) {
    await attempt("resume", () => call(rnd.int(2) ? "merchant" : sub.wallet, sub.plan.address, "resume", [sub.id]));
  } else if (roll < 58) {
    await attempt("cancel", () => call(rnd.int(4) ? sub.wallet : "merchant", sub.plan.address, "cancel", [sub.id]));
  } else if (roll < 62) {
    const module = rnd.pick(plans).address;
    await attempt("block", () => call("merchant", module, "blockSubscriber", [chain.address(wallet)]));
  } else if (roll < 67) {
    const module = rnd.pick(plans).address;
    await attempt("unblock", () => call("merchant", module, "unblockSubscriber", [chain.address(wallet)]));
  } else if (roll < 71) {
    await attempt("approve", () =>
      token(wallet, tokens.usdc!, "approve", [chain.processor, rnd.int(2) ? 0n : 10n ** 15n]),
    );
  } else if (roll < 75) {
    await attempt("drain", async () => {
      const balance = await chain.publicClient.readContract({
        address: tokens.usdc!,
        abi: testTokenAbi,
        functionName: "balanceOf",
        args: [chain.address(wallet)],
      });
      await token(wallet, tokens.usdc!, "transfer", [chain.address("deployer"), balance]);
    });
  } else if (roll < 79) {
    await attempt("refill", () => token("deployer", tokens.usdc!, "mint", [chain.address(wallet), 10n ** 12n]));
  } else {
    await attempt("time", async () => {
      await chain.testClient.increaseTime({ seconds: 3_600 + rnd.int(2 * DAY) });
      await chain.testClient.mine({ blocks: 1 });
    });
    // Often a keeper runs right after: renewals, and failed charges inside the grace period.
    if (rnd.int(2)) for (const s of subs) await attempt("charge", () => chain.charge(s.plan.address, s.id));
  }
}

/**
 * Churn for each reason a charge fails (on a module of its own, so no earlier step stands in the way), then a
 * recovery: failed renewals inside the grace period, the expiries they end in, and a renewal that wins one back.
 */
async function involuntary() {
  const module = await chain.createModule("merchant");
  await chain.createPlan("merchant", module, {
    planId: 1,
    token: tokens.usdc!,
    amount: 20_000_000n,
    interval: 7 * DAY,
    gracePeriod: DAY,
  });
  plans.push({
    module: module.toLowerCase(),
    address: module,
    planId: "1",
    token: tokens.usdc!.toLowerCase(),
    amount: 20_000_000n,
    interval: 7 * DAY,
    grace: DAY,
  });
  const usdc = (who: WalletName, functionName: string, args: unknown[]) =>
    chain.send(
      chain.wallet(who).writeContract({ address: tokens.usdc!, abi: testTokenAbi, functionName, args } as never),
    );
  const who: WalletName[] = ["alice", "bob", "carol"];
  for (const w of who) {
    await usdc("deployer", "mint", [chain.address(w), 10n ** 12n]);
    await usdc(w, "approve", [chain.processor, 10n ** 30n]);
  }
  const expiry = (await chain.now()) + BigInt(3 * DAY);
  const ids = [];
  for (const w of who) {
    const id = await chain.subscribe(w, module, 1, { allowanceExpiry: w === "carol" ? expiry : 0n });
    await chain.charge(module, id);
    ids.push(id);
  }
  const balance = await chain.publicClient.readContract({
    address: tokens.usdc!,
    abi: testTokenAbi,
    functionName: "balanceOf",
    args: [chain.address("alice")],
  });
  await usdc("alice", "transfer", [chain.address("deployer"), balance]);
  await usdc("bob", "approve", [chain.processor, 0n]);
  await chain.testClient.increaseTime({ seconds: 7 * DAY + 3_600 });
  await chain.testClient.mine({ blocks: 1 });
  for (const id of ids) await chain.charge(module, id);
  await chain.testClient.increaseTime({ seconds: DAY });
  await chain.testClient.mine({ blocks: 1 });
  // Alice pays again: a reactivation within 30 days of an involuntary churn.
  await usdc("deployer", "mint", [chain.address("alice"), 10n ** 12n]);
  await chain.charge(module, ids[0]!);
}

describe("MRR analytics on a random history", () => {
  test("every figure equals the oracle's, before and after a reorg; events follow the movements", async () => {
    const seen = { rates: 0, reasons: new Set<string>(), kinds: new Set<string>() };
    const rnd = prng(20261129);
    for (let i = 0; i < 60; i++) await step(rnd);
    await index();
    // A branch that a reorg removes, kept inside the indexer's reorg window (64 blocks): cancellations, a sign-up,
    // expiries. Its movements and events must go, the new branch's come.
    const snap = await chain.snapshot();
    const subsBefore = subs.length;
    const cancel = (sub: (typeof subs)[number]) =>
      chain.send(
        chain.wallet(sub.wallet).writeContract({
          address: sub.plan.address,
          abi: subscriptionModuleAbi,
          functionName: "cancel",
          args: [sub.id],
        } as never),
      );
    for (const sub of subs.slice(0, 4)) await cancel(sub).catch(() => {});
    const fresh = await chain.subscribe("erin", plans[5]!.address, 1).catch(() => null);
    if (fresh !== null) await chain.charge(plans[5]!.address, fresh);
    await chain.testClient.increaseTime({ seconds: 9 * DAY });
    await chain.testClient.mine({ blocks: 1 });
    for (const sub of subs.slice(4, 14)) await chain.charge(sub.plan.address, sub.id).catch(() => {});
    await index();
    await compareAll(figures(), await loadOracle(db.sql, chain.chainId, merchant, plans), seen);
    const orphanEvents = (await compareEvents(figures())).filter((r) => r.reverted_by === null).map((r) => r.id);
    const orphanTop = await chain.publicClient.getBlockNumber({ cacheTime: 0 });
    await chain.revert(snap);
    subs.length = subsBefore;
    // The new branch is indexed as soon as it is longer than the old one: a reorg is seen within the indexer's
    // window of recent blocks (a branch switch deeper than it is another matter).
    const orphanHead = orphanTop;
    let i = 0;
    for (; i < 60 && (await chain.publicClient.getBlockNumber({ cacheTime: 0 })) <= orphanHead; i++) await step(rnd);
    while ((await chain.publicClient.getBlockNumber({ cacheTime: 0 })) <= orphanHead)
      await chain.testClient.mine({ blocks: 1 });
    await index();
    const [{ reorgs }] = await db.sql<
      { reorgs: string }[]
    >`select count(*) as reorgs from chains where last_reorg_at is not null`;
    expect(reorgs).toBe("1");
    for (; i < 60; i++) await step(rnd);
    await involuntary();
    await chain.testClient.increaseTime({ seconds: 3 * DAY });
    await chain.testClient.mine({ blocks: 1 });
    await index();
    const o = await loadOracle(db.sql, chain.chainId, merchant, plans);
    await compareAll(figures(), o, seen);
    const rows = await compareEvents(figures());
    const live = new Set(rows.filter((r) => r.reverted_by === null).map((r) => r.id));
    const withdrawn = orphanEvents.filter((id) => !live.has(id));
    expect(withdrawn.length).toBeGreaterThan(0);
    for (const id of withdrawn) expect(rows.find((r) => r.id === id)!.reverted_by).not.toBeNull();
    // The history must have shown what the figures are about.
    console.log(
      "mrr scenario",
      JSON.stringify({
        actions,
        movements: o.movements.length,
        seen: { ...seen, reasons: [...seen.reasons], kinds: [...seen.kinds] },
      }),
    );
    expect([...seen.kinds].sort()).toEqual(["churn", "contraction", "expansion", "new", "reactivation"]);
    for (const r of [
      "cancelled_by_subscriber",
      "blocked",
      "paused",
      "InsufficientBalance",
      "InsufficientAllowance",
      "AllowanceExpired",
    ]) {
      expect([...seen.reasons]).toContain(r);
    }
    expect(o.movements.some((m) => m.recovered)).toBe(true);
    expect(seen.rates).toBeGreaterThan(0);
  }, 600_000);
});
