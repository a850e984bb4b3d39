import postgres from "postgres";
import { createDb, type Db } from "../src/db/client";
import { migrate } from "../src/db/migrate";
import { defaultTemplateDir, loadTemplate } from "../src/db/pglite-template";

let template: Blob | undefined;

/** Which database the suite runs on: a real server when DATABASE_URL is set, else PGlite. */
export const testDbKind = process.env.DATABASE_URL ? "postgres" : "pglite";

/**
 * A fresh, migrated database for one test file: a new database on the server named by
 * DATABASE_URL (dropped on close), or an in-memory PGlite cloned from the migrated template (the service's cached
 * one: initdb runs once per machine and set of migrations, not once per test process).
 */
export async function createTestDb(opts: { max?: number } = {}): Promise<Db> {
  const base = process.env.DATABASE_URL;
  if (base) {
    const name = `t_${Date.now().toString(36)}_${Math.random().toString(36).slice(2, 8)}`;
    const admin = postgres(base, { max: 1, onnotice: () => {} });
    await admin.unsafe(`create database ${name}`);
    const url = new URL(base);
    url.pathname = `/${name}`;
    const db = await createDb({ url: url.toString(), max: opts.max ?? 4 });
    await migrate(db.sql);
    return {
      ...db,
      close: async () => {
        await db.close();
        await admin.unsafe(`drop database if exists ${name} with (force)`);
        await admin.end();
      },
    };
  }
  template ??= new Blob([await loadTemplate(defaultTemplateDir())]);
  return createDb({ dataDir: "memory://", loadDataDir: template });
}
