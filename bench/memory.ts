/**
 * Memory benchmark (figures the test suite no longer asserts, since RSS and heap depend on the machine and on what
 * else runs in the process): (a) heap growth while a 50,000-record activity list streams, sampled every 5 chunks
 * after a full GC; (b) RSS before and after ten 10 MB posts that the body limit refuses (413). On PGlite, in process.
 * (c) The RSS of an API-only process on PGlite (`ROLES=api bun start`, no DATABASE_URL) idle 2 s after its first
 * `/healthz`, on a fresh data directory and reopened (target: ≤ 250 MB).
 *
 *   bun run bench/memory.ts [--records 50000]
 */
import { createApp } from "../src/http/app";
import { BIG, seedBigMerchant } from "../testkit/bulk";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { admin, startSeededApp } from "../testkit/app";
import { freePort, spawnCommand, until } from "../testkit/cli";
import { rssMb } from "./proc";

const arg = (name: string, def: number) => {
  const i = process.argv.indexOf(`--${name}`);
  return i > 0 ? Number(process.argv[i + 1]) : def;
};
const RECORDS = arg("records", 50_000);
const mb = (n: number) => `${(n / 1e6).toFixed(1)} MB`;
const heap = () => {
  Bun.gc(true);
  return process.memoryUsage().heapUsed;
};

/** (a) Streams the list and returns the peak heap growth over the starting heap. */
async function streamedHeap(app: ReturnType<typeof createApp>) {
  const base = heap();
  let peak = base;
  let bytes = 0;
  let chunks = 0;
  const res = await app.handle(new Request(`http://localhost/v0/activity/${BIG}`, { headers: admin }));
  const reader = res.body!.getReader();
  for (;;) {
    const { value, done } = await reader.read();
    if (done) break;
    bytes += value.length;
    if (++chunks % 5 === 0) peak = Math.max(peak, heap());
  }
  return { bytes, chunks, growth: peak - base };
}

/** (b) Sends `size` bytes with a declared length over a raw socket and waits for the answer's status line. */
async function refusedPost(port: number, size: number): Promise<string> {
  let response = "";
  const chunk = new Uint8Array(64 * 1024).fill(0x7b);
  const answered = Promise.withResolvers<void>();
  const socket = await Bun.connect({
    hostname: "127.0.0.1",
    port,
    socket: {
      data(_s, data) {
        response += data.toString();
        if (response.includes("}}")) answered.resolve();
      },
      close: () => answered.resolve(),
      error: () => answered.resolve(),
    },
  });
  socket.write(`POST /v0/siwe/verify HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n`);
  socket.write(`Content-Length: ${size}\r\n\r\n`);
  for (let sent = 0; sent < size && !response; sent += chunk.length) {
    socket.write(chunk);
    await Bun.sleep(0);
  }
  await answered.promise;
  socket.end();
  return response.slice(0, response.indexOf("\r\n"));
}

/** (c) RSS in MB of an API-only process on PGlite over `dataDir`, 2 s after it first answered. */
async function apiOnlyRss(dataDir: string): Promise<number> {
  const port = await freePort();
  // Through the launcher, as `bun start` (its environment: the allocator's settings).
  const child = spawnCommand(["sh", "scripts/bun.sh", "run", "src/main.ts"], {
    ROLES: "api",
    CHAIN_ID: "31337",
    SIWE_DOMAIN: "localhost",
    ADMIN_API_KEY: "admin-key-0123456789abcdef",
    DATA_DIR: dataDir,
    PORT: String(port),
    HOST: "127.0.0.1",
    LOG_LEVEL: "warn",
    ...(process.env.MIMALLOC_PURGE_DELAY ? { MIMALLOC_PURGE_DELAY: process.env.MIMALLOC_PURGE_DELAY } : {}),
  });
  try {
    await until("the API answers", async () => (await fetch(`http://127.0.0.1:${port}/healthz`)).ok, 60_000);
    await Bun.sleep(2_000);
    return rssMb(child.proc.pid);
  } finally {
    child.proc.kill();
    await child.proc.exited;
  }
}

const dir = mkdtempSync(join(tmpdir(), "bench-memory-"));
try {
  const fresh = await apiOnlyRss(join(dir, "data"));
  const reopened = await apiOnlyRss(join(dir, "data"));
  console.log(
    `(c) API-only process on PGlite, idle: ${fresh.toFixed(0)} MB RSS on a fresh data directory, ` +
      `${reopened.toFixed(0)} MB reopened (target ≤ 250 MB)`,
  );
} finally {
  rmSync(dir, { recursive: true, force: true });
}

const s = await startSeededApp();
try {
  await seedBigMerchant(s.db.sql, { activity: RECORDS, subscriptions: 100 });
  const rss0 = process.memoryUsage().rss;
  const a = await streamedHeap(s.app);
  console.log(
    `(a) streamed ${RECORDS} records, ${mb(a.bytes)} in ${a.chunks} chunks: heap growth ${mb(a.growth)} ` +
      `(${((a.growth / a.bytes) * 100).toFixed(0)} % of the body), RSS ${mb(rss0)} -> ${mb(process.memoryUsage().rss)}`,
  );
  s.app.listen({ port: 0, hostname: "127.0.0.1" });
  Bun.gc(true);
  const before = process.memoryUsage().rss;
  const statuses = new Set<string>();
  for (let i = 0; i < 10; i++) statuses.add(await refusedPost(s.app.server!.port!, 10_000_000));
  Bun.gc(true);
  console.log(
    `(b) ten 10 MB posts (${[...statuses].join(", ")}): RSS ${mb(before)} -> ${mb(process.memoryUsage().rss)}`,
  );
} finally {
  await s.app.stop();
  await s.close();
}
