/**
 * `bun run bench/check-cpu.ts <database url> <checkout> [<checkout>…]`: CPU time per request of the hot indexed
 * authorization check against `/healthz`, in process (`app.handle()` in batches of 64, no HTTP server, no wrk), for
 * one or more checkouts of this repository loaded side by side in one process and alternated round by round, so
 * the machine's other load falls on every checkout alike. The database is one `bench/api.ts` seeded and kept
 * (`BENCH_KEEP=1`); the hot set is its 1,000 first wallets, as in bench/api.ts. Env: ROUNDS (5), N (requests per
 * line, 40,000). Prints each round and the medians.
 */

const url = process.argv[2];
const dirs = process.argv.slice(3);
const ROUNDS = Number(process.env.ROUNDS ?? 5);
const N = Number(process.env.N ?? 40000);
const hex = (n: number, w: number) => n.toString(16).padStart(w, "0");
const checkUrl = (w: number) =>
  `http://localhost/v0/auth/check?module_address=0x${hex(1000001 + (w % 1000), 40)}&wallet=0x${hex(w, 40)}&plan_ids=1,2,3`;
const apps: { name: string; handle: (r: Request) => Promise<Response> }[] = [];
for (const d of dirs) {
  const { createDb } = await import(`${d}/src/db/client`);
  const { loadConfig } = await import(`${d}/src/common/config`);
  const { createChainRegistry } = await import(`${d}/src/chain/clients`);
  const { createApp } = await import(`${d}/src/http/app`);
  const { createNotifier } = await import(`${d}/src/db/notify`);
  const { createApiCaches } = await import(`${d}/src/http/caches`);
  const db = await createDb({ url, max: 4 });
  const config = loadConfig({
    CHAIN_ID: "31337",
    ADMIN_API_KEY: "bench-admin-key-0123456789abcdef",
    RATE_LIMIT_PER_MINUTE: "1000000000",
    SIWE_DOMAIN: "localhost",
    LOG_LEVEL: "error",
  });
  const notifier = createNotifier(db);
  const caches = createApiCaches({ notifier, sql: db.sql });
  await caches.generations.ready;
  const app = createApp({ sql: db.sql, config, chains: await createChainRegistry(config), notifier, caches });
  apps.push({ name: d.split("/").pop()!, handle: (r) => app.handle(r) });
}
async function run(handle: (r: Request) => Promise<Response>, mk: (i: number) => string, n: number) {
  const c0 = process.cpuUsage();
  const t0 = performance.now();
  for (let i = 0; i < n; i += 64) {
    const batch = [];
    for (let k = 0; k < 64; k++) batch.push(handle(new Request(mk(i + k))).then((r) => r.text()));
    await Promise.all(batch);
  }
  const c = process.cpuUsage(c0);
  return { us: (c.user + c.system) / n, wall: ((performance.now() - t0) * 1000) / n };
}
const hot = (i: number) => checkUrl(Math.floor(Math.random() * 1000));
const health = () => "http://localhost/healthz";
for (const a of apps) {
  await run(a.handle, hot, 20000);
  await run(a.handle, health, 20000);
}
const sums: Record<string, { h: number[]; c: number[] }> = {};
for (let r = 0; r < ROUNDS; r++) {
  for (const a of apps) {
    const h = await run(a.handle, health, N);
    const c = await run(a.handle, hot, N);
    (sums[a.name] ??= { h: [], c: [] }).h.push(h.us);
    sums[a.name].c.push(c.us);
    console.log(
      `round ${r} ${a.name}: healthz ${h.us.toFixed(2)} µs/req, hot check ${c.us.toFixed(2)} µs/req, ratio ${(h.us / c.us).toFixed(3)}`,
    );
  }
}
const med = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];
for (const [n, s] of Object.entries(sums))
  console.log(
    `median ${n}: healthz ${med(s.h).toFixed(2)} µs, hot ${med(s.c).toFixed(2)} µs, ratio ${(med(s.h) / med(s.c)).toFixed(3)}`,
  );
process.exit(0);
export {};
