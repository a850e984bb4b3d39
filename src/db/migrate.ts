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

/** Thrown inside a run when the pending files, sent together, fail: the run is repeated a file at a time. */
class TogetherFailedError extends AppError {}

/**
 * Applies pending migrations in file-name order and returns the names applied. The whole run is ONE transaction
 * that first takes a transaction-scoped advisory lock (so concurrent runs serialize and each file is applied once)
 * and reads `schema_migrations`. The pending files then go to the server as one statement list, each followed by the
 * insert of its `schema_migrations` row: one round trip, where a fresh database would otherwise take two per file.
 * When that fails, the run is rolled back and repeated a file at a time, each in its own savepoint, so a failing
 * file raises MigrationError naming it; since the error leaves the transaction, the run commits nothing: neither that
 * file nor the files applied before it in the same run.
 */
// postgres.js's own type, not client.ts's alias: client.ts builds new data directories with migrate (no cycle).
export async function migrate(
  sql: postgres.Sql<{}>,
  dir = migrationsDir,
  opts: {
    /** Called once the pending files are on their way to the server, or when none are pending. */
    onApplying?: () => void;
  } = {},
): Promise<string[]> {
  try {
    return await applyPending(sql, dir, true, opts.onApplying);
  } catch (err) {
    if (!(err instanceof TogetherFailedError)) throw err;
    return applyPending(sql, dir, false);
  }
}

async function applyPending(
  sql: postgres.Sql<{}>,
  dir: string,
  together: boolean,
  onApplying = () => {},
): Promise<string[]> {
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
    if (together && pending.length > 1) {
      // File names are NNNN_verb_noun.sql (listMigrations): safe as literals.
      const script = pending
        .map((m) => `${m.text}\n;\ninsert into schema_migrations (name) values ('${m.name}');\n`)
        .join("");
      try {
        const applying = tx.unsafe(script).simple();
        // postgres.js sends a query once awaited, a tick or two later: tell after that.
        setImmediate(onApplying);
        await applying;
      } catch (err) {
        throw new TogetherFailedError(`migrations failed together: ${(err as Error).message}`, { cause: err });
      }
      applied.push(...pending.map((m) => m.name));
      return;
    }
    onApplying();
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
