/**
 * The status of a spend permission (spend-permissions spec §2.2) in SQL, the twin of `permissionStatus` in
 * ./spend-permission.ts; test/domain/spend-permission-status.test.ts holds the two equal.
 */
import type postgres from "postgres";

type Sql = postgres.Sql<{}>;

/** Grace when the chain row records none (the default of SPEND_PERMISSION_GRACE_S). */
export const DEFAULT_PERMISSION_GRACE_S = 86400;

/**
 * SQL of `permissionStatus` over the aliases `sp` (spend_permissions) and `n` (a row with `now_s` and `grace_s`, see
 * {@link permissionNow}): CANCELLED, EXPIRED (ended), PENDING, EXPIRED (lapsed), ACTIVE.
 */
export function permissionStatusSql(sql: Sql) {
  return sql`(case
    when sp.revoked then 'CANCELLED'
    when n.now_s >= sp.end_s then 'EXPIRED'
    when sp.times_executed = 0 then 'PENDING'
    when n.now_s >= sp.last_period_end + least(n.grace_s, sp.period_s) then 'EXPIRED'
    else 'ACTIVE'
  end)`;
}

/**
 * `n` for permissions: "now" as `chainNow` has it (the later of the wall clock and the indexed block's time) and the
 * chain's grace (`SPEND_PERMISSION_GRACE_S`, recorded by its indexer). Always one row.
 */
export function permissionNow(sql: Sql, chainId: number) {
  return sql`(
    select c.chain_id as known_chain_id, c.indexed_block, c.indexed_time,
      floor(extract(epoch from greatest(now(), c.indexed_time)))::bigint as now_s,
      extract(epoch from greatest(now(), c.indexed_time))::float8 as now_exact,
      coalesce(c.spend_permission_grace_s, ${DEFAULT_PERMISSION_GRACE_S})::bigint as grace_s
    from (select 1) one left join chains c on c.chain_id = ${chainId}
  ) n`;
}

/**
 * The columns of a permission's subscription record (`PermissionRecordRow`) over `sp` and `n`, its creation position
 * included; the caller adds `renewal` (and the token's decimals where it lists).
 */
export function permissionRecordColumns(sql: Sql) {
  return sql`sp.chain_id, sp.subscription_id::text, sp.hash, sp.manager, sp.merchant, sp.subscriber, sp.token,
    sp.allowance::text, sp.period_s, sp.start_s, sp.end_s, sp.salt::text, sp.extra_data, sp.times_executed,
    sp.total_spent::text, sp.last_period_start, sp.last_period_end, sp.last_period_spent::text, sp.next_charge_at,
    sp.revoked, sp.revoked_by,
    to_char(sp.revoked_at at time zone 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"') as revoked_at,
    floor(extract(epoch from sp.created_at))::bigint::text as created_at, n.now_s::text as now_s,
    ${permissionStatusSql(sql)} as status, sp.block_number, sp.log_index`;
}
