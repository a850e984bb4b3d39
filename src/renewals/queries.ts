/** The renewal outlook's tables: which wallets to evaluate, their due charges, and writing the outlooks. */
import type { Sql } from "../db/client";
import { catchingUpSql } from "../db/catch-up";
import { indexesDeferredSql } from "../db/deferred-indexes";
import type { Q } from "../db/query";
import type { DueCharge, Outlook } from "./outlook";

/** Whether a subscription `s` (joined with `blocked_subscribers b`) is chargeable (renewals.md §1). */
const CHARGEABLE = `not s.cancelled and not s.paused and not coalesce(b.blocked, false)
  and (s.max_executions = 0 or s.times_executed < s.max_executions)`;

/**
 * A due charge as loaded, with what the outlook row needs. `refilled`: credit was ever refilled into it (as of the
 * index); credit only comes from a refill, so without one it is 0 and needs no read. A spend permission's charge has
 * `manager` set (and `module` is the manager), `refilled` false.
 */
export type DueRow = DueCharge & { module: string; merchant: string; refilled: boolean };

/**
 * The charges to evaluate in one pass, in one statement: every chargeable charge due by `until` (unix s) of the
 * `touched` wallets and of at most `limit` wallets (0: none) whose outlooks are missing, were judged for another
 * next_charge_at, or are older than `staleBefore` (unix s, wall clock), least recently evaluated first. `scanned`:
 * how many wallets the scan found (the pass is full when it reaches `limit`). `atBlock`: the block the pass reads the
 * chain at (refills above it do not count; the caller runs this in a snapshot taken with that block), `atTime` its
 * time. Module subscriptions and spend permissions of a wallet come together: they share its balance.
 *
 * A spend permission is chargeable (spend-permissions §4) when it is not revoked and its next due instant N lies
 * before its `end`, and the block is before `end` too (the due instant is the later of N and the block's time).
 */
export async function chargesToEvaluate(
  sql: Sql,
  chainId: number,
  opts: { touched: string[]; until: number; staleBefore: number; limit: number; atBlock?: bigint; atTime?: number },
): Promise<{ charges: DueRow[]; scanned: number }> {
  // One row holding every charge as a JSON array of arrays: the driver then decodes one value instead of ten per
  // charge, which was the larger part of loading 50,000 charges. Numbers that may exceed 2^53 travel as text.
  const [{ rows }] = await sql<
    { rows: [string, string, string, string, string, string, number, string, boolean, boolean, boolean][] }[]
  >`
    with due as materialized (
      select s.subscription_id, s.module, s.merchant, s.subscriber, s.plan_id, null::text as token,
        null::numeric as amount, s.next_charge_at, s.allowance_expiry, false as permission,
        (o.subscription_id is null or o.next_charge_at <> s.next_charge_at
          or o.evaluated_at <= to_timestamp(${opts.staleBefore})) as stale,
        coalesce(o.evaluated_at, '-infinity') as evaluated_at
      from subscriptions s
      left join blocked_subscribers b on b.chain_id = s.chain_id and b.module = s.module and b.subscriber = s.subscriber
      left join renewal_outlooks o on o.chain_id = s.chain_id and o.subscription_id = s.subscription_id
      where s.chain_id = ${chainId} and ${sql.unsafe(CHARGEABLE)} and s.next_charge_at <= ${opts.until}
      union all
      select sp.subscription_id, sp.manager, sp.merchant, sp.subscriber, null, sp.token, sp.allowance,
        sp.next_charge_at, 0, true,
        (o.subscription_id is null or o.next_charge_at <> sp.next_charge_at
          or o.evaluated_at <= to_timestamp(${opts.staleBefore})),
        coalesce(o.evaluated_at, '-infinity')
      from spend_permissions sp
      left join renewal_outlooks o on o.chain_id = sp.chain_id and o.subscription_id = sp.subscription_id
      where sp.chain_id = ${chainId} and not sp.revoked and sp.next_charge_at < sp.end_s
        and sp.next_charge_at <= ${opts.until}
        ${opts.atTime === undefined ? sql`` : sql`and sp.end_s > ${opts.atTime}`}),
    scan as (
      select subscriber from due where stale and ${opts.limit} > 0
      group by subscriber
      order by min(evaluated_at), subscriber
      limit ${opts.limit}),
    w as (
      select subscriber, bool_or(scanned) as scanned from (
        select subscriber, true as scanned from scan
        union all
        select unnest(${opts.touched}::text[]), false) t
      group by subscriber)
    select coalesce(json_agg(json_build_array(d.subscription_id::text, d.module, d.merchant, d.subscriber,
      coalesce(d.token, p.token), coalesce(d.amount, p.amount)::text, d.next_charge_at, d.allowance_expiry::text,
      w.scanned,
      not d.permission and exists (select 1 from activity a where a.chain_id = ${chainId}
        and a.subscription_id = d.subscription_id and a.type = 'REFILL'
        ${opts.atBlock === undefined ? sql`` : sql`and a.block_number <= ${opts.atBlock.toString()}`}),
      d.permission)),
      '[]') as rows
    from due d
    join w on w.subscriber = d.subscriber
    left join plans p on p.chain_id = ${chainId} and p.module = d.module and p.plan_id = d.plan_id
    where d.permission or p.plan_id is not null`;
  const scanned = new Set<string>();
  const charges = rows!.map(
    ([id, module, merchant, subscriber, token, amount, next, expiry, scan, refilled, permission]): DueRow => {
      if (scan) scanned.add(subscriber);
      return {
        key: id,
        onChainId: BigInt(id),
        wallet: subscriber,
        token,
        amount: BigInt(amount),
        nextChargeAt: Number(next),
        allowanceExpiry: Number(expiry),
        module,
        merchant,
        refilled,
        ...(permission ? { manager: module } : {}),
      };
    },
  );
  return { charges, scanned: scanned.size };
}

/**
 * Wallets holding an outlook of a spend permission that time alone made unchargeable (its `end` is at or before
 * `atTime`): no log marks them, so the pass takes them as touched and their outlooks go.
 */
export async function endedPermissionWallets(sql: Sql, chainId: number, atTime: number): Promise<string[]> {
  const rows = await sql<{ subscriber: string }[]>`
    select distinct o.subscriber from renewal_outlooks o
    join spend_permissions sp on sp.chain_id = o.chain_id and sp.subscription_id = o.subscription_id
    where o.chain_id = ${chainId} and sp.end_s <= ${atTime}`;
  return rows.map((r) => r.subscriber);
}

/** A judged charge to store (every row of one save shares its checked block). */
export type OutlookRow = { charge: DueRow; outlook: Outlook; checkedBlock: bigint; checkedAt: number };

/**
 * Stores the outlooks of evaluated wallets (those of `rows`, and `others` that have none now) and deletes their other
 * rows (allocations no longer due or chargeable), in one statement. Wallets whose reads failed are in neither, and
 * the (wallet, token) groups of `kept` (`<wallet>:<token>`: reads failed or not made) are left alone: their previous
 * outlooks stand.
 */
export async function saveOutlooks(
  q: Q,
  chainId: number,
  rows: OutlookRow[],
  others: string[],
  kept: string[] = [],
): Promise<void> {
  if (rows.length === 0) {
    if (others.length > 0)
      await q`delete from renewal_outlooks where chain_id = ${chainId} and subscriber = any(${others}::text[])`;
    return;
  }
  const col = <T>(f: (r: OutlookRow) => T) => rows.map(f);
  await q`
    with x as (
      select * from unnest(${col((r) => r.charge.key)}::numeric[], ${col((r) => r.charge.merchant)}::text[],
        ${col((r) => r.charge.wallet)}::text[], ${col((r) => r.charge.token)}::text[],
        ${col((r) => r.charge.nextChargeAt)}::bigint[], ${col((r) => r.outlook.dueAt)}::bigint[],
        ${col((r) => r.outlook.outlook)}::text[], ${col((r) => r.outlook.reason)}::text[],
        ${col((r) => r.outlook.amount.toString())}::numeric[], ${col((r) => r.outlook.balance.toString())}::numeric[],
        ${col((r) => r.outlook.allowance.toString())}::numeric[], ${col((r) => r.outlook.credit.toString())}::numeric[],
        ${col((r) => r.outlook.shortfall.toString())}::numeric[])
        as x(id, merchant, subscriber, token, next_at, due_at, outlook, reason, amount, balance, allowance, credit,
          shortfall)),
    gone as (
      delete from renewal_outlooks o where o.chain_id = ${chainId}
        and (o.subscriber in (select subscriber from x) or o.subscriber = any(${others}::text[]))
        and not exists (select 1 from x where x.id = o.subscription_id)
        and not (o.subscriber || ':' || o.token) = any(${kept}::text[]))
    insert into renewal_outlooks (chain_id, subscription_id, merchant, subscriber, token, next_charge_at, due_at,
      outlook, reason, amount, balance, allowance, credit, shortfall, checked_block, checked_at, evaluated_at)
    select ${chainId}, id, merchant, subscriber, token, next_at, due_at, outlook, reason, amount, balance, allowance,
      credit, shortfall, ${rows[0]!.checkedBlock.toString()}::bigint, to_timestamp(${rows[0]!.checkedAt}), now()
    from x
    on conflict (chain_id, subscription_id) do update set
      merchant = excluded.merchant, subscriber = excluded.subscriber, token = excluded.token,
      next_charge_at = excluded.next_charge_at, due_at = excluded.due_at, outlook = excluded.outlook,
      reason = excluded.reason, amount = excluded.amount, balance = excluded.balance, allowance = excluded.allowance,
      credit = excluded.credit, shortfall = excluded.shortfall, checked_block = excluded.checked_block,
      checked_at = excluded.checked_at, evaluated_at = excluded.evaluated_at`;
}

/**
 * The indexed block, its time (unix s), the head the indexer last saw, whether an initial backfill's indexes are
 * deferred and whether the chain is catching up; null before the first batch.
 */
export async function indexedBlock(
  sql: Sql,
  chainId: number,
): Promise<{ block: bigint; time: number; head: bigint | null; indexesDeferred: boolean; catchingUp: boolean } | null> {
  const [row] = await sql<
    { block: string | null; time: string | null; head: string | null; deferred: boolean; catching_up: boolean }[]
  >`
    select c.indexed_block as block, extract(epoch from c.indexed_time)::bigint as time, c.head_block as head,
      ${indexesDeferredSql(sql)} as deferred, ${catchingUpSql(sql)} as catching_up
    from chains c where c.chain_id = ${chainId}`;
  if (row?.block == null) return null;
  return {
    block: BigInt(row.block),
    time: Number(row.time),
    head: row.head === null ? null : BigInt(row.head),
    indexesDeferred: row.deferred,
    catchingUp: row.catching_up,
  };
}
