/** The Spend Permission keeper's reads and writes: due permissions of one spender, and failed simulations. */
import type { Sql } from "../db/client";
import { indexesDeferredSql } from "../db/deferred-indexes";

/** A permission the keeper should try to charge now: the struct `spend` takes, and what the index knows of it. */
export type DuePermission = {
  /** The manager (the pass reports permissions under it, as it reports subscriptions under their module). */
  module: string;
  subscription_id: string;
  hash: string;
  /** The account and the token: one account's charges in one token draw on one balance. */
  subscriber: string;
  token: string;
  spender: string;
  allowance: string;
  period_s: string;
  start_s: string;
  end_s: string;
  salt: string;
  extra_data: string;
  times_executed: number;
  last_period_start: string | null;
  last_period_end: string;
  last_period_spent: string | null;
  next_charge_at: string;
  /** Failed simulations in the current period since the last log of the permission. */
  fails: number;
};

/** What the due query needs besides the database. */
export type DuePermissionQuery = {
  chainId: number;
  manager: string;
  /** The keeper's address: only permissions it can `spend` (their spender) are due to it. */
  spender: string;
  /** Unix seconds: the later of the wall clock and the chain's latest block. */
  now: bigint;
  /** Delays (seconds) after the 1st, 2nd, … failed simulation; the last one repeats. */
  retrySchedule: number[];
  /** This keeper's claim owner: other owners' live claims hide a permission. */
  owner: string;
  limit: number;
};

/**
 * Due permissions of one spender (spend-permissions spec §5): not revoked, `start ≤ now < end`, and no Used log in
 * the current period (`N ≤ now`, N being `start` before the first charge and the charged period's end after it).
 *
 * After `n` failed simulations (`keeper_rechecks`) a permission is due again `retrySchedule[n-1]` seconds after the
 * last one; the count lapses when its period ends or when a log changed the permission's charges.
 *
 * Ordered by due instant, then hash (as the renewal outlook orders one wallet's permissions).
 */
export async function findDuePermissions(sql: Sql, q: DuePermissionQuery): Promise<DuePermission[]> {
  const now = q.now.toString();
  const schedule = `{${q.retrySchedule.map((n) => Math.max(0, Math.floor(n))).join(",")}}`;
  const last = q.retrySchedule.length;
  return sql<DuePermission[]>`
    select sp.manager as module, sp.subscription_id::text as subscription_id, sp.hash, sp.subscriber, sp.token,
      sp.merchant as spender, sp.allowance::text as allowance, sp.period_s::text as period_s,
      sp.start_s::text as start_s, sp.end_s::text as end_s, sp.salt::text as salt, sp.extra_data, sp.times_executed,
      sp.last_period_start::text as last_period_start, sp.last_period_end::text as last_period_end,
      sp.last_period_spent::text as last_period_spent, sp.next_charge_at::text as next_charge_at,
      coalesce(k.failures, 0)::int as fails
    from spend_permissions sp
    left join keeper_rechecks k on k.chain_id = sp.chain_id and k.subscription_id = sp.subscription_id
      and k.failures > 0 and k.period_end > ${now}::bigint and k.times_executed = sp.times_executed
    where sp.chain_id = ${q.chainId} and sp.merchant = ${q.spender.toLowerCase()}
      and sp.manager = ${q.manager.toLowerCase()}
      and not sp.revoked
      and sp.next_charge_at <= ${now}::bigint
      and sp.start_s <= ${now}::bigint and ${now}::bigint < sp.end_s
      and not exists (
        select 1 from keeper_claims c
        where c.chain_id = sp.chain_id and c.subscription_id = sp.subscription_id
          and c.owner <> ${q.owner} and c.expires_at > now())
      -- During an initial backfill the index shows the past: what looks due was mostly charged long ago.
      and not ${indexesDeferredSql(sql)}
      and (k.failures is null
        or k.checked_at + (${schedule}::bigint[])[least(k.failures, ${last})] <= ${now}::bigint)
    order by sp.next_charge_at, sp.hash
    limit ${q.limit}`;
}

/**
 * Records a failed simulation of a permission at `at` (unix seconds), in the period ending `periodEnd`, with the
 * permission's charge count then: one more failure when both match the recorded ones, else the first.
 */
export async function notePermissionFailure(
  sql: Sql,
  c: { chainId: number; subscriptionId: string; at: bigint; periodEnd: number; timesExecuted: number },
): Promise<number> {
  const [row] = await sql<{ failures: number }[]>`
    insert into keeper_rechecks (chain_id, subscription_id, checked_at, failures, period_end, times_executed)
    values (${c.chainId}, ${c.subscriptionId}, ${c.at.toString()}, 1, ${c.periodEnd}, ${c.timesExecuted})
    on conflict (chain_id, subscription_id) do update set
      checked_at = excluded.checked_at,
      failures = case
        when keeper_rechecks.period_end = excluded.period_end
          and keeper_rechecks.times_executed = excluded.times_executed then keeper_rechecks.failures + 1
        else 1 end,
      period_end = excluded.period_end, times_executed = excluded.times_executed
    returning failures`;
  return row!.failures;
}
