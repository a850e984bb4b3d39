/** Memory of an API-only process on the embedded database: `ROLES=api bun start` with no DATABASE_URL. */
import { expect, test } from "bun:test";
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { freePort, spawnBun, until } from "../../testkit/cli";

/** Resident set size of `pid` in MB. */
const rssMb = (pid: number) => Number(/VmRSS:\s+(\d+) kB/.exec(readFileSync(`/proc/${pid}/status`, "utf8"))![1]) / 1024;

test("an API-only process on PGlite idles under 250 MB RSS (a 16 MB buffer pool: Postgres zeroes all of it at start)", async () => {
  const dir = mkdtempSync(join(tmpdir(), "pglite-rss-"));
  const port = await freePort();
  const child = spawnBun(["src/main.ts"], {
    ROLES: "api",
    CHAIN_ID: "31337",
    SIWE_DOMAIN: "localhost",
    ADMIN_API_KEY: "admin-key-0123456789abcdef",
    DATA_DIR: join(dir, "data"),
    PORT: String(port),
    HOST: "127.0.0.1",
    LOG_LEVEL: "warn",
  });
  try {
    await until("the API answers", async () => (await fetch(`http://127.0.0.1:${port}/healthz`)).ok, 60_000);
    await Bun.sleep(2_000); // idle
    expect(rssMb(child.proc.pid)).toBeLessThan(250);
  } finally {
    child.proc.kill();
    await child.proc.exited;
    rmSync(dir, { recursive: true, force: true });
  }
}, 90_000);
