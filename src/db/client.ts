import { AppError } from "../common/errors";
import postgres from "postgres";
import { PGlite } from "@electric-sql/pglite";
import { PGLiteSocketServer } from "@electric-sql/pglite-socket";
import { mkdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { join } from "node:path";

/** The one postgres.js client type used everywhere. */
export type Sql = postgres.Sql<{}>;

/** A connected database: the postgres.js client plus what it runs on. */
export type Db = {
  sql: Sql;
  kind: "postgres" | "pglite";
  /** Connection URL (for PGlite, the loopback socket in front of it). */
  url: string;
  /** PGlite only: the data directory on disk (absent for an in-memory database). */
  dataDir?: string;
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
  /**
   * PGlite only: its `shared_buffers` (e.g. "16MB"; default Postgres's 128MB). Postgres zeroes the whole pool inside
   * the WASM heap at start, so it is resident from the first second: a process that does not write the index needs
   * far less.
   */
  sharedBuffers?: string;
};

/** PGlite's `shared_buffers` for a process that only reads the index (the API alone): 16 MB, ~120 MB less RSS. */
export const PGLITE_READER_SHARED_BUFFERS = "16MB";

/** Thrown when another live process already has the embedded database directory open. */
export class DataDirInUseError extends AppError {}

function pidAlive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (err) {
    return (err as NodeJS.ErrnoException).code === "EPERM";
  }
}

/** PGlite is single-process: a second opener would corrupt the directory, so claim it with a pid file. */
function lockDataDir(dataDir: string): () => void {
  const file = join(dataDir, "owner.pid");
  try {
    const pid = Number(readFileSync(file, "utf8").trim());
    if (pid && pid !== process.pid && pidAlive(pid)) {
      throw new DataDirInUseError(
        `the embedded database in ${dataDir} is in use by process ${pid}; stop it first or set DATABASE_URL`,
      );
    }
  } catch (err) {
    if (err instanceof DataDirInUseError) throw err;
  }
  writeFileSync(file, String(process.pid));
  return () => rmSync(file, { force: true });
}

/** The `application_name` of this process's connections. */
export const APPLICATION_NAME = `subscription-indexer:${process.pid}`;

/** postgres.js options shared by both backends: numerics and int8 stay strings (exact uint256). */
function clientOptions(max: number): postgres.Options<{}> {
  return {
    max,
    onnotice: () => {},
    idle_timeout: 0,
    connect_timeout: 5,
    // Keep int8/numeric as strings: amounts and block numbers never pass through a JS number.
    types: {},
    // One name per process: pg_stat_activity then tells this process's connections apart (the pool-use metric).
    connection: { application_name: APPLICATION_NAME },
  };
}

/** Connects to Postgres at `url`, or starts embedded PGlite behind a loopback socket. */
export async function createDb(opts: DbOptions = {}): Promise<Db> {
  if (opts.url) {
    const sql = postgres(opts.url, clientOptions(opts.max ?? 8));
    return { sql, kind: "postgres", url: opts.url, close: () => sql.end({ timeout: 5 }) };
  }
  const dataDir = opts.dataDir ?? "./.data";
  let unlock = () => {};
  if (!dataDir.startsWith("memory://")) {
    mkdirSync(dataDir, { recursive: true });
    unlock = lockDataDir(dataDir);
  }
  const startParams = opts.sharedBuffers
    ? [...PGlite.defaultStartParams, "-c", `shared_buffers=${opts.sharedBuffers}`]
    : undefined;
  const pg = await PGlite.create(dataDir, {
    ...(opts.loadDataDir ? { loadDataDir: opts.loadDataDir } : {}),
    ...(startParams ? { startParams } : {}),
  });
  // PGlite is one session: the socket serves one connection and postgres.js must not open more.
  const server = new PGLiteSocketServer({ db: pg, port: 0, host: "127.0.0.1", maxConnections: 1 });
  await server.start();
  const url = `postgres://postgres@${server.getServerConn()}/postgres`;
  const sql = postgres(url, { ...clientOptions(1), connect_timeout: 30 });
  return {
    sql,
    kind: "pglite",
    url,
    dataDir: dataDir.startsWith("memory://") ? undefined : dataDir,
    close: async () => {
      await sql.end({ timeout: 5 });
      await server.stop();
      await pg.close();
      unlock();
    },
  };
}
