import postgres from "postgres";
import { PGlite } from "@electric-sql/pglite";
import { PGLiteSocketServer } from "@electric-sql/pglite-socket";
import { mkdirSync } from "node:fs";

/** The one postgres.js client type used everywhere. */
export type Sql = postgres.Sql<{}>;

/** A connected database: the postgres.js client plus what it runs on. */
export type Db = {
  sql: Sql;
  kind: "postgres" | "pglite";
  /** Connection URL (for PGlite, the loopback socket in front of it). */
  url: string;
  close: () => Promise<void>;
};

/** Options for {@link createDb}. */
export type DbOptions = {
  /** Postgres URL; when absent an embedded PGlite is started. */
  url?: string;
  /** PGlite data directory (default ./.data); "memory://" keeps it in memory. */
  dataDir?: string;
  /** PGlite only: start from this dump (from `dumpDataDir`) instead of an empty cluster. */
  loadDataDir?: Blob;
  /** Pool size on a real server (PGlite is always 1). */
  max?: number;
};

/** postgres.js options shared by both backends: numerics and int8 stay strings (exact uint256). */
function clientOptions(max: number): postgres.Options<{}> {
  return {
    max,
    onnotice: () => {},
    idle_timeout: 0,
    connect_timeout: 5,
    // Keep int8/numeric as strings: amounts and block numbers never pass through a JS number.
    types: {},
    connection: { application_name: "subscription-indexer" },
  };
}

/** Connects to Postgres at `url`, or starts embedded PGlite behind a loopback socket. */
export async function createDb(opts: DbOptions = {}): Promise<Db> {
  if (opts.url) {
    const sql = postgres(opts.url, clientOptions(opts.max ?? 8));
    return { sql, kind: "postgres", url: opts.url, close: () => sql.end({ timeout: 5 }) };
  }
  const dataDir = opts.dataDir ?? "./.data";
  if (!dataDir.startsWith("memory://")) mkdirSync(dataDir, { recursive: true });
  const pg = await PGlite.create(dataDir, opts.loadDataDir ? { loadDataDir: opts.loadDataDir } : {});
  // PGlite is one session: the socket serves one connection and postgres.js must not open more.
  const server = new PGLiteSocketServer({ db: pg, port: 0, host: "127.0.0.1", maxConnections: 1 });
  await server.start();
  const url = `postgres://postgres@${server.getServerConn()}/postgres`;
  const sql = postgres(url, { ...clientOptions(1), connect_timeout: 30 });
  return {
    sql,
    kind: "pglite",
    url,
    close: async () => {
      await sql.end({ timeout: 5 });
      await server.stop();
      await pg.close();
    },
  };
}
