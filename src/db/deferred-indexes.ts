/**
 * Secondary indexes left out of an initial backfill and built once it reaches the head, as Ponder does: a btree insert
 * per row and index was most of the database's work in a backfill (docs/benchmarks.md). A row of `deferred_indexes`
 * holds the definition of an index that is missing; dropping it and recording it is one transaction, and so is
 * building it and deleting the row, so a crash at any point leaves either the index or its row.
 */
import type postgres from "postgres";
import type { Q } from "./query";

// postgres.js's own type, not client.ts's alias: migrate.ts (which client.ts uses) builds deferred indexes (no cycle).
type Sql = postgres.Sql<{}>;

/**
 * The indexes an initial backfill goes without: every secondary index of the tables it fills, except those a batch
 * reads (`subscriptions_due_idx`: expiries and notices; `subscriptions_check_idx`: the allocations of a blocked or
 * unblocked pair) and the unique ones (constraints). What reads the others during the backfill scans the table
 * instead: the API, the keeper (which waits, see `indexesDeferred`), a rollback, and the webhook fan-out of the
 * event log (`activity_event_seq_idx`), which holds a chain's ranges until its catch-up reaches the head.
 */
export const DEFERRABLE_INDEXES = [
  "activity_merchant_idx",
  "activity_merchant_type_idx",
  "activity_merchant_time_idx",
  "activity_subscription_idx",
  "events_subscription_idx",
  "merchant_events_merchant_idx",
  "merchant_events_merchant_type_idx",
  "merchant_events_block_idx",
  "subscriptions_merchant_idx",
  "activity_event_seq_idx",
  "mrr_movements_page_idx",
  "mrr_movements_block_idx",
] as const;

/** The tables those indexes belong to: all empty means nothing was ever indexed here. */
const FILLED_TABLES = ["activity", "events", "merchant_events", "subscriptions", "mrr_movements"] as const;

// Arbitrary constant: deferring and building serialize on it (several chains' indexers share the tables).
const DEFERRAL_LOCK = 7_413_902_377;

/** Takes the planner's statistics of the tables the deferrable indexes belong to (`ANALYZE`). */
export async function analyzeFilledTables(sql: Sql): Promise<void> {
  await sql.unsafe(`analyze ${FILLED_TABLES.join(", ")}`);
}

/** Whether the tables the deferrable indexes belong to hold no row. */
async function tablesEmpty(q: Q): Promise<boolean> {
  for (const t of FILLED_TABLES) {
    if ((await q`select 1 from ${q(t)} limit 1`).length > 0) return false;
  }
  return true;
}

/** Names of the indexes deferred and not built yet. */
export async function deferredIndexes(q: Q): Promise<string[]> {
  return (await q<{ name: string }[]>`select name from deferred_indexes order by name`).map((r) => r.name);
}

/**
 * "Some index is deferred" (an initial backfill is running) as a SQL condition, for a statement that waits for the
 * indexes. Uncorrelated: a one-time filter in front of the whole plan.
 */
export const indexesDeferredSql = (q: Q) => q`exists (select 1 from deferred_indexes)`;

/** Whether any index is deferred (an initial backfill is running). */
export async function indexesDeferred(q: Q): Promise<boolean> {
  const [row] = await q<{ deferred: boolean }[]>`select ${indexesDeferredSql(q)} as deferred`;
  return row!.deferred;
}

/**
 * Drops the deferrable indexes that exist and records their definitions, in one transaction; returns their names.
 * Only while the tables are empty (checked under the lock), so a database that holds an index never loses its
 * indexes to a restart: an empty list then.
 */
export async function deferIndexes(sql: Sql): Promise<string[]> {
  return sql.begin(async (tx) => {
    await tx`select pg_advisory_xact_lock(${DEFERRAL_LOCK})`;
    if (!(await tablesEmpty(tx))) return [];
    const found = await tx<{ name: string; definition: string }[]>`
      select c.relname as name, pg_get_indexdef(c.oid) as definition
      from pg_class c join pg_namespace n on n.oid = c.relnamespace
      where c.relkind = 'i' and n.nspname = current_schema() and c.relname = any(${[...DEFERRABLE_INDEXES]}::text[])
      order by c.relname`;
    for (const { name, definition } of found) {
      await tx`insert into deferred_indexes (name, definition) values (${name}, ${definition})
        on conflict (name) do nothing`;
      await tx`drop index ${tx(name)}`;
    }
    return found.map((r) => r.name);
  });
}

/** `create index` of a recorded definition, made idempotent. */
export const ifNotExists = (definition: string) =>
  definition.replace(
    /^CREATE (UNIQUE )?INDEX /i,
    (_m, unique: string | undefined) => `CREATE ${unique ?? ""}INDEX IF NOT EXISTS `,
  );

/** Inside a transaction: builds a recorded index and deletes its row. */
async function buildOne(tx: Q, r: { name: string; definition: string }): Promise<void> {
  await tx.unsafe(ifNotExists(r.definition));
  await tx`delete from deferred_indexes where name = ${r.name}`;
}

/**
 * Builds every deferred index, side by side, each in its own transaction with the delete of its row: a build waits
 * for its table's writers and holds them off, one table each, so builds and batches never wait on each other in a
 * cycle. Returns the names built by this call.
 */
export async function buildDeferredIndexes(sql: Sql): Promise<string[]> {
  const built = await Promise.all(
    (await deferredIndexes(sql)).map((name) =>
      sql.begin(async (tx) => {
        await tx`select pg_advisory_xact_lock_shared(${DEFERRAL_LOCK})`;
        const [row] = await tx<{ definition: string }[]>`
          select definition from deferred_indexes where name = ${name} for update`;
        if (!row) return null; // built meanwhile by another chain's indexer
        await tx`set local statement_timeout = 0`;
        await buildOne(tx, { name, definition: row.definition });
        return name;
      }),
    ),
  );
  return built.filter((n): n is string => n !== null);
}

/** Inside a transaction (a migration run): builds every deferred index before a migration could rely on it. */
export async function buildDeferredIndexesIn(tx: Q): Promise<string[]> {
  const rows = await tx<{ name: string; definition: string }[]>`
    select name, definition from deferred_indexes order by name for update`;
  for (const r of rows) await buildOne(tx, r);
  return rows.map((r) => r.name);
}
