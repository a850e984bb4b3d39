import { AppError } from "../common/errors";
import { readdirSync, readFileSync } from "node:fs";
import { join } from "node:path";
import type postgres from "postgres";
import { buildDeferredIndexesIn } from "./deferred-indexes";

/** Folder holding the append-only `NNNN_verb_noun.sql` migrations. */
export const migrationsDir = join(import.meta.dir, "..", "..", "sql", "migrations");

// Arbitrary constant: every process migrating the same database serializes on it.
const MIGRATION_LOCK = 7_413_902_211;

/** Thrown when a migration file fails to apply; the whole run is rolled back (see {@link migrate}). */
export class MigrationError extends AppError {}

/** Lists migration files in apply order. */
export function listMigrations(dir = migrationsDir): { name: string; text: string }[] {
  return readdirSync(dir)
    .filter((f) => /^\d{4}_[a-z0-9_]+\.sql$/.test(f))
    .sort()
    .map((name) => ({ name, text: readFileSync(join(dir, name), "utf8") }));
}

/**
 * Applies pending migrations in file-name order and returns the names applied. The whole run is ONE transaction
 * that first takes a transaction-scoped advisory lock (so concurrent runs serialize and each file is applied once)
 * and reads `schema_migrations`; each pending file then runs in its own savepoint together with the insert of its
 * `schema_migrations` row. A failing file raises MigrationError naming it, and since the error leaves the
 * transaction, the run commits nothing: neither that file nor the files applied before it in the same run.
 */
// postgres.js's own type, not client.ts's alias: client.ts builds new data directories with migrate (no cycle).
export async function migrate(sql: postgres.Sql<{}>, dir = migrationsDir): Promise<string[]> {
  const applied: string[] = [];
  await sql.begin(async (tx) => {
    // Transaction-scoped lock: released on commit or rollback, even if the process dies.
    await tx`select pg_advisory_xact_lock(${MIGRATION_LOCK})`;
    await tx`create table if not exists schema_migrations (
      name text primary key, applied_at timestamptz not null default now())`;
    const done = new Set((await tx<{ name: string }[]>`select name from schema_migrations`).map((r) => r.name));
    const pending = listMigrations(dir).filter((m) => !done.has(m.name));
    // A migration may rely on any index the earlier ones made: build those an interrupted backfill left out first.
    if (pending.length > 0 && done.has("0028_create_deferred_indexes.sql")) await buildDeferredIndexesIn(tx);
    for (const m of pending) {
      try {
        await tx.savepoint(async (sp) => {
          await sp.unsafe(m.text).simple();
          await sp`insert into schema_migrations (name) values (${m.name})`;
        });
      } catch (err) {
        throw new MigrationError(`migration ${m.name} failed: ${(err as Error).message}`, { cause: err });
      }
      applied.push(m.name);
    }
  });
  return applied;
}
