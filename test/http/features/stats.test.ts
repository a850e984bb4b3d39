/**
 * `GET /v0/stats/:merchant` against the routes it summarizes: a 40-day history on a real anvil (charges in two
 * tokens, every-day and weekly plans, failures, cancellations, month and week boundaries) goes through the real
 * indexer with the rollup hook; every number of the stats (day, week, month) must equal what summing the
 * /v0/activity and /v0/subscriptions rows by hand with BigInt gives. Then a reorg (evm_revert to a snapshot and a
 * different branch) must leave the rollups equal to a fresh aggregate and the stats equal to the sums again.
 */
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import type { Address, TransactionReceipt } from "viem";
import { subscriptionModuleAbi } from "../../../src/chain/abis";
import { createApp } from "../../../src/http/app";
import { createChainRegistry } from "../../../src/chain/clients";
import { createApiKey } from "../../../src/auth/api-keys";
import { statsRollupsHook } from "../../../src/indexer/rollups";
import type { Db } from "../../../src/db/client";
import type { StatsResponse } from "../../../src/http/features/stats/model";
import type { ActivityRecord } from "../../../src/http/features/activity/model";
import type { SubscriptionRecord } from "../../../src/http/features/subscriptions/model";
import { createTestDb } from "../../../testkit/db";
import { createTestChain, type TestChain, type WalletName } from "../../../testkit/chain";
import { indexOnce } from "../../../testkit/indexer";
import { admin, request, testConfig } from "../../../testkit/app";

const DAY = 86_400;
const SECONDS_30D = 2_592_000n;

let chain: TestChain;
let db: Db;
let app: ReturnType<typeof createApp>;
let merchant: string;
let module: Address;
/** plan id → amount, interval and token symbol. */
const plans = new Map<string, { amount: bigint; interval: bigint; symbol: string }>();
/** Block time (unix s) of each SubscriptionCancelled we sent. */
let cancelledAt: number[] = [];

const hook = statsRollupsHook();
const index = () =>
  indexOnce(db.sql, chain.rpcUrl, chain.processor, { startBlock: chain.startBlock, hooks: [hook], db });
const blockTime = async (r: TransactionReceipt) =>
  Number((await chain.publicClient.getBlock({ blockNumber: r.blockNumber })).timestamp);

async function moduleCall(who: WalletName, functionName: "cancel" | "pause", id: bigint) {
  return chain.send(
    chain.wallet(who).writeContract({ address: module, abi: subscriptionModuleAbi, functionName, args: [id] } as never),
  );
}

beforeAll(async () => {
  chain = await createTestChain();
  db = await createTestDb();
  const usdc = await chain.deployToken({ symbol: "USDC", decimals: 6 });
  const dai = await chain.deployToken({ name: "Dai", symbol: "DAI", decimals: 18 });
  module = await chain.createModule("merchant");
  merchant = chain.address("merchant").toLowerCase();
  const plan = async (planId: number, token: Address, symbol: string, amount: bigint, interval: number, grace = 0) => {
    await chain.createPlan("merchant", module, { planId, token, amount, interval, gracePeriod: grace });
    plans.set(String(planId), { amount, interval: BigInt(interval), symbol });
  };
  await plan(1, usdc, "USDC", 1_000_003n, DAY, 3600);
  await plan(2, dai, "DAI", 5n * 10n ** 18n + 7n, 7 * DAY, DAY);
  await plan(3, usdc, "USDC", 777n, 2 * DAY);
  await chain.fund("alice", usdc, 10n ** 12n);
  await chain.fund("bob", usdc, 10n); // InsufficientBalance
  await chain.fund("carol", dai, 10n ** 24n, 0n); // no allowance: InsufficientAllowance
  await chain.fund("dave", dai, 10n ** 24n);
  await chain.fund("erin", usdc, 10n ** 12n);

  const a = await chain.subscribe("alice", module, 1);
  const b = await chain.subscribe("bob", module, 1);
  const c = await chain.subscribe("carol", module, 2);
  const d = await chain.subscribe("dave", module, 2);
  const e = await chain.subscribe("erin", module, 3);
  const e2 = await chain.subscribe("alice", module, 3);
  for (const id of [a, b, c, d, e, e2]) await chain.charge(module, id);
  for (let day = 1; day <= 40; day++) {
    await chain.testClient.increaseTime({ seconds: DAY + 17 });
    await chain.testClient.mine({ blocks: 1 });
    await chain.charge(module, a);
    if (day % 7 === 0 && day < 33) await chain.charge(module, d);
    if (day % 2 === 0 && day <= 10) await chain.charge(module, e);
    if (day % 2 === 0 && day > 30) await chain.charge(module, e2);
    if (day % 3 === 0) await chain.charge(module, c);
    if (day === 4) await chain.charge(module, b);
    if (day === 5) cancelledAt.push(await blockTime(await moduleCall("bob", "cancel", b)));
    if (day === 12) cancelledAt.push(await blockTime(await moduleCall("erin", "cancel", e)));
    if (day === 33) await moduleCall("dave", "pause", d);
  }
  await index();
  const config = testConfig({ RPC_URL: chain.rpcUrl, CHAIN_ID: String(chain.chainId) });
  app = createApp({ sql: db.sql, config, chains: await createChainRegistry(config) });
}, 60_000);

afterAll(async () => {
  await db?.close();
  await chain?.stop();
});

// An implementation of the periods independent of the service's.
function periodOf(iso: string, interval: "day" | "week" | "month"): string {
  if (interval === "month") return `${iso.slice(0, 7)}-01T00:00:00.000Z`;
  const day = Date.parse(`${iso.slice(0, 10)}T00:00:00.000Z`);
  const back = interval === "week" ? ((new Date(day).getUTCDay() + 6) % 7) * DAY * 1000 : 0;
  return new Date(day - back).toISOString();
}

async function stats(query: string, headers = admin): Promise<StatsResponse> {
  const res = await request(app, `/v0/stats/${merchant}${query}`, headers);
  expect(res.status, JSON.stringify(res.body)).toBe(200);
  return res.body;
}

/** What the stats must say, summed by hand from the activity and subscriptions routes. */
async function expected(interval: "day" | "week" | "month", token?: string) {
  const filter = token ? `?token=${token}` : "";
  const activity: ActivityRecord[] = (await request(app, `/v0/activity/${merchant}${filter}`)).body;
  const subs: SubscriptionRecord[] = (await request(app, `/v0/subscriptions/${merchant}`)).body;
  const mine = subs.filter((s) => !token || plans.get(s.plan_id.split(":")[2]!)!.symbol === token.toUpperCase());
  const revenue = new Map<string, { gross: bigint; fees: bigint; charges: number; decimals: number | null }>();
  const failures = new Map<string, number>();
  for (const a of activity) {
    const p = periodOf(a.timestamp, interval);
    if (a.type === "CHARGE") {
      const k = `${p}|${a.currency}`;
      const r = revenue.get(k) ?? { gross: 0n, fees: 0n, charges: 0, decimals: a.token_decimals };
      r.gross += BigInt(a.amount_charged);
      r.fees += BigInt(a.fee_paid!);
      r.charges++;
      revenue.set(k, r);
    } else if (a.type === "FAIL") {
      failures.set(`${p}|${a.reason}`, (failures.get(`${p}|${a.reason}`) ?? 0) + 1);
    }
  }
  const byStatus: Record<string, number> = { BLOCKED: 0, CANCELLED: 0, PAUSED: 0, PENDING: 0, EXPIRED: 0, ACTIVE: 0 };
  const created = new Map<string, number>();
  const runRate = new Map<string, { amount: bigint; count: number }>();
  for (const s of mine) {
    byStatus[s.status]!++;
    const p = periodOf(s.created_at, interval);
    created.set(p, (created.get(p) ?? 0) + 1);
    if (s.status === "ACTIVE") {
      const plan = plans.get(s.plan_id.split(":")[2]!)!;
      const r = runRate.get(plan.symbol) ?? { amount: 0n, count: 0 };
      r.amount += (plan.amount * SECONDS_30D) / plan.interval;
      r.count++;
      runRate.set(plan.symbol, r);
    }
  }
  const cancelled = new Map<string, number>();
  if (!token || token.toUpperCase() === "USDC") {
    for (const t of cancelledAt) {
      const p = periodOf(new Date(t * 1000).toISOString(), interval);
      cancelled.set(p, (cancelled.get(p) ?? 0) + 1);
    }
  }
  return { activity, revenue, failures, byStatus, created, cancelled, runRate };
}

/** Compares every number of a stats response with the hand sums. */
async function compare(interval: "day" | "week" | "month", token?: string) {
  const exp = await expected(interval, token);
  const first = exp.activity[0]!.timestamp;
  const since = new Date(Date.parse(first) - 3 * DAY * 1000).toISOString();
  const s = await stats(`?interval=${interval}&since=${since}${token ? `&token=${token}` : ""}`);
  expect(s.interval).toBe(interval);
  expect(s.periods[0]).toBe(periodOf(since, interval));
  for (const p of s.periods) expect(periodOf(p, interval)).toBe(p);

  const got = new Map(s.revenue.map((r) => [`${r.period_start}|${r.currency}`, r]));
  expect([...got.keys()].sort()).toEqual([...exp.revenue.keys()].sort());
  for (const [k, e] of exp.revenue) {
    const r = got.get(k)!;
    expect({ k, gross: r.gross, fees: r.fees, net: r.net, charges: r.charges, decimals: r.token_decimals }).toEqual({
      k,
      gross: e.gross.toString(),
      fees: e.fees.toString(),
      net: (e.gross - e.fees).toString(),
      charges: e.charges,
      decimals: e.decimals,
    });
  }
  expect(new Map(s.failures.map((f) => [`${f.period_start}|${f.reason}`, f.count]))).toEqual(exp.failures);
  expect(s.subscriptions.by_status).toEqual(exp.byStatus as StatsResponse["subscriptions"]["by_status"]);
  expect(new Map(s.subscriptions.periods.filter((p) => p.created).map((p) => [p.period_start, p.created]))).toEqual(
    exp.created,
  );
  expect(new Map(s.subscriptions.periods.filter((p) => p.cancelled).map((p) => [p.period_start, p.cancelled]))).toEqual(
    exp.cancelled,
  );
  expect(
    new Map(s.run_rate.map((r) => [r.currency, { amount: BigInt(r.amount_per_30d), count: r.active_subscriptions }])),
  ).toEqual(exp.runRate);
  return { s, exp };
}

describe("stats equal the activity and subscriptions routes summed by hand", () => {
  test("by day, week and month, every token", async () => {
    const { s, exp } = await compare("day");
    // The scenario is rich enough for the comparison to mean something.
    expect(exp.revenue.size).toBeGreaterThan(40);
    expect(new Set(s.revenue.map((r) => r.currency))).toEqual(new Set(["USDC", "DAI"]));
    expect(new Set(s.failures.map((f) => f.reason))).toEqual(new Set(["InsufficientBalance", "InsufficientAllowance"]));
    expect(exp.cancelled.size).toBe(2);
    expect(Object.values(s.subscriptions.by_status).filter((n) => n > 0).length).toBeGreaterThanOrEqual(3);
    const weeks = await compare("week");
    expect(weeks.s.periods.length).toBeGreaterThanOrEqual(6);
    const months = await compare("month");
    expect(months.s.periods.length).toBeGreaterThanOrEqual(2);
  });

  test("with a token filter (case-insensitive)", async () => {
    const { s } = await compare("week", "usdc");
    expect(new Set(s.revenue.map((r) => r.currency))).toEqual(new Set(["USDC"]));
    await compare("month", "DAI");
  });

  test("defaults: the last 30 days up to the end of the current day, with freshness headers", async () => {
    const res = await request(app, `/v0/stats/${merchant}`);
    expect(res.status).toBe(200);
    expect(res.headers.get("x-indexed-block")).toMatch(/^\d+$/);
    const s: StatsResponse = res.body;
    expect(s.interval).toBe("day");
    expect(s.periods.length).toBe(30);
    expect(s.until).toBe(new Date(Date.parse(periodOf(s.now, "day")) + DAY * 1000).toISOString());
    expect((await stats("?interval=week")).periods.length).toBe(13);
    expect((await stats("?interval=month")).periods.length).toBe(12);
  });

  test("survives a reorg: rollups equal a fresh aggregate of activity, stats equal the sums", async () => {
    const snap = await chain.snapshot();
    const subs: SubscriptionRecord[] = (await request(app, `/v0/subscriptions/${merchant}`)).body;
    const alice = BigInt(subs.find((s) => s.user_address === chain.address("alice").toLowerCase())!.on_chain_id);
    await chain.testClient.increaseTime({ seconds: DAY });
    await chain.charge(module, alice);
    await index();
    await compare("day");
    await chain.revert(snap);
    // Another branch: two days later, a failure instead, and more blocks than the orphaned branch.
    await chain.testClient.increaseTime({ seconds: 2 * DAY + 5 });
    const carol = BigInt(subs.find((s) => s.user_address === chain.address("carol").toLowerCase())!.on_chain_id);
    await chain.charge(module, carol);
    await chain.testClient.mine({ blocks: 5 });
    await index();
    await compare("day");
    await compare("month");
    const fresh = await db.sql`
      select chain_id, merchant, (block_time at time zone 'UTC')::date::text as day, coalesce(token, '') as token, type,
        coalesce(reason, '') as reason, sum(amount)::text as amount, coalesce(sum(fee), 0)::text as fee, count(*)::int as count
      from activity group by 1, 2, 3, 4, 5, 6 order by 1, 2, 3, 4, 5, 6`;
    const rollups = await db.sql`
      select chain_id, merchant, day::text as day, token, type, reason, amount::text as amount, fee::text as fee,
        count::int as count
      from stats_daily order by 1, 2, 3, 4, 5, 6`;
    expect(rollups.length).toBeGreaterThan(40);
    expect([...rollups]).toEqual([...fresh]);
  });
});

describe("parameters and credentials", () => {
  const bad = async (query: string, param: string) => {
    const res = await request(app, `/v0/stats/${merchant}${query}`);
    expect(res.status, query).toBe(400);
    expect(res.body.error.param, query).toBe(param);
  };

  test("malformed or out-of-range parameters are 400s naming the parameter", async () => {
    await bad("?interval=year", "interval");
    await bad("?since=yesterday", "since");
    await bad("?until=2026-13-01T00:00:00Z", "until");
    await bad("?since=2027-01-02T00:00:00Z&until=2027-01-01T00:00:00Z", "since");
    await bad("?since=2020-01-01T00:00:00Z&until=2023-01-01T00:00:00Z", "since"); // 1096 days
    await bad("?chain_id=0x10", "chain_id");
    await bad("?chain_id=999", "chain_id");
    await bad("?token=", "token");
    expect((await request(app, `/v0/stats/0x12`)).body.error.param).toBe("merchant");
    // Valid instants whose whole periods reach year 10000 or year 0 (the database takes neither): 400, not 500.
    await bad("?until=9999-12-31T23:59:59.999Z", "until");
    await bad("?until=9999-12-31T00:00:00Z&interval=month", "until");
    await bad("?until=0001-01-01T00:00:00Z", "until");
    await bad("?until=0001-01-31T00:00:00Z&interval=week", "until");
    // The edges themselves are fine.
    expect((await stats("?until=9999-12-31T00:00:00Z&since=9999-12-30T00:00:00Z")).periods.length).toBe(1);
    expect((await stats("?since=0001-01-01T00:00:00Z&until=0001-01-03T00:00:00Z")).periods.length).toBe(2);
  });

  test("the cap is 1000 periods; a longer interval covers the same range", async () => {
    const s = await stats("?since=2024-01-01T00:00:00Z&until=2026-09-27T00:00:00Z");
    expect(s.periods.length).toBe(1000);
    expect((await stats("?interval=month&since=2000-01-01T00:00:00Z&until=2080-01-01T00:00:00Z")).periods.length).toBe(
      960,
    );
  });

  test("since and until round outwards to period boundaries", async () => {
    const s = await stats("?interval=week&since=2026-11-19T13:00:00Z&until=2026-12-01T00:00:01Z");
    expect(s.since).toBe("2026-11-16T00:00:00.000Z");
    expect(s.until).toBe("2026-12-07T00:00:00.000Z");
    expect(s.periods).toEqual(["2026-11-16T00:00:00.000Z", "2026-11-23T00:00:00.000Z", "2026-11-30T00:00:00.000Z"]);
    const m = await stats("?interval=month&since=2026-11-30T23:59:59Z&until=2027-01-01T00:00:00Z");
    expect(m.periods).toEqual(["2026-11-01T00:00:00.000Z", "2026-12-01T00:00:00.000Z"]);
  });

  test("401 without a credential, 403 for another merchant's key, 200 for the merchant's own key", async () => {
    const res = await request(app, `/v0/stats/${merchant}`, {});
    expect(res.status).toBe(401);
    const other = await createApiKey(db.sql, { merchant: chain.address("merchant2") });
    expect((await request(app, `/v0/stats/${merchant}`, { authorization: `Bearer ${other.key}` })).status).toBe(403);
    const own = await createApiKey(db.sql, { merchant });
    const mine = await request(app, `/v0/stats/${merchant}?interval=month`, { authorization: `Bearer ${own.key}` });
    expect(mine.status).toBe(200);
    expect(mine.body.merchant).toBe(merchant);
  });
});
