/** The renewal outlook's tables: which wallets to evaluate, their due charges, and writing the outlooks. */
import type { Sql } from "../db/client";
import type { Q } from "../db/query";
import type { DueCharge, Outlook } from "./outlook";

/** Whether a subscription `s` (joined with `blocked_subscribers b`) is chargeable (renewals.md §1). */
const CHARGEABLE = `not s.cancelled and not s.paused and not coalesce(b.blocked, false)
  and (s.max_executions = 0 or s.times_executed < s.max_executions)`;

/**
 * A due charge as loaded, with what the outlook row needs. `refilled`: credit was ever refilled into it (as of the
 * index); credit only comes from a refill, so without one it is 0 and needs no read.
 */
export type DueRow = DueCharge & { module: string; merchant: string; refilled: boolean };

/**
 * Wallets with a chargeable subscription due by `until` (unix s) whose outlook is missing, was judged for another
 * next_charge_at, or is older than `staleBefore` (unix s, wall clock): at most `limit`, least recently evaluated first.
 */
export async function walletsToEvaluate(
  sql: Sql,
  chainId: number,
  opts: { until: number; staleBefore: number; limit: number },
): Promise<string[]> {
  const rows = await sql<{ subscriber: string }[]>`
    select s.subscriber, min(coalesce(o.evaluated_at, '-infinity')) as oldest
    from subscriptions s
    left join blocked_subscribers b on b.chain_id = s.chain_id and b.module = s.module and b.subscriber = s.subscriber
    left join renewal_outlooks o on o.chain_id = s.chain_id and o.subscription_id = s.subscription_id
    where s.chain_id = ${chainId} and ${sql.unsafe(CHARGEABLE)} and s.next_charge_at <= ${opts.until}
      and (o.subscription_id is null or o.next_charge_at <> s.next_charge_at
        or o.evaluated_at <= to_timestamp(${opts.staleBefore}))
    group by s.subscriber
    order by oldest, s.subscriber
    limit ${opts.limit}`;
  return rows.map((r) => r.subscriber);
}

/** Every chargeable charge of these wallets due by `until`, with its plan's token and amount. */
export async function dueCharges(sql: Sql, chainId: number, wallets: string[], until: number): Promise<DueRow[]> {
  if (wallets.length === 0) return [];
  const rows = await sql<
    {
      subscription_id: string;
      module: string;
      merchant: string;
      subscriber: string;
      token: string;
      amount: string;
      next_charge_at: string;
      allowance_expiry: string;
      refilled: boolean;
    }[]
  >`
    select s.subscription_id, s.module, s.merchant, s.subscriber, p.token, p.amount, s.next_charge_at, s.allowance_expiry,
      exists (select 1 from activity a where a.chain_id = s.chain_id and a.subscription_id = s.subscription_id
        and a.type = 'REFILL') as refilled
    from subscriptions s
    join plans p on p.chain_id = s.chain_id and p.module = s.module and p.plan_id = s.plan_id
    left join blocked_subscribers b on b.chain_id = s.chain_id and b.module = s.module and b.subscriber = s.subscriber
    where s.chain_id = ${chainId} and s.subscriber = any(${wallets}::text[]) and ${sql.unsafe(CHARGEABLE)}
      and s.next_charge_at <= ${until}`;
  return rows.map((r) => ({
    key: r.subscription_id,
    onChainId: BigInt(r.subscription_id),
    wallet: r.subscriber,
    token: r.token,
    amount: BigInt(r.amount),
    nextChargeAt: Number(r.next_charge_at),
    allowanceExpiry: Number(r.allowance_expiry),
    module: r.module,
    merchant: r.merchant,
    refilled: r.refilled,
  }));
}

/** A judged charge to store (every row of one save shares its checked block). */
export type OutlookRow = { charge: DueRow; outlook: Outlook; checkedBlock: bigint; checkedAt: number };

/**
 * Stores the outlooks of evaluated wallets and deletes their other rows (allocations no longer due or chargeable),
 * except for wallets in `keep` (a read failed: their previous outlooks stand). One statement each.
 */
export async function saveOutlooks(q: Q, chainId: number, wallets: string[], rows: OutlookRow[]): Promise<void> {
  const ids = rows.map((r) => r.charge.key);
  await q`delete from renewal_outlooks where chain_id = ${chainId} and subscriber = any(${wallets}::text[])
    and not (subscription_id = any(${ids}::text[]::numeric[]))`;
  if (rows.length === 0) return;
  const col = <T>(f: (r: OutlookRow) => T) => rows.map(f);
  await q`insert into renewal_outlooks (chain_id, subscription_id, merchant, subscriber, token, next_charge_at, due_at,
      outlook, reason, amount, balance, allowance, credit, shortfall, checked_block, checked_at, evaluated_at)
    select ${chainId}, id, merchant, subscriber, token, next_at, due_at, outlook, reason, amount, balance, allowance,
      credit, shortfall, ${rows[0]!.checkedBlock.toString()}::bigint, to_timestamp(${rows[0]!.checkedAt}), now()
    from unnest(${col((r) => r.charge.key)}::numeric[], ${col((r) => r.charge.merchant)}::text[],
      ${col((r) => r.charge.wallet)}::text[], ${col((r) => r.charge.token)}::text[],
      ${col((r) => r.charge.nextChargeAt)}::bigint[], ${col((r) => r.outlook.dueAt)}::bigint[],
      ${col((r) => r.outlook.outlook)}::text[], ${col((r) => r.outlook.reason)}::text[],
      ${col((r) => r.outlook.amount.toString())}::numeric[], ${col((r) => r.outlook.balance.toString())}::numeric[],
      ${col((r) => r.outlook.allowance.toString())}::numeric[], ${col((r) => r.outlook.credit.toString())}::numeric[],
      ${col((r) => r.outlook.shortfall.toString())}::numeric[])
      as x(id, merchant, subscriber, token, next_at, due_at, outlook, reason, amount, balance, allowance, credit, shortfall)
    on conflict (chain_id, subscription_id) do update set
      merchant = excluded.merchant, subscriber = excluded.subscriber, token = excluded.token,
      next_charge_at = excluded.next_charge_at, due_at = excluded.due_at, outlook = excluded.outlook,
      reason = excluded.reason, amount = excluded.amount, balance = excluded.balance, allowance = excluded.allowance,
      credit = excluded.credit, shortfall = excluded.shortfall, checked_block = excluded.checked_block,
      checked_at = excluded.checked_at, evaluated_at = excluded.evaluated_at`;
}

/** The indexed block and its time (unix s), or null before the first batch. */
export async function indexedBlock(sql: Sql, chainId: number): Promise<{ block: bigint; time: number } | null> {
  const [row] = await sql<{ block: string | null; time: string | null }[]>`
    select indexed_block as block, extract(epoch from indexed_time)::bigint as time from chains
    where chain_id = ${chainId}`;
  return row?.block == null ? null : { block: BigInt(row.block), time: Number(row.time) };
}
