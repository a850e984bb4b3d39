import postgres from "postgres";
import { PGlite } from "@electric-sql/pglite";
import { createDb, type Db } from "../src/db/client";
import { migrate } from "../src/db/migrate";

let template: Blob | undefined;

/** Which database the suite runs on: a real server when DATABASE_URL is set, else PGlite. */
export const testDbKind = process.env.DATABASE_URL ? "postgres" : "pglite";

/**
 * A fresh, migrated database for one test file: a new database on the server named by
 * DATABASE_URL (dropped on close), or an in-memory PGlite cloned from a migrated template.
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
  if (!template) {
    const pg = await PGlite.create("memory://");
    const seed = await createDbOnPglite(pg);
    await migrate(seed.sql);
    await seed.sql.end();
    template = (await pg.dumpDataDir("none")) as Blob;
    await seed.stop();
    await pg.close();
  }
  return createDb({ dataDir: "memory://", loadDataDir: template });
}

async function createDbOnPglite(pg: PGlite) {
  const { PGLiteSocketServer } = await import("@electric-sql/pglite-socket");
  const server = new PGLiteSocketServer({ db: pg, port: 0, host: "127.0.0.1", maxConnections: 1 });
  await server.start();
  const sql = postgres(`postgres://postgres@${server.getServerConn()}/postgres`, { max: 1, onnotice: () => {} });
  return { sql, stop: () => server.stop() };
}
