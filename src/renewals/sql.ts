/** SQL fragments that read stored renewal outlooks (for the API's subscription records and renewals list). */
import type { Sql } from "../db/client";
import { statusJoins } from "../domain/status";

/**
 * Joins `ro` (the outlook) and `rt` (its token) to `subscriptions s` (after `statusJoins`, which gives `b`): only an
 * outlook judged for the allocation's current next_charge_at while it is still chargeable, so a charge, pause,
 * cancel or block the loop has not evaluated yet never shows an outlook that no longer holds.
 */
export function renewalJoins(sql: Sql) {
  return sql`
    left join renewal_outlooks ro on ro.chain_id = s.chain_id and ro.subscription_id = s.subscription_id
      and ro.next_charge_at = s.next_charge_at and not s.cancelled and not s.paused and not coalesce(b.blocked, false)
      and (s.max_executions = 0 or s.times_executed < s.max_executions)
    left join tokens rt on rt.chain_id = ro.chain_id and rt.address = ro.token`;
}

/**
 * Joins `ro` and `rt` to `spend_permissions sp`: only an outlook judged for the permission's current next due instant
 * while it is chargeable (not revoked, due before `end`, and "now" — the later of the wall clock and the chain's
 * indexed block time — before `end`), so a charge, revoke or end the loop has not evaluated yet shows none.
 */
export function permissionRenewalJoins(sql: Sql) {
  return sql`
    left join renewal_outlooks ro on ro.chain_id = sp.chain_id and ro.subscription_id = sp.subscription_id
      and ro.next_charge_at = sp.next_charge_at and not sp.revoked and sp.next_charge_at < sp.end_s
      and floor(extract(epoch from greatest(now(),
        (select rc.indexed_time from chains rc where rc.chain_id = sp.chain_id)))) < sp.end_s
    left join tokens rt on rt.chain_id = ro.chain_id and rt.address = ro.token`;
}

/** The outlook's fields (a `RenewalRow`), every amount as text. */
export function renewalFields(sql: Sql) {
  return sql`'due_at', ro.due_at::text, 'outlook', ro.outlook, 'reason', ro.reason, 'amount', ro.amount::text,
    'currency', rt.symbol, 'token_decimals', rt.decimals, 'balance', ro.balance::text,
    'allowance', ro.allowance::text, 'credit', ro.credit::text, 'shortfall', ro.shortfall::text,
    'checked_block', ro.checked_block::text, 'checked_at', extract(epoch from ro.checked_at)::bigint::text`;
}

/** Column `renewal`: the outlook as JSON (a `RenewalRow`), or null. Needs `renewalJoins` or `permissionRenewalJoins`. */
export function renewalColumn(sql: Sql) {
  return sql`case when ro.subscription_id is null then null else json_build_object(${renewalFields(sql)}) end as renewal`;
}

/** A stored outlook that still holds, of a module subscription or a spend permission (see `heldOutlooks`). */
export type HeldOutlookRow = {
  chain_id: string;
  /** uint256 of the on-chain id (a permission's hash as a number), decimal. */
  subscription_id: string;
  merchant: string;
  /** The module, or the permission's manager. */
  module: string;
  subscriber: string;
  /** The plan id as the records show it (`<chain_id>:<module>:<plan_id>`, a permission's plan key). */
  plan_id: string;
  /** The record's `on_chain_id`: the decimal id, or a permission's hash. */
  on_chain_id: string;
  token: string;
  symbol: string | null;
  decimals: number | null;
  outlook: string;
  reason: string | null;
  amount: string;
  due_at: string;
};

/**
 * Relation `h`: every stored outlook that still holds (as the records show it), of module subscriptions and of spend
 * permissions, with the columns of {@link HeldOutlookRow} and `renewal` (the outlook as JSON, a `RenewalRow`).
 * `merchant` and `chainId` narrow both branches where given.
 */
export function heldOutlooks(sql: Sql, where: { merchant?: string; chainId?: number } = {}) {
  const filter = (alias: string) =>
    sql`${where.merchant !== undefined ? sql`and ${sql(alias)}.merchant = ${where.merchant}` : sql``}
      ${where.chainId !== undefined ? sql`and ${sql(alias)}.chain_id = ${where.chainId}` : sql``}`;
  return sql`(
    select s.chain_id::text as chain_id, s.subscription_id::text as subscription_id, s.merchant, s.module,
      s.subscriber, s.chain_id || ':' || s.module || ':' || s.plan_id as plan_id,
      s.subscription_id::text as on_chain_id, ro.token, rt.symbol, rt.decimals, ro.outlook, ro.reason,
      ro.amount::text as amount, ro.due_at::text as due_at, ro.subscription_id as sort_id,
      ro.due_at as sort_due, json_build_object(${renewalFields(sql)}) as renewal
    from subscriptions s
    ${statusJoins(sql)}
    ${renewalJoins(sql)}
    where ro.subscription_id is not null ${filter("s")}
    union all
    select sp.chain_id::text, sp.subscription_id::text, sp.merchant, sp.manager, sp.subscriber,
      sp.chain_id || ':' || sp.manager || ':' || sp.merchant || ':' || sp.token || ':' || sp.allowance::text || ':'
        || sp.period_s,
      sp.hash, ro.token, rt.symbol, rt.decimals, ro.outlook, ro.reason, ro.amount::text, ro.due_at::text,
      ro.subscription_id, ro.due_at, json_build_object(${renewalFields(sql)})
    from spend_permissions sp
    ${permissionRenewalJoins(sql)}
    where ro.subscription_id is not null ${filter("sp")}
  ) h`;
}
