/**
 * Merchant statistics: revenue and failures per UTC period from the daily rollups (`stats_daily`), subscription
 * counts by status (the one status rule of src/domain/status.ts), created and cancelled per period, and the run
 * rate of ACTIVE subscriptions. Every query runs in one read-only snapshot, so the parts agree with each other.
 */
import type { Sql } from "../../../db/client";
import { permissionNow, permissionStatusSql } from "../../../domain/spend-permission-status";
import { chainNow, statusJoins, statusSql, SUBSCRIPTION_STATUSES } from "../../../domain/status";
import { DEADLINE_LIST_MS, withDeadline } from "../../deadline";
import { InvalidParameterError } from "../../errors";
import { MAX_INSTANT, MIN_INSTANT } from "../../params";
import { renewalTotals } from "../renewals/service";
import type { StatsInterval, StatsResponse } from "./model";

/** Most periods one response may hold. */
export const MAX_PERIODS = 1000;

/** Periods covered when `since` is omitted (counting the current one). */
export const DEFAULT_PERIODS: Record<StatsInterval, number> = { day: 30, week: 13, month: 12 };

/** Seconds in the run rate's 30-day month. */
export const RUN_RATE_SECONDS = 30 * 86_400;

/** Start of the UTC period holding `d`: midnight, Monday midnight (ISO week) or the 1st of the month. */
export function periodStart(d: Date, interval: StatsInterval): Date {
  const out = new Date(Date.UTC(d.getUTCFullYear(), d.getUTCMonth(), d.getUTCDate()));
  out.setUTCFullYear(d.getUTCFullYear()); // Date.UTC maps years 0–99 to 1900–1999
  if (interval === "week") out.setUTCDate(out.getUTCDate() - ((out.getUTCDay() + 6) % 7));
  if (interval === "month") out.setUTCDate(1);
  return out;
}

/** `d` (a period start) moved by `n` periods. */
export function addPeriods(d: Date, interval: StatsInterval, n: number): Date {
  const out = new Date(d);
  if (interval === "day") out.setUTCDate(out.getUTCDate() + n);
  else if (interval === "week") out.setUTCDate(out.getUTCDate() + 7 * n);
  else out.setUTCMonth(out.getUTCMonth() + n);
  return out;
}

/** The period range of a request: `since` rounded down and `until` rounded up to period boundaries. */
export type PeriodRange = { since: Date; until: Date; periods: Date[] };

/**
 * Resolves `since`/`until` (either may be absent) against "now": `until` defaults to the end of the current
 * period, `since` to DEFAULT_PERIODS before `until`. Throws a 400 for an empty range or more than MAX_PERIODS.
 */
export function resolvePeriods(
  interval: StatsInterval,
  now: Date,
  since: Date | undefined,
  until: Date | undefined,
): PeriodRange {
  let end: Date;
  if (until === undefined) end = addPeriods(periodStart(now, interval), interval, 1);
  else {
    end = periodStart(until, interval);
    if (end.getTime() < until.getTime()) end = addPeriods(end, interval, 1);
  }
  const start =
    since === undefined ? addPeriods(end, interval, -DEFAULT_PERIODS[interval]) : periodStart(since, interval);
  // Whole periods can reach past the dates a parameter may name (the database takes neither year 0 nor 10000).
  if (end.getTime() >= MAX_INSTANT) {
    throw new InvalidParameterError("until", `until, rounded up to a whole ${interval}, must stay before year 10000`);
  }
  // The parameter the start comes from: `since`, or `until` when `since` defaults to a span before it.
  const startParam = since === undefined ? "until" : "since";
  if (start.getTime() < MIN_INSTANT) {
    throw new InvalidParameterError(
      startParam,
      `the range, in whole periods of one ${interval}, must start in year 1 or later`,
    );
  }
  if (start.getTime() >= end.getTime()) {
    throw new InvalidParameterError(startParam, "since must be earlier than until");
  }
  const periods: Date[] = [];
  for (let p = start; p.getTime() < end.getTime(); p = addPeriods(p, interval, 1)) {
    if (periods.length === MAX_PERIODS) {
      throw new InvalidParameterError(
        "since",
        `the range holds more than ${MAX_PERIODS} periods of one ${interval}: narrow since/until or use a longer interval`,
      );
    }
    periods.push(p);
  }
  return { since: start, until: end, periods };
}

/** Inputs of one stats request. */
export type StatsQuery = {
  merchant: string;
  chainId: number;
  interval: StatsInterval;
  range: PeriodRange;
  /** Exact, case-insensitive token symbol. */
  token?: string;
  /** The instant "now" stands for (the later of the wall clock and the indexed block time). */
  now: Date;
};

const day = (d: Date) => d.toISOString().slice(0, 10);

type TokenCols = { token: string; symbol: string | null; decimals: number | null };

/** Rollup rows of one type, summed per period (and token, and reason) over the range. */
function rollups(sql: Sql, q: StatsQuery, type: "CHARGE" | "FAIL") {
  const keys = type === "CHARGE" ? sql`r.token, t.symbol, t.decimals` : sql`r.reason`;
  return sql<({ period_start: string; amount: string; fee: string; count: string } & TokenCols & { reason: string })[]>`
    select to_char(date_trunc(${q.interval}, r.day::timestamp), 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"') as period_start,
      ${keys}, sum(r.amount) as amount, sum(r.fee) as fee, sum(r.count) as count
    from stats_daily r
    left join tokens t on t.chain_id = r.chain_id and t.address = r.token
    where r.chain_id = ${q.chainId} and r.merchant = ${q.merchant} and r.type = ${type}
      and r.day >= ${day(q.range.since)}::date and r.day < ${day(q.range.until)}::date
      ${q.token ? sql`and lower(t.symbol) = lower(${q.token})` : sql``}
    group by 1, ${keys}
    order by 1, 2`;
}

/** The token filter on a subscription's plan (aliases `s`, `p`). */
function planToken(sql: Sql, q: StatsQuery) {
  return q.token
    ? sql`and exists (select 1 from tokens t where t.chain_id = s.chain_id and t.address = p.token
        and lower(t.symbol) = lower(${q.token}))`
    : sql``;
}

/** One row of {@link subscriptionFigures}: a status count, a creation count per period, or a run-rate token. */
type SubscriptionFigure = {
  kind: "status" | "created" | "run_rate";
  key: string | null;
  count: string;
  amount: string | null;
} & TokenCols;

/**
 * Counts by computed status now, creations per period (block time of SubscriptionCreated) and the run rate of the
 * ACTIVE ones per token — Σ floor(amount × 2,592,000 ÷ interval_s) — from one scan of the merchant's subscriptions.
 */
function subscriptionFigures(sql: Sql, q: StatsQuery) {
  return sql<SubscriptionFigure[]>`
    with subs as materialized (
      select ${statusSql(sql)} as status, p.token, p.amount, p.interval_s, s.created_at
      from subscriptions s
      cross join ${chainNow(sql, q.chainId)}
      ${statusJoins(sql)}
      where s.merchant = ${q.merchant} and s.chain_id = ${q.chainId} ${planToken(sql, q)}
      union all
      -- The merchant's spend permissions (it is their spender): allowance per period is the plan amount.
      select ${permissionStatusSql(sql)}, sp.token, sp.allowance, sp.period_s,
        floor(extract(epoch from sp.created_at))::bigint
      from spend_permissions sp
      cross join ${permissionNow(sql, q.chainId)}
      where sp.merchant = ${q.merchant} and sp.chain_id = ${q.chainId} ${permissionToken(sql, q)}
    )
    select 'status' as kind, status as key, null as token, null as symbol, null::int as decimals,
      count(*) as count, null::numeric as amount
    from subs group by status
    union all
    select 'created', to_char(date_trunc(${q.interval}, to_timestamp(created_at) at time zone 'UTC'),
        'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"'), null, null, null, count(*), null
    from subs
    where created_at >= ${q.range.since.getTime() / 1000} and created_at < ${q.range.until.getTime() / 1000}
    group by 2
    union all
    select 'run_rate', null, u.token, t.symbol, t.decimals, count(*), sum(div(u.amount * ${RUN_RATE_SECONDS}, u.interval_s))
    from subs u
    left join tokens t on t.chain_id = ${q.chainId} and t.address = u.token
    where u.status = 'ACTIVE' and u.interval_s > 0
    group by u.token, t.symbol, t.decimals`;
}

/**
 * Subscriptions cancelled per period (block time of SubscriptionCancelled; a subscription is cancelled once), spend
 * permissions revoked included (block time of their Revoked log).
 */
function cancelledPerPeriod(sql: Sql, q: StatsQuery) {
  return sql<{ period_start: string; count: string }[]>`
    select to_char(date_trunc(${q.interval}, x.at at time zone 'UTC'),
        'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"') as period_start, count(*) as count
    from (
      select e.block_time as at
      from subscriptions s
      left join plans p on p.chain_id = s.chain_id and p.module = s.module and p.plan_id = s.plan_id
      join events e on e.chain_id = s.chain_id and e.subscription_id = s.subscription_id
        and e.name = 'SubscriptionCancelled'
      where s.merchant = ${q.merchant} and s.chain_id = ${q.chainId} and s.cancelled
        and e.block_time >= ${q.range.since} and e.block_time < ${q.range.until}
        ${planToken(sql, q)}
      union all
      select sp.revoked_at from spend_permissions sp
      where sp.merchant = ${q.merchant} and sp.chain_id = ${q.chainId} and sp.revoked
        and sp.revoked_at >= ${q.range.since} and sp.revoked_at < ${q.range.until}
        ${permissionToken(sql, q)}
    ) x
    group by 1`;
}

/** The `token` filter (a symbol) over a spend permission `sp`. */
function permissionToken(sql: Sql, q: StatsQuery) {
  return q.token
    ? sql`and exists (select 1 from tokens t where t.chain_id = sp.chain_id and t.address = sp.token
        and lower(t.symbol) = lower(${q.token}))`
    : sql``;
}

const byPeriod = (rows: { period_start: string; count: string }[]) =>
  new Map(rows.map((r) => [r.period_start, Number(r.count)]));

/** A stats request before "now" is known: `since`/`until` as sent. */
export type StatsRequest = Omit<StatsQuery, "range" | "now"> & { since?: Date; until?: Date };

/**
 * Computes the stats response of one merchant, in one read-only snapshot: "now" (the later of the database clock
 * and the newest indexed block, the status rule's now) is read first and fixes the default range.
 */
export async function merchantStats(sql: Sql, req: StatsRequest): Promise<StatsResponse> {
  const { q, parts } = await withDeadline(
    sql.begin("isolation level repeatable read read only", async (t) => {
      // The transaction runs the same tagged templates as the pool (the status fragments are typed for the pool).
      const tx = t as unknown as Sql;
      const [{ now_s }] = await tx<{ now_s: string }[]>`select n.now_s from ${chainNow(tx, req.chainId)}`;
      const now = new Date(Number(now_s) * 1000);
      const q: StatsQuery = { ...req, now, range: resolvePeriods(req.interval, now, req.since, req.until) };
      const parts = await Promise.all([
        rollups(tx, q, "CHARGE"),
        rollups(tx, q, "FAIL"),
        subscriptionFigures(tx, q),
        cancelledPerPeriod(tx, q),
        renewalTotals(tx, req.merchant, req.chainId),
      ]);
      return { q, parts };
    }),
    DEADLINE_LIST_MS,
  );
  const [revenue, failures, figures, cancelled, renewals] = parts;
  const statuses = figures.filter((f) => f.kind === "status");
  const created = figures.filter((f) => f.kind === "created").map((f) => ({ period_start: f.key!, count: f.count }));
  const rate = figures.filter((f) => f.kind === "run_rate").sort((x, y) => (x.token! < y.token! ? -1 : 1));
  const counts = Object.fromEntries(
    SUBSCRIPTION_STATUSES.map((s) => [s, 0]),
  ) as StatsResponse["subscriptions"]["by_status"];
  for (const r of statuses) counts[r.key as keyof typeof counts] = Number(r.count);
  const createdBy = byPeriod(created);
  const cancelledBy = byPeriod(cancelled);
  const periods = q.range.periods.map((p) => p.toISOString());
  return {
    merchant: q.merchant,
    chain_id: q.chainId,
    interval: q.interval,
    since: q.range.since.toISOString(),
    until: q.range.until.toISOString(),
    now: q.now.toISOString(),
    token: q.token ?? null,
    periods,
    revenue: revenue.map((r) => ({
      period_start: r.period_start,
      token: r.token === "" ? null : r.token,
      currency: r.symbol,
      token_decimals: r.decimals,
      gross: r.amount,
      fees: r.fee,
      net: (BigInt(r.amount) - BigInt(r.fee)).toString(),
      charges: Number(r.count),
    })),
    failures: failures.map((r) => ({ period_start: r.period_start, reason: r.reason, count: Number(r.count) })),
    subscriptions: {
      by_status: counts,
      periods: periods
        .map((p) => ({ period_start: p, created: createdBy.get(p) ?? 0, cancelled: cancelledBy.get(p) ?? 0 }))
        .filter((p) => p.created > 0 || p.cancelled > 0),
    },
    run_rate: rate.map((r) => ({
      token: r.token,
      currency: r.symbol,
      token_decimals: r.decimals,
      amount_per_30d: r.amount!,
      active_subscriptions: Number(r.count),
    })),
    renewals,
  };
}
