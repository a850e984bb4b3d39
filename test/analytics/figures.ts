/**
 * What the MRR tests compare: every movement, every figure of the MRR and cohorts routes (day, week, month; LTV) and
 * the identity MRR(end) − MRR(start) = Σ movements, against the oracle (./oracle.ts); and the customer events
 * against the movements.
 */
import { expect } from "bun:test";
import type { Db } from "../../src/db/client";
import type { createApp } from "../../src/http/app";
import { mrrAt } from "../../src/http/features/mrr/service";
import { request } from "../../testkit/app";
import { oracleRate, type loadOracle, type OracleMovement } from "./oracle";

const DAY = 86_400;

/** The service and merchant under test. */
export type FiguresContext = { app: ReturnType<typeof createApp>; db: Db; merchant: string; chainId: number };

/** mulberry32. */
export function prng(seed: number) {
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

/** Every movement of the merchant through the API, oldest first. */
export async function apiMovements(ctx: FiguresContext) {
  const out: any[] = [];
  let after = "";
  for (;;) {
    const r = await request(ctx.app, `/v0/stats/${ctx.merchant}/mrr/movements?limit=1000${after}`);
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

export type Oracle = Awaited<ReturnType<typeof loadOracle>>;

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
export async function compareAll(
  ctx: FiguresContext,
  o: Oracle,
  seen: { rates: number; reasons: Set<string>; kinds: Set<string> },
) {
  const { app, db, merchant, chainId } = ctx;
  const api = (await apiMovements(ctx)).map(comparable).sort(order);
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
        await mrrAt(db.sql, merchant, chainId, token, a),
        await mrrAt(db.sql, merchant, chainId, token, b),
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
export async function compareEvents(ctx: FiguresContext) {
  const { db } = ctx;
  const rows = await db.sql<{ id: string; type: string; data: any; reverted_by: string | null }[]>`
    select id, type, data, reverted_by from merchant_events where type in ('customer.churned', 'customer.reactivated')`;
  const live = rows.filter((r) => r.reverted_by === null);
  const movements = (await apiMovements(ctx)).filter((m) => m.kind === "churn" || m.kind === "reactivation");
  expect(live.map((r) => r.id).sort()).toEqual(movements.map((m) => `evt_${m.id.slice(4)}`).sort());
  for (const r of live) {
    const m = movements.find((x) => `evt_${x.id.slice(4)}` === r.id);
    expect(r.type).toBe(m.kind === "churn" ? "customer.churned" : "customer.reactivated");
    expect(r.data.object).toEqual(m);
  }
  return rows;
}
