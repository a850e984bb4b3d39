import { AppError } from "../common/errors";
import postgres from "postgres";
import { PGlite } from "@electric-sql/pglite";
import { PGLiteSocketServer } from "@electric-sql/pglite-socket";
import { existsSync, mkdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { dirname, join } from "node:path";
import type { Logger } from "../common/log";
import { defaultTemplateDir, extractTemplate, loadTemplate } from "./pglite-template";
import { pgliteSocket } from "./pglite-wire";

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
  /** PGlite only: how long to wait for a dying previous holder of the data directory (default LOCK_WAIT_MS). */
  lockWaitMs?: number;
  /** Where the wait for a previous holder is announced. */
  log?: Logger;
  /**
   * PGlite only: its `shared_buffers` (e.g. "16MB"; default Postgres's 128MB). Postgres zeroes the whole pool inside
   * the WASM heap at start, so it is resident from the first second: a process that does not write the index needs
   * far less.
   */
  sharedBuffers?: string;
  /**
   * PGlite only: where the migrated cluster that a new data directory starts from is cached (default
   * {@link defaultTemplateDir}); false runs initdb in the data directory instead. Not used for "memory://".
   */
  templateDir?: string | false;
};

/**
 * Start parameters PGlite gets on top of its defaults. `wal_init_zero=off`: a new WAL segment is not first filled
 * with 16 MB of zeros (a third of the bytes a backfill writes). PGlite already runs with fsync off (`-F`), so its
 * data directory survives a killed process (its writes are in the page cache) but not an OS crash; zero-filled
 * segments guard against nothing more than that.
 */
export const PGLITE_START_PARAMS: readonly string[] = ["-c", "wal_init_zero=off"];

/** PGlite's `shared_buffers` for a process that only reads the index (the API alone): 16 MB, ~120 MB less RSS. */
export const PGLITE_READER_SHARED_BUFFERS = "16MB";

/** Thrown when another live process already has the embedded database directory open. */
export class DataDirInUseError extends AppError {}

/** How long a start waits for the previous holder of a data directory to exit (a killed big heap takes a moment). */
export const LOCK_WAIT_MS = 15_000;

/** Whether `pid` is a live process: a zombie (exited, not yet reaped by its parent) counts as gone. */
export function pidAlive(pid: number): boolean {
  try {
    process.kill(pid, 0);
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code !== "EPERM") return false;
  }
  try {
    // `pid (comm) S …`: the state follows the last ')' (comm may hold spaces and parentheses).
    const stat = readFileSync(`/proc/${pid}/stat`, "utf8");
    return stat.slice(stat.lastIndexOf(")") + 2, stat.lastIndexOf(")") + 3) !== "Z";
  } catch {
    return true; // no /proc (not Linux): the signal check is all there is
  }
}

/** The pid recorded in a data directory's pid file, when it is another live process. */
function holderOf(file: string): number | undefined {
  try {
    const pid = Number(readFileSync(file, "utf8").trim());
    return pid && pid !== process.pid && pidAlive(pid) ? pid : undefined;
  } catch {
    return undefined;
  }
}

/**
 * PGlite is single-process: a second opener would corrupt the directory, so claim it with a pid file. A holder
 * still alive may be dying (just killed): wait up to `waitMs` for it to go, then refuse.
 */
async function lockDataDir(dataDir: string, waitMs: number, log: Logger | undefined): Promise<() => void> {
  const file = join(dataDir, "owner.pid");
  let pid = holderOf(file);
  if (pid !== undefined) {
    log?.("warn", "the embedded database is held by another process: waiting for it to exit", {
      dataDir,
      pid,
      waitMs,
    });
    const deadline = Date.now() + waitMs;
    while (pid !== undefined && Date.now() < deadline) {
      await Bun.sleep(Math.min(100, Math.max(1, deadline - Date.now())));
      pid = holderOf(file);
    }
    if (pid !== undefined) {
      throw new DataDirInUseError(
        `the embedded database in ${dataDir} is in use by process ${pid}; stop it first or set DATABASE_URL`,
      );
    }
  }
  writeFileSync(file, String(process.pid));
  return () => rmSync(file, { force: true });
}

/** PGlite's WebAssembly module, compiled (asynchronously); undefined when it cannot be (PGlite then loads it). */
export async function compilePglite(): Promise<WebAssembly.Module | undefined> {
  try {
    const entry = Bun.resolveSync("@electric-sql/pglite", import.meta.dir);
    return await WebAssembly.compile(await Bun.file(join(dirname(entry), "pglite.wasm")).arrayBuffer());
  } catch {
    return undefined;
  }
}

/** The `application_name` of this process's connections. */
export const APPLICATION_NAME = `subscription-indexer:${process.pid}`;

/** postgres.js options shared by both backends: numerics and int8 stay strings (exact uint256). */
function clientOptions(max: number, server: Record<string, string> = {}): postgres.Options<{}> {
  return {
    max,
    onnotice: () => {},
    idle_timeout: 0,
    connect_timeout: 5,
    // Keep int8/numeric as strings: amounts and block numbers never pass through a JS number.
    types: {},
    // One name per process: pg_stat_activity then tells this process's connections apart (the pool-use metric).
    connection: { application_name: APPLICATION_NAME, ...server },
  };
}

/**
 * Settings of this process's sessions on a Postgres server. `jit = off`: the service's queries are index lookups and
 * keyset chunks of a few thousand rows; a plan estimated above `jit_above_cost` (a token-filtered chunk of the
 * activity stream, for a connection's first executions) spent 360–600 ms compiling to run in a few ms.
 */
export const SERVER_SESSION_SETTINGS = { jit: "off" };

/** Connects to Postgres at `url`, or starts embedded PGlite behind a loopback socket. */
export async function createDb(opts: DbOptions = {}): Promise<Db> {
  if (opts.url) {
    const sql = postgres(opts.url, clientOptions(opts.max ?? 8, SERVER_SESSION_SETTINGS));
    return { sql, kind: "postgres", url: opts.url, close: () => sql.end({ timeout: 5 }) };
  }
  const dataDir = opts.dataDir ?? "./.data";
  // Compiled on other threads while the data directory is claimed and a template unpacked (PGlite would compile it
  // itself, on this thread, inside `create`).
  const wasm = compilePglite();
  let unlock = () => {};
  let fromTemplate = false;
  if (!dataDir.startsWith("memory://")) {
    mkdirSync(dataDir, { recursive: true });
    unlock = await lockDataDir(dataDir, opts.lockWaitMs ?? LOCK_WAIT_MS, opts.log);
    // No cluster yet (PGlite would run initdb here): start from the cached, migrated one instead.
    if (opts.templateDir !== false && !opts.loadDataDir && !existsSync(join(dataDir, "PG_VERSION"))) {
      try {
        await extractTemplate(await loadTemplate(opts.templateDir ?? defaultTemplateDir(), opts.log), dataDir);
      } catch (err) {
        unlock();
        throw err;
      }
      fromTemplate = true;
    }
  }
  const startParams = [...PGlite.defaultStartParams, ...PGLITE_START_PARAMS];
  if (opts.sharedBuffers) startParams.push("-c", `shared_buffers=${opts.sharedBuffers}`);
  const pgliteWasmModule = await wasm;
  const pg = await PGlite.create(dataDir, {
    ...(opts.loadDataDir ? { loadDataDir: opts.loadDataDir } : {}),
    ...(pgliteWasmModule ? { pgliteWasmModule } : {}),
    startParams,
  });
  // The template's migrations were applied when it was built; this database was created now.
  if (fromTemplate) await pg.exec("update schema_migrations set applied_at = now()");
  // PGlite is one session: the socket serves one connection and postgres.js must not open more.
  const server = new PGLiteSocketServer({ db: pg, port: 0, host: "127.0.0.1", maxConnections: 1 });
  await server.start();
  const url = `postgres://postgres@${server.getServerConn()}/postgres`;
  // postgres.js itself talks to PGlite in-process (no loopback hops); the socket serves outside tools.
  // (`socket` is a postgres.js option its type definitions leave out.)
  const options = { ...clientOptions(1), connect_timeout: 30, socket: pgliteSocket(pg) };
  const sql = postgres(url, options as postgres.Options<{}>);
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
