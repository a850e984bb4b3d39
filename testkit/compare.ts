/** Reads every chain-data table of one chain in a stable order, for comparing two indexes row by row. */
import type { Sql } from "../src/db/client";

const normalize = (rows: readonly Record<string, unknown>[]) =>
  rows.map((r) => Object.fromEntries(Object.entries(r).map(([k, v]) => [k, v instanceof Date ? v.toISOString() : v])));

/** Every row of every chain-data table of `chainId` (the cursor without the wall-clock head fields). */
export async function dumpChainData(sql: Sql, chainId: number) {
  return {
    chains: normalize(
      await sql`select chain_id, processor, start_block, indexed_block, indexed_hash, indexed_time
        from chains where chain_id = ${chainId}`,
    ),
    blocks: normalize(await sql`select * from blocks where chain_id = ${chainId} order by number`),
    events: normalize(await sql`select * from events where chain_id = ${chainId} order by block_number, log_index`),
    modules: normalize(await sql`select * from modules where chain_id = ${chainId} order by address`),
    plans: normalize(await sql`select * from plans where chain_id = ${chainId} order by module, plan_id`),
    tokens: normalize(await sql`select * from tokens where chain_id = ${chainId} order by address`),
    subscriptions: normalize(
      await sql`select * from subscriptions where chain_id = ${chainId} order by subscription_id`,
    ),
    blocked_subscribers: normalize(
      await sql`select * from blocked_subscribers where chain_id = ${chainId} order by module, subscriber`,
    ),
    spend_permissions: normalize(
      await sql`select * from spend_permissions where chain_id = ${chainId} order by subscription_id`,
    ),
    // Without the event log's columns: its seqs differ from run to run, and an index without its hook has none.
    activity: normalize(
      await sql`select * from activity where chain_id = ${chainId} order by block_number, log_index`,
    ).map(({ event_seq: _seq, ...row }) => row),
  };
}

/** Empties the chain-data tables, to index a chain again from scratch into the same database. */
export async function clearChainData(sql: Sql): Promise<void> {
  for (const t of [
    "chains",
    "blocks",
    "events",
    "modules",
    "plans",
    "tokens",
    "subscriptions",
    "blocked_subscribers",
    "activity",
    "spend_permissions",
  ]) {
    await sql.unsafe(`delete from ${t}`);
  }
}
