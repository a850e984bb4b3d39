/**
 * The embedded database's buffer pool: an API-only process (`ROLES=api bun start`, no DATABASE_URL) opens PGlite with
 * a small `shared_buffers`, since Postgres zeroes the whole pool inside the WASM heap at start (~120 MB of RSS). The
 * RSS itself is a figure of `bun run bench/memory.ts`, not asserted here. PGlite on both runs of the suite.
 */
import { afterAll, expect, test } from "bun:test";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { loadConfig } from "../../src/common/config";
import { createDb, PGLITE_READER_SHARED_BUFFERS } from "../../src/db/client";
import { startService } from "../../src/service";
import { freePort } from "../../testkit/cli";

const dir = mkdtempSync(join(tmpdir(), "pglite-buffers-"));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

const sharedBuffers = async (sql: { unsafe: (q: string) => Promise<unknown> }) =>
  ((await sql.unsafe("show shared_buffers")) as { shared_buffers: string }[])[0]!.shared_buffers;

test("PGlite only: an API-only service opens the embedded database with the reader's small buffer pool", async () => {
  const config = loadConfig({
    ROLES: "api",
    CHAIN_ID: "31337",
    SIWE_DOMAIN: "localhost",
    ADMIN_API_KEY: "admin-key-0123456789abcdef",
    DATA_DIR: join(dir, "api"),
    PORT: String(await freePort()),
    HOST: "127.0.0.1",
    LOG_LEVEL: "warn",
  });
  const service = await startService(config);
  try {
    expect(service.db.kind).toBe("pglite");
    expect(await sharedBuffers(service.db.sql)).toBe(PGLITE_READER_SHARED_BUFFERS);
    expect((await fetch(`${service.url}/healthz`)).ok).toBe(true);
  } finally {
    await service.stop();
  }
}, 90_000);

test("PGlite only: without the option the embedded database keeps Postgres's default pool (what the indexer gets)", async () => {
  const db = await createDb({ dataDir: join(dir, "default") });
  try {
    expect(await sharedBuffers(db.sql)).toBe("128MB");
  } finally {
    await db.close();
  }
}, 90_000);
