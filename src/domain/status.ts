/**
 * The computed subscription status (docs/api-rules.md "Status"), first match wins: BLOCKED, CANCELLED, PAUSED,
 * PENDING, EXPIRED, ACTIVE. ACTIVE mirrors the contract's `isActive`: active while
 * now <= last_paid_at + interval + grace. The SQL fragments and the TypeScript function below are the same rule;
 * test/domain/status.test.ts holds them equal.
 */
import type postgres from "postgres";

type Sql = postgres.Sql<{}>;

/** The statuses, in precedence order. */
export const SUBSCRIPTION_STATUSES = ["BLOCKED", "CANCELLED", "PAUSED", "PENDING", "EXPIRED", "ACTIVE"] as const;

/** A computed status. */
export type SubscriptionStatus = (typeof SUBSCRIPTION_STATUSES)[number];

/** The facts the status depends on. */
export type StatusInput = {
  blocked: boolean;
  cancelled: boolean;
  paused: boolean;
  timesExecuted: number;
  lastPaidAt: number;
  interval: number;
  grace: number;
};

/** Last unix second at which a paid subscription is still ACTIVE (EXPIRED from the next second on). */
export function paidUntil(s: Pick<StatusInput, "lastPaidAt" | "interval" | "grace">): number {
  return s.lastPaidAt + s.interval + s.grace;
}

/** The status at unix second `nowS`. */
export function subscriptionStatus(s: StatusInput, nowS: number): SubscriptionStatus {
  if (s.blocked) return "BLOCKED";
  if (s.cancelled) return "CANCELLED";
  if (s.paused) return "PAUSED";
  if (s.timesExecuted === 0) return "PENDING";
  if (nowS > paidUntil(s)) return "EXPIRED";
  return "ACTIVE";
}

/** SQL of {@link paidUntil} over the aliases `s` (subscriptions) and `p` (plans, possibly left joined). */
export function paidUntilSql(sql: Sql) {
  return sql`(s.last_paid_at + coalesce(p.interval_s, 0) + coalesce(p.grace_s, 0))`;
}

/**
 * SQL of {@link subscriptionStatus}. Expects the aliases `s` (subscriptions), `p` (plans), `b` (blocked_subscribers,
 * left joined; see {@link statusJoins}) and `n` (a row with `now_s`, see {@link chainNow}).
 */
export function statusSql(sql: Sql) {
  return sql`(case
    when coalesce(b.blocked, false) then 'BLOCKED'
    when s.cancelled then 'CANCELLED'
    when s.paused then 'PAUSED'
    when s.times_executed = 0 then 'PENDING'
    when n.now_s > ${paidUntilSql(sql)} then 'EXPIRED'
    else 'ACTIVE'
  end)`;
}

/** The joins {@link statusSql} needs, from `subscriptions s`. */
export function statusJoins(sql: Sql) {
  return sql`
    left join plans p on p.chain_id = s.chain_id and p.module = s.module and p.plan_id = s.plan_id
    left join blocked_subscribers b on b.chain_id = s.chain_id and b.module = s.module and b.subscriber = s.subscriber`;
}

/**
 * `n`: the chain's freshness row and "now" in whole unix seconds — the later of the wall clock and the newest
 * indexed block's timestamp, so a chain whose clock was moved forward agrees with the contracts. Always one row,
 * also before the chain's first batch (then `indexed_block` is null and now is the wall clock).
 */
export function chainNow(sql: Sql, chainId: number) {
  return sql`(
    select c.chain_id as known_chain_id, c.indexed_block, c.indexed_time,
      floor(extract(epoch from greatest(now(), c.indexed_time)))::bigint as now_s
    from (select 1) one left join chains c on c.chain_id = ${chainId}
  ) n`;
}
