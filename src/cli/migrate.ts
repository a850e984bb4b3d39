/**
 * `bun run migrate`: applies pending `sql/migrations` to DATABASE_URL (or the embedded PGlite under DATA_DIR)
 * and prints one JSON line `{"applied":[…]}`. A bad environment or a failing migration: message on stderr, exit 1.
 */
import { ConfigError, loadConfig } from "../common/config";
import { createDb } from "../db/client";
import { migrate } from "../db/migrate";

/** Applies pending migrations to the configured database and returns their names. */
export async function runMigrations(env: Record<string, string | undefined> = process.env): Promise<string[]> {
  const config = loadConfig(env);
  // No template here: a new embedded database is initdb'd so that the migrations applied are the ones reported.
  const db = await createDb({ url: config.DATABASE_URL, dataDir: config.DATA_DIR, max: 1, templateDir: false });
  try {
    return await migrate(db.sql);
  } finally {
    await db.close();
  }
}

if (import.meta.main) {
  try {
    const applied = await runMigrations();
    console.log(JSON.stringify({ applied }));
  } catch (err) {
    console.error(err instanceof ConfigError ? err.message : `migrate failed: ${(err as Error).message}`);
    process.exit(1);
  }
}
