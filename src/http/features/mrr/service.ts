/**
 * MRR figures (analytics.md §3–5) from the movements table (`mrr_movements`, written by the indexer with the status
 * events): the MRR at an instant is the sum of the amounts of the movements at or before it, customers with MRR > 0
 * the count of `new`/`reactivation` minus `churn` movements, and a period holds the movements in
 * (period_start, next period_start]. Every request runs in one read-only snapshot.
 */
import type { Sql } from "../../../db/client";
import { chainNow } from "../../../domain/status";
import { CHURN_REASONS, MOVEMENT_KINDS, rate, type MovementKind } from "../../../domain/mrr";
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

/** Tokens the merchant has movements in, with their metadata, in address order. */
function tokensOf(sql: Sql, r: MrrRequest) {
  return sql<TokenRow[]>`
    select m.token, t.symbol, t.decimals
    from (select distinct m.token from mrr_movements m
      where m.merchant = ${r.merchant} and m.chain_id = ${r.chainId} ${tokenFilter(sql, r.chainId, r.token)}) m
    left join tokens t on t.chain_id = ${r.chainId} and t.address = m.token
    order by m.token`;
}

/** Per token: MRR and customers with MRR > 0 at instant `at` (unix s): the movements at or before it. */
function stateAt(sql: Sql, r: MrrRequest, at: number) {
  return sql<{ token: string; mrr: string; customers: string }[]>`
    select m.token, coalesce(sum(m.mrr_after - m.mrr_before), 0) as mrr,
      coalesce(sum(case when m.kind in ('new', 'reactivation') then 1 when m.kind = 'churn' then -1 else 0 end), 0)
        as customers
    from mrr_movements m
    where m.merchant = ${r.merchant} and m.chain_id = ${r.chainId} and m.at <= ${at}
      ${tokenFilter(sql, r.chainId, r.token)}
    group by m.token`;
}

/** The MRR of one token of a merchant at instant `at` (unix s), base units: the movements at or before it. */
export async function mrrAt(sql: Sql, merchant: string, chainId: number, token: string, at: number): Promise<bigint> {
  const [row] = await sql<{ mrr: string }[]>`
    select coalesce(sum(mrr_after - mrr_before), 0) as mrr from mrr_movements
    where merchant = ${merchant} and chain_id = ${chainId} and token = ${token} and at <= ${at}`;
  return BigInt(row!.mrr);
}

/** The period (as `to_char` renders it) of instant column `at`: the one whose (start, end] holds it. */
const bucket = (sql: Sql, interval: StatsInterval, col: ReturnType<Sql>) =>
  sql`to_char(date_trunc(${interval}, to_timestamp(${col} - 1) at time zone 'UTC'), 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"')`;

type PeriodRow = {
  token: string;
  p: string;
  kind: MovementKind;
  reason: string | null;
  recovered: boolean;
  count: string;
  amount: string;
  held: string;
};

/**
 * Movements in (since, until] grouped by token, period, kind, reason and recovered: count, amount, and the amount of customers that had MRR > 0 at their period's start (the mrr_before of their first
 * movement in it).
 */
function periodRows(sql: Sql, r: MrrRequest, since: number, until: number) {
  return sql<PeriodRow[]>`
    with m as (
      select m.token, m.customer, m.kind, m.reason, m.recovered, m.mrr_after - m.mrr_before as amount,
        ${bucket(sql, r.interval, sql`m.at`)} as p,
        first_value(m.mrr_before) over (partition by m.token, m.customer, ${bucket(sql, r.interval, sql`m.at`)}
          order by m.at, m.block_number, m.id) > 0 as held
      from mrr_movements m
      where m.merchant = ${r.merchant} and m.chain_id = ${r.chainId} and m.at > ${since} and m.at <= ${until}
        ${tokenFilter(sql, r.chainId, r.token)}
    )
    select token, p, kind, reason, recovered, count(*) as count, sum(amount) as amount,
      coalesce(sum(amount) filter (where held), 0) as held
    from m group by token, p, kind, reason, recovered`;
}

const zeroFigure = () => ({ count: 0, amount: "0" });

/** Empty figures of one period. */
function emptyPeriod(p: string) {
  return {
    p,
    movements: Object.fromEntries(MOVEMENT_KINDS.map((k) => [k, { count: 0, amount: 0n }])) as Record<
      MovementKind,
      { count: number; amount: bigint }
    >,
    churnByReason: new Map<string, { count: number; amount: bigint }>(),
    recovered: { count: 0, amount: 0n },
    held: { expansion: 0n, contraction: 0n, churn: 0n },
  };
}

/** Rows of {@link periodRows} folded over the periods of a range, per token. */
function foldPeriods(rows: PeriodRow[], periods: string[]) {
  const out = new Map<string, Map<string, ReturnType<typeof emptyPeriod>>>();
  for (const row of rows) {
    let byP = out.get(row.token);
    if (!byP) out.set(row.token, (byP = new Map(periods.map((p) => [p, emptyPeriod(p)]))));
    const f = byP.get(row.p);
    if (!f) continue;
    const count = Number(row.count);
    const amount = BigInt(row.amount);
    const k = f.movements[row.kind];
    k.count += count;
    k.amount += amount;
    if (row.kind === "churn") {
      const reason = row.reason ?? "";
      const c = f.churnByReason.get(reason) ?? { count: 0, amount: 0n };
      c.count += count;
      c.amount += amount;
      f.churnByReason.set(reason, c);
    }
    if (row.recovered) {
      f.recovered.count += count;
      f.recovered.amount += amount;
    }
    if (row.kind === "expansion" || row.kind === "contraction" || row.kind === "churn") {
      f.held[row.kind] += BigInt(row.held);
    }
  }
  return out;
}

/** Customers that churned in each period, counted once per period, per token. */
function churnedPerPeriod(sql: Sql, r: MrrRequest, since: number, until: number) {
  return sql<{ token: string; p: string; churned: string }[]>`
    select m.token, ${bucket(sql, r.interval, sql`m.at`)} as p, count(distinct m.customer) as churned
    from mrr_movements m
    where m.merchant = ${r.merchant} and m.chain_id = ${r.chainId} and m.at > ${since} and m.at <= ${until}
      and m.kind = 'churn' ${tokenFilter(sql, r.chainId, r.token)}
    group by 1, 2`;
}

/** The figures of every period of a range for one token, from the state at its start. */
function periodFigures(
  folded: Map<string, ReturnType<typeof emptyPeriod>> | undefined,
  churned: Map<string, number>,
  periods: string[],
  start: { mrr: bigint; customers: number },
): MrrPeriod[] {
  let mrr = start.mrr;
  let customers = start.customers;
  return periods.map((p) => {
    const f = folded?.get(p) ?? emptyPeriod(p);
    const mv = f.movements;
    const total = MOVEMENT_KINDS.reduce((s, k) => s + mv[k].amount, 0n);
    const churnedCustomers = churned.get(p) ?? 0;
    const newCustomers = mv.new.count;
    const lost = -mv.contraction.amount - mv.churn.amount;
    const retained = mrr + f.held.contraction + f.held.churn;
    const period: MrrPeriod = {
      period_start: p,
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
    customers += mv.new.count + mv.reactivation.count - mv.churn.count;
    return period;
  });
}

/** The periods of a range as `to_char` renders them. */
const iso = (range: PeriodRange) => range.periods.map((p) => p.toISOString());

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

/** The MRR response of one merchant. */
export async function merchantMrr(sql: Sql, req: MrrRequest): Promise<MrrResponse> {
  return withDeadline(
    sql.begin("isolation level repeatable read read only", async (t) => {
      const tx = t as unknown as Sql;
      const [{ now_s }] = await tx<{ now_s: string }[]>`select n.now_s from ${chainNow(tx, req.chainId)}`;
      const nowS = Number(now_s);
      const now = new Date(nowS * 1000);
      const range = resolvePeriods(req.interval, now, req.since, req.until);
      // The three complete periods before the current one, for LTV.
      const current = periodStart(now, req.interval);
      const lastRange: PeriodRange = {
        since: addPeriods(current, req.interval, -3),
        until: current,
        periods: [-3, -2, -1].map((n) => addPeriods(current, req.interval, n)),
      };
      const [since, until, lSince, lUntil] = [range.since, range.until, lastRange.since, lastRange.until].map(secs);
      const [tokens, nowState, startState, rows, churned, lStartState, lRows, lChurned] = await Promise.all([
        tokensOf(tx, req),
        stateAt(tx, req, nowS),
        stateAt(tx, req, since!),
        periodRows(tx, req, since!, until!),
        churnedPerPeriod(tx, req, since!, until!),
        stateAt(tx, req, lSince!),
        periodRows(tx, req, lSince!, lUntil!),
        churnedPerPeriod(tx, req, lSince!, lUntil!),
      ]);
      const periods = iso(range);
      const lPeriods = iso(lastRange);
      const folded = foldPeriods(rows, periods);
      const lFolded = foldPeriods(lRows, lPeriods);
      const byToken = <T extends { token: string }>(xs: T[]) => new Map(xs.map((x) => [x.token, x]));
      const churnMap = (xs: { token: string; p: string; churned: string }[], token: string) =>
        new Map(xs.filter((x) => x.token === token).map((x) => [x.p, Number(x.churned)]));
      const [nowBy, startBy, lStartBy] = [nowState, startState, lStartState].map(byToken);
      const state = (m: Map<string, { mrr: string; customers: string }>, token: string) => {
        const s = m.get(token);
        return { mrr: BigInt(s?.mrr ?? 0), customers: Number(s?.customers ?? 0) };
      };
      return {
        merchant: req.merchant,
        chain_id: req.chainId,
        interval: req.interval,
        since: range.since.toISOString(),
        until: range.until.toISOString(),
        now: now.toISOString(),
        tokens: tokens.map((tk) => {
          const { mrr, customers } = state(nowBy!, tk.token);
          const arpa = customers > 0 ? mrr / BigInt(customers) : 0n;
          const last = periodFigures(
            lFolded.get(tk.token),
            churnMap(lChurned, tk.token),
            lPeriods,
            state(lStartBy!, tk.token),
          );
          return {
            token: tk.token,
            currency: tk.symbol,
            token_decimals: tk.decimals,
            mrr: mrr.toString(),
            arr: (12n * mrr).toString(),
            arpa: arpa.toString(),
            customers,
            ltv: ltv(arpa, last),
            periods: periodFigures(
              folded.get(tk.token),
              churnMap(churned, tk.token),
              periods,
              state(startBy!, tk.token),
            ),
          };
        }),
      };
    }),
    DEADLINE_LIST_MS,
  );
}

/** Per token, cohort and period: changes of the cohort's MRR and customer count at the period's end. */
function cohortRows(sql: Sql, r: MrrRequest, until: number) {
  return sql<{ token: string; cohort: string; p: string; dm: string; dc: string; size: string }[]>`
    with m as (
      select m.token, m.customer, m.mrr_after, ${bucket(sql, r.interval, sql`m.at`)} as p,
        row_number() over (partition by m.token, m.customer, ${bucket(sql, r.interval, sql`m.at`)}
          order by m.at desc, m.block_number desc, m.id desc) as rn
      from mrr_movements m
      where m.merchant = ${r.merchant} and m.chain_id = ${r.chainId} and m.at <= ${until}
        ${tokenFilter(sql, r.chainId, r.token)}
    ), e as (
      select token, customer, p, mrr_after as mrr,
        coalesce(lag(mrr_after) over w, 0) as prev,
        min(p) over (partition by token, customer) as cohort
      from m where rn = 1
      window w as (partition by token, customer order by p)
    )
    select token, cohort, p, sum(mrr - prev) as dm,
      sum((mrr > 0)::int - (prev > 0)::int) as dc,
      count(*) filter (where p = cohort) as size
    from e group by token, cohort, p`;
}

/** The cohorts response of one merchant. */
export async function merchantCohorts(sql: Sql, req: MrrRequest): Promise<CohortsResponse> {
  return withDeadline(
    sql.begin("isolation level repeatable read read only", async (t) => {
      const tx = t as unknown as Sql;
      const [{ now_s }] = await tx<{ now_s: string }[]>`select n.now_s from ${chainNow(tx, req.chainId)}`;
      const now = new Date(Number(now_s) * 1000);
      const range = resolvePeriods(req.interval, now, req.since, req.until);
      // Periods after the one holding "now" have no figures yet.
      const end = Math.min(
        range.until.getTime(),
        addPeriods(periodStart(now, req.interval), req.interval, 1).getTime(),
      );
      const periods = iso(range).filter((p) => Date.parse(p) < end);
      const [tokens, rows] = await Promise.all([tokensOf(tx, req), cohortRows(tx, req, Math.floor(end / 1000))]);
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
          const cohorts = new Map<string, { size: number; dm: bigint[]; dc: number[] }>();
          for (const row of rows) {
            if (row.token !== tk.token || !index.has(row.cohort)) continue;
            const c =
              cohorts.get(row.cohort) ??
              cohorts
                .set(row.cohort, { size: 0, dm: periods.map(() => 0n), dc: periods.map(() => 0) })
                .get(row.cohort)!;
            const i = index.get(row.p);
            if (i === undefined) continue;
            c.size += Number(row.size);
            c.dm[i]! += BigInt(row.dm);
            c.dc[i]! += Number(row.dc);
          }
          return {
            token: tk.token,
            currency: tk.symbol,
            token_decimals: tk.decimals,
            cohorts: [...cohorts.entries()]
              .sort(([a], [b]) => (a < b ? -1 : 1))
              .map(([start, c]) => {
                const first = index.get(start)!;
                let mrr = 0n;
                let customers = 0;
                const out: CohortsResponse["tokens"][number]["cohorts"][number]["periods"] = [];
                let mrrStart = 0n;
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
                return { cohort_start: start, size: c.size, mrr_start: mrrStart.toString(), periods: out };
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
