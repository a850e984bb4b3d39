/**
 * A cached, migrated PGlite cluster that fresh data directories start from: PGlite's initdb costs 5–6 s, extracting
 * the cached cluster about 0.2 s. One file per PGlite version and set of migrations, written atomically (temporary
 * file, then rename) and checked on every read: a missing, corrupt or stale template is rebuilt.
 */
import { PGlite } from "@electric-sql/pglite";
import { PGLiteSocketServer } from "@electric-sql/pglite-socket";
import postgres from "postgres";
import { createHash, randomBytes } from "node:crypto";
import { mkdirSync, readFileSync, renameSync, rmSync, writeFileSync } from "node:fs";
import { homedir } from "node:os";
import { dirname, join } from "node:path";
import type { Logger } from "../common/log";
import { listMigrations, migrate, migrationsDir } from "./migrate";

// Bumped when the file's layout changes: older files then no longer match.
const FORMAT = 1;
const SUM_BYTES = 32;

/** Where templates are kept by default: `$XDG_CACHE_HOME/subscription-indexer/pglite` (else `~/.cache/…`). */
export function defaultTemplateDir(): string {
  const base = process.env.XDG_CACHE_HOME || join(homedir(), ".cache");
  return join(base, "subscription-indexer", "pglite");
}

/** The installed PGlite's version (its package.json next to the resolved entry point). */
function pgliteVersion(): string {
  const entry = Bun.resolveSync("@electric-sql/pglite", import.meta.dir);
  return (JSON.parse(readFileSync(join(dirname(entry), "..", "package.json"), "utf8")) as { version: string }).version;
}

/** The template file for this PGlite and these migrations (their names and text). */
export function templateFile(dir: string, migrations = migrationsDir): string {
  const hash = createHash("sha256").update(`format ${FORMAT}\n`);
  for (const m of listMigrations(migrations)) hash.update(`${m.name}\n${m.text}\n`);
  return join(dir, `pglite-${pgliteVersion()}-${hash.digest("hex").slice(0, 16)}.tgz`);
}

/** The template's archive (a gzipped tar of the data directory), or undefined when missing or corrupt. */
export function readTemplate(file: string): Uint8Array<ArrayBuffer> | undefined {
  let bytes: Uint8Array<ArrayBuffer>;
  try {
    bytes = readFileSync(file);
  } catch {
    return undefined;
  }
  // The file is the archive followed by its SHA-256: a torn or altered file fails the check.
  if (bytes.length <= SUM_BYTES) return undefined;
  const body = bytes.subarray(0, bytes.length - SUM_BYTES);
  const sum = createHash("sha256").update(body).digest();
  return sum.equals(bytes.subarray(bytes.length - SUM_BYTES)) ? body : undefined;
}

/** Writes the template atomically: concurrent writers each rename a complete file into place. */
export function writeTemplate(file: string, archive: Uint8Array): void {
  mkdirSync(dirname(file), { recursive: true });
  const tmp = `${file}.${process.pid}.${randomBytes(4).toString("hex")}.tmp`;
  try {
    writeFileSync(tmp, Buffer.concat([archive, createHash("sha256").update(archive).digest()]));
    renameSync(tmp, file);
  } finally {
    rmSync(tmp, { force: true });
  }
}

/** Runs initdb and the migrations in memory and returns the cluster as a gzipped tar. */
export async function buildTemplate(migrations = migrationsDir): Promise<Uint8Array<ArrayBuffer>> {
  const pg = await PGlite.create("memory://");
  try {
    const server = new PGLiteSocketServer({ db: pg, port: 0, host: "127.0.0.1", maxConnections: 1 });
    await server.start();
    const sql = postgres(`postgres://postgres@${server.getServerConn()}/postgres`, { max: 1, onnotice: () => {} });
    try {
      await migrate(sql, migrations);
    } finally {
      await sql.end({ timeout: 5 });
      await server.stop();
    }
    await pg.exec("checkpoint");
    return new Uint8Array(await ((await pg.dumpDataDir("gzip")) as Blob).arrayBuffer());
  } finally {
    await pg.close();
  }
}

/** The template for these migrations from `dir`, built and stored first when missing, stale or corrupt. */
export async function loadTemplate(
  dir: string,
  log?: Logger,
  migrations = migrationsDir,
): Promise<Uint8Array<ArrayBuffer>> {
  const file = templateFile(dir, migrations);
  const cached = readTemplate(file);
  if (cached) return cached;
  log?.("info", "building the embedded database template (first start with these migrations)", { file });
  const archive = await buildTemplate(migrations);
  try {
    writeTemplate(file, archive);
  } catch (err) {
    // A read-only cache costs the next start the initdb again; this one goes on from the archive in memory.
    log?.("warn", "could not store the embedded database template", { file, err });
  }
  return archive;
}

/**
 * Unpacks a template into an empty data directory (the live cluster's pid file is left out). `PG_VERSION`, which
 * marks a directory as holding a cluster, comes last: a start killed while unpacking unpacks again next time.
 */
export async function extractTemplate(archive: Uint8Array, dataDir: string): Promise<void> {
  const tar = new Bun.Archive(archive);
  await tar.extract(dataDir, { glob: ["**", "!postmaster.pid", "!PG_VERSION"] });
  await tar.extract(dataDir, { glob: "PG_VERSION" });
}
