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
import { mrrAt } from "../../src/http/features/mrr/service";
import { createTestDb } from "../../testkit/db";
import { createTestChain, type TestChain, type WalletName } from "../../testkit/chain";
import { indexOnce } from "../../testkit/indexer";
import { request, testConfig } from "../../testkit/app";
import { loadOracle, oracleRate, type OracleMovement, type OraclePlan } from "./oracle";

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

/** mulberry32. */
function prng(seed: number) {
  let a = seed >>> 0;
  const next = () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
  return { int: (n: number) => Math.floor(next() * n), pick: <T>(xs: T[]) => xs[Math.floor(next() * xs.length)]! };
}

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

/** Every movement of the merchant through the API, oldest first. */
async function apiMovements() {
  const out: any[] = [];
  let after = "";
  for (;;) {
    const r = await request(app, `/v0/stats/${merchant}/mrr/movements?limit=1000${after}`);
    expect(r.status).toBe(200);
    out.push(...r.body);
    const next = /starting_after=([^&>]+)/.exec(r.headers.get("link") ?? "");
    if (!next) break;
    after = `&starting_after=${next[1]}`;
  }
  return out.reverse();
}

const comparable = (m: OracleMovement | any) => ({
  customer: m.customer,
  token: m.token,
  block_number: m.block_number,
  at: typeof m.at === "number" ? m.at : Date.parse(m.at) / 1000,
  kind: m.kind,
  mrr_before: m.mrr_before,
  mrr_after: m.mrr_after,
  reason: m.reason,
  recovered: m.recovered,
  allocation_ids: [...m.allocation_ids].sort(),
});
const order = (a: any, b: any) =>
  a.at - b.at ||
  Number(BigInt(a.block_number) - BigInt(b.block_number)) ||
  (a.customer + a.token < b.customer + b.token ? -1 : 1);

/** Start of the UTC period holding unix second t (the oracle's own calendar). */
function periodOf(t: number, interval: string): number {
  const d = new Date(t * 1000);
  const day = Date.UTC(d.getUTCFullYear(), d.getUTCMonth(), d.getUTCDate());
  if (interval === "day") return day / 1000;
  if (interval === "week") return day / 1000 - ((d.getUTCDay() + 6) % 7) * DAY;
  return Date.UTC(d.getUTCFullYear(), d.getUTCMonth(), 1) / 1000;
}
function nextPeriod(t: number, interval: string): number {
  if (interval === "day") return t + DAY;
  if (interval === "week") return t + 7 * DAY;
  const d = new Date(t * 1000);
  return Date.UTC(d.getUTCFullYear(), d.getUTCMonth() + 1, 1) / 1000;
}
function prevPeriod(t: number, interval: string): number {
  if (interval === "day") return t - DAY;
  if (interval === "week") return t - 7 * DAY;
  const d = new Date(t * 1000);
  return Date.UTC(d.getUTCFullYear(), d.getUTCMonth() - 1, 1) / 1000;
}

type Oracle = Awaited<ReturnType<typeof loadOracle>>;

/** The oracle's figures of one period (s, e] in one token. */
function oraclePeriod(o: Oracle, token: string, s: number, e: number) {
  const start = o.at(s).get(token) ?? { mrr: 0n, customers: new Map<string, bigint>() };
  const end = o.at(e).get(token) ?? { mrr: 0n, customers: new Map<string, bigint>() };
  const ms = o.movements.filter((m) => m.token === token && m.at > s && m.at <= e);
  const kinds = ["new", "expansion", "contraction", "churn", "reactivation"];
  const sum = (xs: OracleMovement[]) => xs.reduce((a, m) => a + BigInt(m.mrr_after) - BigInt(m.mrr_before), 0n);
  const of = (k: string) => ms.filter((m) => m.kind === k);
  // NRR and GRR count a customer's movements while its MRR has stayed > 0 since the period's start: held at the
  // start, and no churn of it earlier in the period.
  const before = (x: OracleMovement, m: OracleMovement) =>
    x.at < m.at || (x.at === m.at && BigInt(x.block_number) < BigInt(m.block_number));
  const stayed = (m: OracleMovement) =>
    start.customers.has(m.customer) && !ms.some((x) => x.customer === m.customer && x.kind === "churn" && before(x, m));
  const held = (k: string) => sum(of(k).filter(stayed));
  const churned = new Set(of("churn").map((m) => m.customer)).size;
  const reasons = [
    "cancelled_by_subscriber",
    "cancelled_by_merchant",
    "blocked",
    "paused",
    "InsufficientBalance",
    "InsufficientAllowance",
    "AllowanceExpired",
    "TransferFailed",
    "not_charged",
  ];
  const newCount = of("new").length;
  return {
    period_start: new Date(s * 1000).toISOString(),
    mrr_start: start.mrr.toString(),
    mrr_end: end.mrr.toString(),
    movements: Object.fromEntries(kinds.map((k) => [k, { count: of(k).length, amount: sum(of(k)).toString() }])),
    churn_by_reason: Object.fromEntries(
      reasons.map((r) => {
        const xs = of("churn").filter((m) => m.reason === r);
        return [r, { count: xs.length, amount: sum(xs).toString() }];
      }),
    ),
    recovered: { count: ms.filter((m) => m.recovered).length, amount: sum(ms.filter((m) => m.recovered)).toString() },
    customers_start: start.customers.size,
    new_customers: newCount,
    churned_customers: churned,
    subscriber_churn_rate: oracleRate(BigInt(churned), BigInt(start.customers.size + newCount)),
    gross_revenue_churn: oracleRate(-sum(of("contraction")) - sum(of("churn")), start.mrr),
    nrr: oracleRate(start.mrr + held("expansion") + held("contraction") + held("churn"), start.mrr),
    grr: oracleRate(start.mrr + held("contraction") + held("churn"), start.mrr),
  };
}

/** Compares every figure of the API with the oracle. */
async function compareAll(o: Oracle, seen: { rates: number; reasons: Set<string>; kinds: Set<string> }) {
  const api = (await apiMovements()).map(comparable).sort(order);
  const mine = o.movements.map(comparable).sort(order);
  if (process.env.MRR_DEBUG && JSON.stringify(api) !== JSON.stringify(mine)) {
    const bad = api.find((m, i) => JSON.stringify(m) !== JSON.stringify(mine[i]));
    console.log("first difference", bad, mine[api.indexOf(bad!)]);
    console.log(
      "REVERTED",
      JSON.stringify(
        await db.sql`select min(block_number), max(block_number), count(*) from merchant_events where reverted_by is not null`,
      ),
      JSON.stringify(await db.sql`select * from chains`),
    );
    for (const id of bad!.allocation_ids) {
      const [, module, sid] = id.split(":");
      console.log(
        id,
        await db.sql`select block_number, log_index, type, s_plan_id, s_status, s_previous_status, reverted_by is not null as rev, ts from merchant_events where s_module = ${module} and s_subscription_id = ${sid} order by seq`,
      );
      console.log(
        "ACTIVITY",
        JSON.stringify(
          await db.sql`select block_number, block_time, type, reason from activity where module = ${module} and subscription_id = ${sid} order by block_number`,
        ),
      );
    }
  }
  expect(api).toEqual(mine);
  for (const m of mine) {
    seen.kinds.add(m.kind);
    if (m.reason) seen.reasons.add(m.reason);
  }
  const [{ first }] = await db.sql<
    { first: string }[]
  >`select extract(epoch from min(timestamp))::bigint as first from blocks`;
  for (const interval of ["day", "week", "month"]) {
    const since = new Date(Number(first) * 1000 - 2 * DAY * 1000).toISOString();
    const r = await request(app, `/v0/stats/${merchant}/mrr?interval=${interval}&since=${since}`);
    expect(r.status).toBe(200);
    const nowS = Date.parse(r.body.now) / 1000;
    const tokensNow = o.at(nowS);
    expect(r.body.tokens.map((t: any) => t.token)).toEqual(
      o.tokens.filter((t) => o.movements.some((m) => m.token === t)),
    );
    for (const tk of r.body.tokens) {
      const now = tokensNow.get(tk.token) ?? { mrr: 0n, customers: new Map() };
      const customers = now.customers.size;
      const arpa = customers ? now.mrr / BigInt(customers) : 0n;
      // LTV: the three complete periods before the one holding now.
      const cur = periodOf(nowS, interval);
      const last = [3, 2, 1].map((k) => {
        let s = cur;
        for (let i = 0; i < k; i++) s = prevPeriod(s, interval);
        return oraclePeriod(o, tk.token, s, nextPeriod(s, interval));
      });
      // Σ c_i/d_i as a fraction, then arpa × 3 ÷ it.
      let num = 0n;
      let den = 1n;
      for (const p of last) {
        const d = BigInt(p.customers_start + p.new_customers);
        if (d === 0n) continue;
        num = num * d + BigInt(p.churned_customers) * den;
        den *= d;
      }
      const ltv = num === 0n ? null : ((arpa * 3n * den) / num).toString();
      expect({
        interval,
        token: tk.token,
        mrr: tk.mrr,
        arr: tk.arr,
        arpa: tk.arpa,
        customers: tk.customers,
        ltv: tk.ltv,
      }).toEqual({
        interval,
        token: tk.token,
        mrr: now.mrr.toString(),
        arr: (12n * now.mrr).toString(),
        arpa: arpa.toString(),
        customers,
        ltv,
      });
      for (let i = 0; i < tk.periods.length; i++) {
        const s = Date.parse(tk.periods[i].period_start) / 1000;
        const e =
          i + 1 < tk.periods.length
            ? Date.parse(tk.periods[i + 1].period_start) / 1000
            : Date.parse(r.body.until) / 1000;
        const want = oraclePeriod(o, tk.token, s, e);
        expect({ interval, token: tk.token, ...tk.periods[i] }).toEqual({ interval, token: tk.token, ...want });
        if (want.nrr !== null && want.subscriber_churn_rate !== "0.000000") seen.rates++;
      }
    }
    // Cohorts (month and week) from the oracle's movements and MRR at each period's end.
    if (interval === "day") continue;
    const c = await request(app, `/v0/stats/${merchant}/cohorts?interval=${interval}&since=${since}`);
    expect(c.status).toBe(200);
    const curEnd = nextPeriod(periodOf(Date.parse(c.body.now) / 1000, interval), interval);
    for (const tk of c.body.tokens) {
      const firsts = new Map<string, number>();
      for (const m of o.movements) if (m.token === tk.token && m.kind === "new") firsts.set(m.customer, m.at);
      const cohorts = new Map<number, string[]>();
      for (const [cust, at] of firsts) {
        const p = periodOf(at - 1, interval);
        if (p < periodOf(Date.parse(c.body.since) / 1000, interval)) continue;
        (cohorts.get(p) ?? cohorts.set(p, []).get(p)!).push(cust);
      }
      const want = [...cohorts.entries()]
        .sort(([a], [b]) => a - b)
        .map(([start, members]) => {
          const periods = [];
          let mrrStart = 0n;
          for (let s = start, n = 0; s < curEnd; s = nextPeriod(s, interval), n++) {
            const at = o.at(nextPeriod(s, interval)).get(tk.token);
            const alive = members.filter((m) => at?.customers.has(m));
            const mrr = alive.reduce((a, m) => a + at!.customers.get(m)!, 0n);
            if (n === 0) mrrStart = mrr;
            periods.push({
              n,
              customers: alive.length,
              mrr: mrr.toString(),
              customer_retention: oracleRate(BigInt(alive.length), BigInt(members.length)),
              revenue_retention: "" as string | null,
            });
          }
          for (const p of periods) p.revenue_retention = oracleRate(BigInt(p.mrr), mrrStart);
          return {
            cohort_start: new Date(start * 1000).toISOString(),
            size: members.length,
            mrr_start: mrrStart.toString(),
            periods,
          };
        });
      expect({ interval, token: tk.token, cohorts: tk.cohorts }).toEqual({ interval, token: tk.token, cohorts: want });
    }
  }
  // The identity, per token, over random ranges: MRR(end) − MRR(start) = Σ movements in (start, end].
  const rnd = prng(Number(first));
  const span = api.length ? [api[0]!.at - DAY, api.at(-1)!.at + DAY] : [Number(first), Number(first) + DAY];
  for (let i = 0; i < 40; i++) {
    const a = span[0]! + rnd.int(span[1]! - span[0]!);
    const b = a + rnd.int(span[1]! - a + 1);
    for (const token of o.tokens) {
      const [ma, mb] = [
        await mrrAt(db.sql, merchant, chain.chainId, token, a),
        await mrrAt(db.sql, merchant, chain.chainId, token, b),
      ];
      const sum = api
        .filter((m) => m.token === token && m.at > a && m.at <= b)
        .reduce((s, m) => s + BigInt(m.mrr_after) - BigInt(m.mrr_before), 0n);
      expect(mb - ma).toBe(sum);
      expect(ma).toBe(o.at(a).get(token)?.mrr ?? 0n);
    }
  }
}

/** customer.* events in the log: canonical ones equal the churn/reactivation movements. */
async function compareEvents() {
  const rows = await db.sql<{ id: string; type: string; data: any; reverted_by: string | null }[]>`
    select id, type, data, reverted_by from merchant_events where type in ('customer.churned', 'customer.reactivated')`;
  const live = rows.filter((r) => r.reverted_by === null);
  const movements = (await apiMovements()).filter((m) => m.kind === "churn" || m.kind === "reactivation");
  expect(live.map((r) => r.id).sort()).toEqual(movements.map((m) => `evt_${m.id.slice(4)}`).sort());
  for (const r of live) {
    const m = movements.find((x) => `evt_${x.id.slice(4)}` === r.id);
    expect(r.type).toBe(m.kind === "churn" ? "customer.churned" : "customer.reactivated");
    expect(r.data.object).toEqual(m);
  }
  return rows;
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
    await compareAll(await loadOracle(db.sql, chain.chainId, merchant, plans), seen);
    const orphanEvents = (await compareEvents()).filter((r) => r.reverted_by === null).map((r) => r.id);
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
    await compareAll(o, seen);
    const rows = await compareEvents();
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
