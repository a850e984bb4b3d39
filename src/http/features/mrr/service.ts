/**
 * MRR figures (analytics.md §3–5) from the movements table (`mrr_movements`, written by the indexer with the status
 * events): the MRR at an instant is the sum of the amounts of the movements at or before it, customers with MRR > 0
 * the count of `new`/`reactivation` minus `churn` movements, and a period holds the movements in
 * (period_start, next period_start]. Every request runs in one read-only snapshot.
 */
import type { Sql } from "../../../db/client";
import { chainNow } from "../../../domain/status";
import { CHURN_REASONS, MOVEMENT_KINDS, periodOfDaySql, rate, type MovementKind } from "../../../domain/mrr";
import { DEADLINE_LIST_MS, withDeadline } from "../../deadline";
import { InvalidParameterError } from "../../errors";
import { addPeriods, periodStart, resolvePeriods, type PeriodRange } from "../stats/service";
import type { StatsInterval } from "../stats/model";
import type { CohortsResponse, MovementRecord, MrrPeriod, MrrResponse } from "./model";

/** One MRR or cohorts request before "now" is known. */
export type MrrRequest = {
  merchant: string;
  chainId: number;
  interval: StatsInterval;
  since?: Date;
  until?: Date;
  /** Exact, case-insensitive token symbol. */
  token?: string;
};

type TokenRow = { token: string; symbol: string | null; decimals: number | null };

const secs = (d: Date) => Math.floor(d.getTime() / 1000);

/** The token filter on movements `m` (by symbol, as `/v0/stats`). */
function tokenFilter(sql: Sql, chainId: number, token: string | undefined) {
  return token
    ? sql`and exists (select 1 from tokens t where t.chain_id = ${chainId} and t.address = m.token
        and lower(t.symbol) = lower(${token}))`
    : sql``;
}

/** Tokens the merchant has movements in (from the daily rollup), with their metadata, in address order. */
function tokensOf(sql: Sql, r: MrrRequest) {
  return sql<TokenRow[]>`
    select m.token, t.symbol, t.decimals
    from (select distinct m.token from mrr_daily m
      where m.merchant = ${r.merchant} and m.chain_id = ${r.chainId} ${tokenFilter(sql, r.chainId, r.token)}) m
    left join tokens t on t.chain_id = ${r.chainId} and t.address = m.token
    order by m.token`;
}

/** The MRR of one token of a merchant at instant `at` (unix s), base units: the movements at or before it. */
export async function mrrAt(sql: Sql, merchant: string, chainId: number, token: string, at: number): Promise<bigint> {
  const [row] = await sql<{ mrr: string }[]>`
    select coalesce(sum(mrr_after - mrr_before), 0) as mrr from mrr_movements
    where merchant = ${merchant} and chain_id = ${chainId} and token = ${token} and at <= ${at}`;
  return BigInt(row!.mrr);
}

type PeriodRow = {
  token: string;
  p: string;
  kind: MovementKind;
  reason: string;
  recovered: boolean;
  /** The customers had MRR > 0 since the period's start (their stretch began before its first day). */
  held: boolean;
  /** Their previous churn lies before the period: churned customers count once per period. */
  first: boolean;
  count: string;
  amount: string;
};

/**
 * The merchant's daily rollup rows (migration 0045) summed per period of the request's interval (unix start `p`),
 * kind, reason, and whether the customers were held since the period's start or churned in it before.
 */
function periodRows(sql: Sql, r: MrrRequest) {
  const p = periodOfDaySql(sql, r.interval, sql`m.day`);
  return sql<PeriodRow[]>`
    select m.token, ${p} as p, m.kind, m.reason, m.recovered, m.stretch_day::bigint * 86400 < ${p} as held,
      m.prev_churn_day::bigint * 86400 < ${p} as first, sum(m.count) as count, sum(m.amount) as amount
    from mrr_daily m
    where m.merchant = ${r.merchant} and m.chain_id = ${r.chainId} ${tokenFilter(sql, r.chainId, r.token)}
    group by 1, 2, 3, 4, 5, 6, 7`;
}

const zeroFigure = () => ({ count: 0, amount: "0" });

/** What one period of one token accumulates from the grouped rows. */
function emptyPeriod() {
  return {
    movements: Object.fromEntries(MOVEMENT_KINDS.map((k) => [k, { count: 0, amount: 0n }])) as Record<
      MovementKind,
      { count: number; amount: bigint }
    >,
    churnByReason: new Map<string, { count: number; amount: bigint }>(),
    recovered: { count: 0, amount: 0n },
    held: { expansion: 0n, contraction: 0n, churn: 0n },
  };
}
type PeriodAcc = ReturnType<typeof emptyPeriod>;

/** The customer count change of a movement kind. */
const customerStep = (kind: MovementKind) =>
  kind === "new" || kind === "reactivation" ? 1 : kind === "churn" ? -1 : 0;

/**
 * Per token: the daily rows folded into periods (unix starts) from `since` on, with each period's churned customers
 * (a churn counts unless the customer's previous churn lies in the same period), and the MRR and customers before.
 */
function accumulate(rows: PeriodRow[], since: number) {
  const out = new Map<
    string,
    { periods: Map<number, PeriodAcc & { churned: number }>; before: { mrr: bigint; customers: number } }
  >();
  for (const row of rows) {
    let t = out.get(row.token);
    if (!t) out.set(row.token, (t = { periods: new Map(), before: { mrr: 0n, customers: 0 } }));
    const p = Number(row.p);
    const count = Number(row.count);
    const amount = BigInt(row.amount);
    if (p < since) {
      t.before.mrr += amount;
      t.before.customers += customerStep(row.kind) * count;
      continue;
    }
    const f = t.periods.get(p) ?? t.periods.set(p, { ...emptyPeriod(), churned: 0 }).get(p)!;
    const k = f.movements[row.kind];
    k.count += count;
    k.amount += amount;
    if (row.kind === "churn") {
      const c = f.churnByReason.get(row.reason) ?? { count: 0, amount: 0n };
      c.count += count;
      c.amount += amount;
      f.churnByReason.set(row.reason, c);
      if (row.first) f.churned += count;
    }
    if (row.recovered) {
      f.recovered.count += count;
      f.recovered.amount += amount;
    }
    if (row.held && (row.kind === "expansion" || row.kind === "contraction" || row.kind === "churn")) {
      f.held[row.kind] += amount;
    }
  }
  return out;
}

/** The figures of consecutive periods (unix starts) of one token, from the MRR and customers at the first's start. */
function periodFigures(
  acc: Map<number, PeriodAcc & { churned: number }> | undefined,
  periods: number[],
  start: { mrr: bigint; customers: number },
): MrrPeriod[] {
  let mrr = start.mrr;
  let customers = start.customers;
  return periods.map((p) => {
    const f = acc?.get(p) ?? { ...emptyPeriod(), churned: 0 };
    const mv = f.movements;
    const total = MOVEMENT_KINDS.reduce((s, k) => s + mv[k].amount, 0n);
    const churnedCustomers = f.churned;
    const newCustomers = mv.new.count;
    const lost = -mv.contraction.amount - mv.churn.amount;
    const retained = mrr + f.held.contraction + f.held.churn;
    const period: MrrPeriod = {
      period_start: new Date(p * 1000).toISOString(),
      mrr_start: mrr.toString(),
      mrr_end: (mrr + total).toString(),
      movements: Object.fromEntries(
        MOVEMENT_KINDS.map((k) => [k, { count: mv[k].count, amount: mv[k].amount.toString() }]),
      ) as MrrPeriod["movements"],
      churn_by_reason: Object.fromEntries(
        CHURN_REASONS.map((reason) => {
          const c = f.churnByReason.get(reason);
          return [reason, c ? { count: c.count, amount: c.amount.toString() } : zeroFigure()];
        }),
      ) as MrrPeriod["churn_by_reason"],
      recovered: { count: f.recovered.count, amount: f.recovered.amount.toString() },
      customers_start: customers,
      new_customers: newCustomers,
      churned_customers: churnedCustomers,
      subscriber_churn_rate: rate(BigInt(churnedCustomers), BigInt(customers + newCustomers)),
      gross_revenue_churn: rate(lost, mrr),
      nrr: rate(retained + f.held.expansion, mrr),
      grr: rate(retained, mrr),
    };
    mrr += total;
    for (const k of MOVEMENT_KINDS) customers += customerStep(k) * mv[k].count;
    return period;
  });
}

/**
 * LTV: arpa ÷ the mean subscriber churn rate of `last` (complete periods), floor; null when that mean is 0. A
 * period without a denominator counts as a rate of 0.
 */
function ltv(arpa: bigint, last: MrrPeriod[]): string | null {
  // mean = Σ c_i/d_i ÷ n, so arpa ÷ mean = arpa × n × D ÷ Σ c_i × (D / d_i), D = Π d_i.
  const terms = last
    .map((p) => ({ c: BigInt(p.churned_customers), d: BigInt(p.customers_start + p.new_customers) }))
    .filter((x) => x.d > 0n);
  const D = terms.reduce((acc, x) => acc * x.d, 1n);
  const sum = terms.reduce((acc, x) => acc + x.c * (D / x.d), 0n);
  if (sum === 0n) return null;
  return ((arpa * BigInt(last.length) * D) / sum).toString();
}

/** "Now" of a request (the status rule's) and the range it resolves to. */
async function requestNow(tx: Sql, req: MrrRequest) {
  const [{ now_s }] = await tx<{ now_s: string }[]>`select n.now_s from ${chainNow(tx, req.chainId)}`;
  const nowS = Number(now_s);
  const now = new Date(nowS * 1000);
  return { nowS, now, range: resolvePeriods(req.interval, now, req.since, req.until) };
}

/** The MRR response of one merchant. */
export async function merchantMrr(sql: Sql, req: MrrRequest): Promise<MrrResponse> {
  return withDeadline(
    sql.begin("isolation level repeatable read read only", async (t) => {
      const tx = t as unknown as Sql;
      const { now, range } = await requestNow(tx, req);
      // The three complete periods before the current one, for LTV.
      const current = periodStart(now, req.interval);
      const last = [-3, -2, -1].map((n) => secs(addPeriods(current, req.interval, n)));
      const periods = range.periods.map(secs);
      const since = periods[0]!;
      const [tokens, grouped] = await Promise.all([tokensOf(tx, req), periodRows(tx, req)]);
      const acc = accumulate(grouped, since);
      const accLast = accumulate(grouped, last[0]!);
      return {
        merchant: req.merchant,
        chain_id: req.chainId,
        interval: req.interval,
        since: range.since.toISOString(),
        until: range.until.toISOString(),
        now: now.toISOString(),
        tokens: tokens.map((tk) => {
          // Movements are never ahead of "now" (an expiry is recorded once final): all of them make the MRR now.
          let mrr = 0n;
          let customers = 0;
          for (const row of grouped) {
            if (row.token !== tk.token) continue;
            mrr += BigInt(row.amount);
            customers += customerStep(row.kind) * Number(row.count);
          }
          const arpa = customers > 0 ? mrr / BigInt(customers) : 0n;
          const a = acc.get(tk.token);
          const l = accLast.get(tk.token);
          return {
            token: tk.token,
            currency: tk.symbol,
            token_decimals: tk.decimals,
            mrr: mrr.toString(),
            arr: (12n * mrr).toString(),
            arpa: arpa.toString(),
            customers,
            ltv: ltv(arpa, periodFigures(l?.periods, last, l?.before ?? { mrr: 0n, customers: 0 })),
            periods: periodFigures(a?.periods, periods, a?.before ?? { mrr: 0n, customers: 0 }),
          };
        }),
      };
    }),
    DEADLINE_LIST_MS,
  );
}

/** The cohort rollup rows (migration 0045) of cohorts starting at or after `since`, for periods before `until`. */
function cohortRows(sql: Sql, r: MrrRequest, since: number, until: number) {
  return sql<{ token: string; c: string; p: string; dm: string; dc: string; size: string }[]>`
    select m.token, m.cohort_start as c, m.period_start as p, m.amount as dm, m.customers as dc, m.size
    from mrr_cohorts m
    where m.merchant = ${r.merchant} and m.chain_id = ${r.chainId} and m.interval = ${r.interval}
      and m.cohort_start >= ${since} and m.period_start < ${until} ${tokenFilter(sql, r.chainId, r.token)}`;
}

/** The cohorts response of one merchant. */
export async function merchantCohorts(sql: Sql, req: MrrRequest): Promise<CohortsResponse> {
  return withDeadline(
    sql.begin("isolation level repeatable read read only", async (t) => {
      const tx = t as unknown as Sql;
      const { now, range } = await requestNow(tx, req);
      // Periods after the one holding "now" have no figures yet.
      const end = Math.min(secs(range.until), secs(addPeriods(periodStart(now, req.interval), req.interval, 1)));
      const periods = range.periods.map(secs).filter((p) => p < end);
      const [tokens, rows] = await Promise.all([tokensOf(tx, req), cohortRows(tx, req, secs(range.since), end)]);
      const index = new Map(periods.map((p, i) => [p, i]));
      return {
        merchant: req.merchant,
        chain_id: req.chainId,
        interval: req.interval,
        since: range.since.toISOString(),
        until: range.until.toISOString(),
        now: now.toISOString(),
        tokens: tokens.map((tk) => {
          // Cohort → per period index: Δmrr, Δcustomers; and its size.
          const cohorts = new Map<number, { size: number; dm: bigint[]; dc: number[] }>();
          for (const row of rows) {
            const c = Number(row.c);
            const i = index.get(Number(row.p));
            if (row.token !== tk.token || !index.has(c) || i === undefined) continue;
            const e =
              cohorts.get(c) ??
              cohorts.set(c, { size: 0, dm: periods.map(() => 0n), dc: periods.map(() => 0) }).get(c)!;
            e.size += Number(row.size);
            e.dm[i]! += BigInt(row.dm);
            e.dc[i]! += Number(row.dc);
          }
          return {
            token: tk.token,
            currency: tk.symbol,
            token_decimals: tk.decimals,
            cohorts: [...cohorts.entries()]
              .sort(([a], [b]) => a - b)
              .map(([start, c]) => {
                const first = index.get(start)!;
                let mrr = 0n;
                let customers = 0;
                let mrrStart = 0n;
                const out: CohortsResponse["tokens"][number]["cohorts"][number]["periods"] = [];
                for (let i = first; i < periods.length; i++) {
                  mrr += c.dm[i]!;
                  customers += c.dc[i]!;
                  if (i === first) mrrStart = mrr;
                  out.push({
                    n: i - first,
                    customers,
                    mrr: mrr.toString(),
                    customer_retention: rate(BigInt(customers), BigInt(c.size)),
                    revenue_retention: null,
                  });
                }
                for (const p of out) p.revenue_retention = rate(BigInt(p.mrr), mrrStart);
                return {
                  cohort_start: new Date(start * 1000).toISOString(),
                  size: c.size,
                  mrr_start: mrrStart.toString(),
                  periods: out,
                };
              }),
          };
        }),
      };
    }),
    DEADLINE_LIST_MS,
  );
}

/** One movements page request. */
export type MovementsRequest = {
  merchant: string;
  chainId: number;
  token?: string;
  since?: Date;
  until?: Date;
  kind?: MovementKind;
  limit: number;
  startingAfter?: string;
};

type MovementRow = {
  id: string;
  at: string;
  block_number: string;
  customer: string;
  token: string;
  symbol: string | null;
  decimals: number | null;
  kind: MovementKind;
  mrr_before: string;
  mrr_after: string;
  reason: string | null;
  recovered: boolean;
  allocation_ids: string[];
};

/** A movement record of a row. */
export function toMovementRecord(r: MovementRow): MovementRecord {
  return {
    id: r.id,
    at: new Date(Number(r.at) * 1000).toISOString(),
    block_number: String(r.block_number),
    customer: r.customer,
    token: r.token,
    currency: r.symbol,
    token_decimals: r.decimals,
    kind: r.kind,
    mrr_before: String(r.mrr_before),
    mrr_after: String(r.mrr_after),
    amount: (BigInt(r.mrr_after) - BigInt(r.mrr_before)).toString(),
    reason: r.reason,
    recovered: r.recovered,
    allocation_ids: r.allocation_ids,
  };
}

/** A page of movements, newest first (by instant, block, id), after `startingAfter`; `more`: a next page exists. */
export async function movementsPage(
  sql: Sql,
  req: MovementsRequest,
): Promise<{ rows: MovementRecord[]; more: boolean }> {
  let after = sql``;
  if (req.startingAfter !== undefined) {
    const [c] = await sql<{ at: string; block_number: string }[]>`
      select at, block_number from mrr_movements
      where chain_id = ${req.chainId} and id = ${req.startingAfter} and merchant = ${req.merchant}`;
    if (!c) throw new InvalidParameterError("starting_after", "starting_after names no movement of this merchant");
    after = sql`and (m.at, m.block_number, m.id) < (${c.at}::bigint, ${c.block_number}::bigint, ${req.startingAfter})`;
  }
  const rows = await withDeadline(
    sql<MovementRow[]>`
      select m.id, m.at, m.block_number, m.customer, m.token, t.symbol, t.decimals, m.kind, m.mrr_before, m.mrr_after,
        m.reason, m.recovered, m.allocation_ids
      from mrr_movements m
      left join tokens t on t.chain_id = m.chain_id and t.address = m.token
      where m.merchant = ${req.merchant} and m.chain_id = ${req.chainId} ${after}
        ${req.since ? sql`and m.at >= ${secs(req.since)}` : sql``}
        ${req.until ? sql`and m.at < ${secs(req.until)}` : sql``}
        ${req.kind ? sql`and m.kind = ${req.kind}` : sql``}
        ${tokenFilter(sql, req.chainId, req.token)}
      order by m.at desc, m.block_number desc, m.id desc
      limit ${req.limit + 1}`,
    DEADLINE_LIST_MS,
  );
  return { rows: rows.slice(0, req.limit).map(toMovementRecord), more: rows.length > req.limit };
}
