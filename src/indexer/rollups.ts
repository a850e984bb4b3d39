/**
 * Daily rollups of `activity` (table `stats_daily`, migration 0007) for the stats route, kept equal to an aggregate
 * of `activity` at every commit: each batch adds its own rows inside its transaction, and a rollback recomputes
 * the days at and after the common ancestor from what `activity` still holds.
 */
import type { Sql } from "../db/client";
import type { IndexerHook } from "./hooks";
import type { Q } from "../db/query";

/** The aggregate every statement below writes: `activity` rows `a` grouped by rollup key, in key order. */
function aggregate(q: Q, where: ReturnType<Q>) {
  return q`
    select a.chain_id, a.merchant, (a.block_time at time zone 'UTC')::date as day, coalesce(a.token, '') as token,
      a.type, coalesce(a.reason, '') as reason, sum(a.amount) as amount, coalesce(sum(a.fee), 0) as fee,
      count(*) as count
    from activity a
    where ${where}
    group by 1, 2, 3, 4, 5, 6
    order by 1, 2, 3, 4, 5, 6`;
}

/**
 * Adds the activity of blocks `fromBlock..toBlock` to the rollups. Only valid once per block range: the indexer
 * runs it after checking its cursor, so a range is never added twice.
 */
export async function addBlocks(q: Q, chainId: number, fromBlock: bigint, toBlock: bigint): Promise<void> {
  await addActivity(
    q,
    q`a.chain_id = ${chainId} and a.block_number between ${fromBlock.toString()} and ${toBlock.toString()}`,
  );
}

/** Adds the activity rows matching `where` to the rollups (each row only once, as `addBlocks`). */
async function addActivity(q: Q, where: ReturnType<Q>): Promise<void> {
  await q`
    insert into stats_daily as s (chain_id, merchant, day, token, type, reason, amount, fee, count)
    ${aggregate(q, where)}
    on conflict (chain_id, merchant, day, token, type, reason) do update
      set amount = s.amount + excluded.amount, fee = s.fee + excluded.fee, count = s.count + excluded.count`;
}

/**
 * Recomputes the rollups of `chainId` from `activity` for every day at or after `fromDay` (UTC, `YYYY-MM-DD`),
 * or for all days when null.
 */
export async function recomputeDays(q: Q, chainId: number, fromDay: string | null): Promise<void> {
  if (fromDay === null) {
    await q`delete from stats_daily where chain_id = ${chainId}`;
    await q`insert into stats_daily (chain_id, merchant, day, token, type, reason, amount, fee, count)
      ${aggregate(q, q`a.chain_id = ${chainId}`)}`;
    return;
  }
  await q`delete from stats_daily where chain_id = ${chainId} and day >= ${fromDay}::date`;
  // Block times never decrease: the rows of those days start right after the last activity block before them
  // (a backward scan of the primary key that stops there), so the recomputation reads only those days.
  const [{ first }] = await q<{ first: string }[]>`
    select coalesce((
      select block_number from activity
      where chain_id = ${chainId} and block_time < (${fromDay}::date)::timestamp at time zone 'UTC'
      order by chain_id desc, block_number desc, log_index desc limit 1
    ) + 1, 0) as first`;
  await q`insert into stats_daily (chain_id, merchant, day, token, type, reason, amount, fee, count)
    ${aggregate(q, q`a.chain_id = ${chainId} and a.block_number >= ${first} and a.block_time >= (${fromDay}::date)::timestamp at time zone 'UTC'`)}`;
}

/** Recomputes the rollup rows of one merchant on one chain from what `activity` holds (after rows were removed). */
export async function recomputeMerchant(q: Q, chainId: number, merchant: string): Promise<void> {
  await q`delete from stats_daily where chain_id = ${chainId} and merchant = ${merchant}`;
  await q`insert into stats_daily (chain_id, merchant, day, token, type, reason, amount, fee, count)
    ${aggregate(q, q`a.chain_id = ${chainId} and a.merchant = ${merchant}`)}`;
}

/** Rebuilds every rollup row of every chain (or one chain) from `activity`, in one transaction. */
export async function rebuildStatsRollups(sql: Sql, chainId?: number): Promise<void> {
  await sql.begin(async (tx) => {
    if (chainId !== undefined) return recomputeDays(tx, chainId, null);
    await tx`delete from stats_daily`;
    await tx`insert into stats_daily (chain_id, merchant, day, token, type, reason, amount, fee, count)
      ${aggregate(tx, tx`true`)}`;
  });
}

/** The indexer hook that keeps `stats_daily` in step with `activity`. */
export function statsRollupsHook(): IndexerHook {
  return {
    name: "stats-rollups",
    async onBatch(tx, ctx) {
      const { activity } = ctx.rows.derived;
      if (activity.length === 0) return;
      if (!ctx.catchUp) return addBlocks(tx, ctx.chainId, ctx.fromBlock, ctx.toBlock);
      // A catch-up's range holds rows counted before: only its own (its spenders' charges, none indexed before) go in.
      const merchants = [...new Set(activity.map((a) => a.merchant))];
      const modules = [...new Set(activity.map((a) => a.module))];
      await addActivity(
        tx,
        tx`a.chain_id = ${ctx.chainId} and a.module = any(${modules}::text[])
          and a.merchant = any(${merchants}::text[])`,
      );
    },
    async onRollback(tx, ctx) {
      if (ctx.ancestor === null) return recomputeDays(tx, ctx.chainId, null);
      // The ancestor's header is kept (it is inside the reorg window); without it, recompute the whole chain.
      const [row] = await tx<{ day: string }[]>`
        select to_char(timestamp at time zone 'UTC', 'YYYY-MM-DD') as day from blocks
        where chain_id = ${ctx.chainId} and number = ${ctx.ancestor.toString()}`;
      await recomputeDays(tx, ctx.chainId, row?.day ?? null);
    },
  };
}
