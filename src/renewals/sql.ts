/** SQL fragments that read stored renewal outlooks (for the API's subscription records and renewals list). */
import type { Sql } from "../db/client";

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

/** The outlook's fields (a `RenewalRow`), every amount as text. */
export function renewalFields(sql: Sql) {
  return sql`'due_at', ro.due_at::text, 'outlook', ro.outlook, 'reason', ro.reason, 'amount', ro.amount::text,
    'currency', rt.symbol, 'token_decimals', rt.decimals, 'balance', ro.balance::text,
    'allowance', ro.allowance::text, 'credit', ro.credit::text, 'shortfall', ro.shortfall::text,
    'checked_block', ro.checked_block::text, 'checked_at', extract(epoch from ro.checked_at)::bigint::text`;
}

/** Column `renewal`: the outlook as JSON (a `RenewalRow`), or null. Needs `renewalJoins`. */
export function renewalColumn(sql: Sql) {
  return sql`case when ro.subscription_id is null then null else json_build_object(${renewalFields(sql)}) end as renewal`;
}
