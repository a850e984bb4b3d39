/** Statements of the movements table (`mrr_movements`, migration 0043) that the indexer runs in its transactions. */
import type { Q } from "../db/query";
import type { CustomerState, Movement } from "./movements";
import { customerKey } from "./movements";
import { periodOfDaySql, type MovementKind } from "../domain/mrr";

/** Latest movement of each customer (its MRR now, and what a reactivation is judged by). */
export async function loadCustomers(
  q: Q,
  chainId: number,
  keys: { merchant: string; customer: string; token: string }[],
): Promise<Map<string, CustomerState>> {
  if (keys.length === 0) return new Map();
  const rows = await q<
    {
      merchant: string;
      customer: string;
      token: string;
      mrr: string;
      kind: MovementKind;
      reason: string | null;
      at: string;
      first_at: string;
      active_since: string;
      prev_churn_at: string;
    }[]
  >`
    select u.m as merchant, u.c as customer, u.t as token, l.mrr_after as mrr, l.kind, l.reason, l.at, l.first_at,
      l.active_since, l.prev_churn_at
    from unnest(${keys.map((k) => k.merchant)}::text[], ${keys.map((k) => k.customer)}::text[],
      ${keys.map((k) => k.token)}::text[]) as u(m, c, t)
    cross join lateral (
      select mrr_after, kind, reason, at, first_at, active_since, prev_churn_at from mrr_movements
      where chain_id = ${chainId} and merchant = u.m and customer = u.c and token = u.t
      order by block_number desc, at desc limit 1) l`;
  return new Map(
    rows.map((r) => [
      customerKey(r.merchant, r.customer, r.token),
      {
        mrr: BigInt(r.mrr),
        kind: r.kind,
        reason: r.reason,
        at: Number(r.at),
        firstAt: Number(r.first_at),
        activeSince: Number(r.active_since),
        lastChurnAt: r.kind === "churn" ? Number(r.at) : Number(r.prev_churn_at),
      },
    ]),
  );
}

/** Plans' amount, interval and token, by `<module>:<planId>`. */
export async function loadPlanAmounts(q: Q, chainId: number, keys: [string, string][]) {
  if (keys.length === 0) return new Map<string, { amount: bigint; interval: number; token: string }>();
  const rows = await q<{ module: string; plan_id: string; amount: string; interval_s: string; token: string }[]>`
    select p.module, p.plan_id::text, p.amount, p.interval_s, p.token from plans p
    join unnest(${keys.map((k) => k[0])}::text[], ${keys.map((k) => k[1])}::bigint[]) as u(m, id)
      on p.module = u.m and p.plan_id = u.id
    where p.chain_id = ${chainId}`;
  return new Map(
    rows.map((r) => [
      `${r.module}:${r.plan_id}`,
      { amount: BigInt(r.amount), interval: Number(r.interval_s), token: r.token.toLowerCase() },
    ]),
  );
}

/**
 * The last failed charge of each allocation after its last successful one (`paidAt`, unix s) and before an instant
 * (`at`): its reason and position, or absent. Keyed `<subscriptionId>:<at>`. Reads the failures' partial index
 * (migration 0046), which a backfill keeps.
 */
export async function loadLastFailures(q: Q, chainId: number, asks: { id: string; at: number; paidAt: number }[]) {
  const out = new Map<string, { reason: string | null; blockNumber: bigint; logIndex: number; time: number }>();
  if (asks.length === 0) return out;
  const rows = await q<
    { id: string; at: string; reason: string | null; block_number: string; log_index: number; t: string }[]
  >`
    select u.id, u.at, l.reason, l.block_number, l.log_index, l.t
    from unnest(${asks.map((a) => a.id)}::text[], ${asks.map((a) => a.at)}::bigint[],
      ${asks.map((a) => a.paidAt)}::bigint[]) as u(id, at, paid)
    cross join lateral (
      select a.reason, a.block_number, a.log_index, extract(epoch from a.block_time)::bigint as t from activity a
      where a.chain_id = ${chainId} and a.subscription_id = u.id::numeric and a.type = 'FAIL'
        and a.block_time > to_timestamp(u.paid) and a.block_time < to_timestamp(u.at)
      order by a.block_number desc, a.log_index desc limit 1) l`;
  for (const r of rows) {
    out.set(`${r.id}:${r.at}`, {
      reason: r.reason,
      blockNumber: BigInt(r.block_number),
      logIndex: r.log_index,
      time: Number(r.t),
    });
  }
  return out;
}

/** Token symbols and decimals. */
export async function loadTokenMeta(q: Q, chainId: number, tokens: string[]) {
  if (tokens.length === 0) return new Map<string, { symbol: string | null; decimals: number | null }>();
  const rows = await q<{ address: string; symbol: string | null; decimals: number | null }[]>`
    select address, symbol, decimals from tokens where chain_id = ${chainId} and address = any(${tokens}::text[])`;
  return new Map(rows.map((r) => [r.address, { symbol: r.symbol, decimals: r.decimals }]));
}

/** Appends movements (ids given). */
export async function insertMovements(q: Q, chainId: number, rows: (Movement & { id: string })[]) {
  if (rows.length === 0) return;
  await q`
    insert into mrr_movements (chain_id, id, merchant, customer, token, block_number, at, kind, mrr_before, mrr_after,
      reason, recovered, allocation_ids, first_at, active_since, prev_churn_at)
    select ${chainId}, u.id, u.merchant, u.customer, u.token, u.bn, u.at, u.kind, u.mb, u.ma, u.reason, u.rec::boolean,
      string_to_array(u.allocs, ' '), u.first_at, u.since, u.prev_churn
    from unnest(${rows.map((r) => r.id)}::text[], ${rows.map((r) => r.merchant)}::text[],
      ${rows.map((r) => r.customer)}::text[], ${rows.map((r) => r.token)}::text[],
      ${rows.map((r) => r.blockNumber.toString())}::bigint[], ${rows.map((r) => r.at)}::bigint[],
      ${rows.map((r) => r.kind)}::text[], ${rows.map((r) => r.mrrBefore.toString())}::numeric[],
      ${rows.map((r) => r.mrrAfter.toString())}::numeric[], ${rows.map((r) => r.reason)}::text[],
      ${rows.map((r) => (r.recovered ? "t" : "f"))}::text[], ${rows.map((r) => r.allocationIds.join(" "))}::text[],
      ${rows.map((r) => r.firstAt)}::bigint[], ${rows.map((r) => r.activeSince)}::bigint[],
      ${rows.map((r) => r.prevChurnAt)}::bigint[])
      as u(id, merchant, customer, token, bn, at, kind, mb, ma, reason, rec, allocs, first_at, since, prev_churn)`;
}

/** Deletes the movements of the blocks above `ancestor` (all when null): a rollback removed them. */
export async function deleteMovementsAbove(q: Q, chainId: number, ancestor: bigint | null) {
  await q`delete from mrr_movements where chain_id = ${chainId} and block_number > ${(ancestor ?? -1n).toString()}`;
}

/** Days (of `(at − 1) ÷ 86,400`) as SQL over movements `m`. */
const DAY = (q: Q, col: string) => q`((m.${q.unsafe(col)} - 1) / 86400)`;

/**
 * Adds (`sign` 1) or takes back (−1) the movements `m` matching `where` to the rollups (`mrr_daily`,
 * `mrr_cohorts`, migration 0045); rows left at zero by a take-back are deleted.
 */
export async function addToRollups(q: Q, where: ReturnType<Q>, sign: 1 | -1) {
  const day = DAY(q, "at");
  await q`
    insert into mrr_daily as d (chain_id, merchant, token, day, kind, reason, recovered, stretch_day, prev_churn_day,
      count, amount)
    select m.chain_id, m.merchant, m.token, ${day}::int, m.kind, coalesce(m.reason, ''), m.recovered,
      case when m.kind in ('expansion', 'contraction', 'churn') and ${DAY(q, "active_since")} >= ${day} - 31
        then ${DAY(q, "active_since")}::int else -1 end,
      case when m.kind = 'churn' and m.prev_churn_at > 0 and ${DAY(q, "prev_churn_at")} >= ${day} - 31
        then ${DAY(q, "prev_churn_at")}::int else -1 end,
      ${sign} * count(*), ${sign} * sum(m.mrr_after - m.mrr_before)
    from mrr_movements m where ${where}
    group by 1, 2, 3, 4, 5, 6, 7, 8, 9
    on conflict (merchant, chain_id, token, day, kind, reason, recovered, stretch_day, prev_churn_day) do update
      set count = d.count + excluded.count, amount = d.amount + excluded.amount`;
  const sqlq = q as unknown as Parameters<typeof periodOfDaySql>[0];
  const of = (interval: "week" | "month", col: string) => periodOfDaySql(sqlq, interval, DAY(q, col) as never);
  await q`
    insert into mrr_cohorts as c (chain_id, merchant, token, interval, cohort_start, period_start, amount, customers,
      size)
    select m.chain_id, m.merchant, m.token, i.interval,
      case when i.interval = 'week' then ${of("week", "first_at")} else ${of("month", "first_at")} end,
      case when i.interval = 'week' then ${of("week", "at")} else ${of("month", "at")} end,
      ${sign} * sum(m.mrr_after - m.mrr_before),
      ${sign} * sum(case when m.kind in ('new', 'reactivation') then 1 when m.kind = 'churn' then -1 else 0 end),
      ${sign} * count(*) filter (where m.kind = 'new')
    from mrr_movements m cross join (values ('week'), ('month')) as i(interval)
    where ${where}
    group by 1, 2, 3, 4, 5, 6
    on conflict (merchant, chain_id, token, interval, cohort_start, period_start) do update
      set amount = c.amount + excluded.amount, customers = c.customers + excluded.customers, size = c.size + excluded.size`;
  if (sign < 0) {
    await q`delete from mrr_daily where count = 0 and amount = 0
      and (merchant, chain_id) in (select distinct m.merchant, m.chain_id from mrr_movements m where ${where})`;
    await q`delete from mrr_cohorts where amount = 0 and customers = 0 and size = 0
      and (merchant, chain_id) in (select distinct m.merchant, m.chain_id from mrr_movements m where ${where})`;
  }
}
