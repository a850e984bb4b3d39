/**
 * `bun run bench/api.ts`: HTTP throughput and latency of the API on Postgres with a production-sized index.
 *
 * Creates a fresh database on DATABASE_URL (default postgres://postgres@127.0.0.1:5432/postgres), seeds 1,000,000
 * allocations and 5,000,000 activity rows with set-based SQL, starts the real server (createApp().listen) in a
 * child process, and runs wrk (64 connections, 2 threads, 10 s each) against: /healthz (the ceiling), the indexed
 * authorization check over varying wallets, and a 1000-record activity page of a large merchant. The database is
 * dropped at the end. Env: BENCH_POOL (postgres.js pool of the server, default 4), BENCH_DURATION (seconds, 10),
 * BENCH_CONNECTIONS (64).
 */
import postgres from "postgres";
import { spawn } from "bun";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { createDb } from "../src/db/client";
import { migrate } from "../src/db/migrate";
import { createNotifier } from "../src/db/notify";
import { loadConfig } from "../src/config";
import { createChainRegistry } from "../src/chain/clients";
import { createApp } from "../src/app";

const CHAIN = 31337;
const ADMIN_KEY = "bench-admin-key-0123456789abcdef";
const MODULES = 1000;
const MERCHANTS = 200;
const ALLOCATIONS = 1_000_000;
const ACTIVITY = 5_000_000;
/** Merchant 0 owns modules 200, 400, …: every fifth activity row is its (1,000,000 rows). */
const BIG_MERCHANT = merchantAddress(0);

function merchantAddress(i: number): string {
  return "0x" + "e" + i.toString(16).padStart(39, "0");
}
function moduleAddress(m: number): string {
  return "0x" + (1_000_000 + m).toString(16).padStart(40, "0");
}
function walletAddress(w: number): string {
  return "0x" + w.toString(16).padStart(40, "0");
}

/** Child mode: serve the API on `port` over `url` until killed. */
async function serve(url: string, port: number): Promise<void> {
  const db = await createDb({ url, max: Number(process.env.BENCH_POOL ?? 4) });
  const config = loadConfig({
    CHAIN_ID: String(CHAIN),
    ADMIN_API_KEY: ADMIN_KEY,
    RATE_LIMIT_PER_MINUTE: "1000000000",
    LOG_LEVEL: "error",
  });
  const app = createApp({
    sql: db.sql,
    config,
    chains: await createChainRegistry(config),
    notifier: createNotifier(db),
  });
  app.listen({ port, hostname: "127.0.0.1" });
  console.log("READY");
}

async function seed(sql: postgres.Sql): Promise<void> {
  const t0 = performance.now();
  const step = async (label: string, q: Promise<unknown>) => {
    const t = performance.now();
    await q;
    console.log(`  ${label.padEnd(28)} ${((performance.now() - t) / 1000).toFixed(1)} s`);
  };
  const merchantOf = (m: string) => `'0xe' || lpad(to_hex((${m}) % ${MERCHANTS}), 39, '0')`;
  const moduleOf = (m: string) => `'0x' || lpad(to_hex(1000000 + (${m})), 40, '0')`;
  await step(
    "chains, tokens, modules, plans",
    sql.begin(async (tx) => {
      await tx`insert into chains (chain_id, processor, start_block, indexed_block, indexed_hash, indexed_time, head_block, head_seen_at)
        values (${CHAIN}, ${"0x" + "9".repeat(40)}, 0, 2000000, ${"0x" + "ab".repeat(32)}, now(), 2000000, now())`;
      await tx.unsafe(`insert into tokens select ${CHAIN}, '0x' || lpad(to_hex(t), 40, '0'),
        (array['USDC','WETH',null])[t], (array[6,18,null])[t] from generate_series(1, 3) t`);
      await tx.unsafe(`insert into modules select ${CHAIN}, ${moduleOf("m")}, ${merchantOf("m")}, 1, m,
        '0x' || lpad(to_hex(m), 64, '0') from generate_series(1, ${MODULES}) m`);
      await tx.unsafe(`insert into plans select ${CHAIN}, ${moduleOf("m")}, p, '0x' || lpad(to_hex(1 + p % 3), 40, '0'),
        1000000 * p, 2592000, 259200, 1, p from generate_series(1, ${MODULES}) m, generate_series(1, 5) p`);
    }),
  );
  // Wallet w holds five allocations (plans 1-5) on module (w % 1000) + 1; statuses vary with g.
  await step(
    "1,000,000 subscriptions",
    sql.unsafe(`insert into subscriptions (chain_id, subscription_id, module, merchant, subscriber, plan_id,
        max_executions, times_executed, total_spent, created_at, last_paid_at, next_charge_at, allowance_expiry,
        paused, cancelled, block_number, log_index, tx_hash)
      select ${CHAIN}, g, ${moduleOf("w % 1000 + 1")}, ${merchantOf("w % 1000 + 1")}, '0x' || lpad(to_hex(w), 40, '0'),
        k + 1, case when g % 3 = 0 then 12 else 0 end, case when g % 7 = 0 then 0 else 3 end,
        case when g % 7 = 0 then 0 else 3000000 * (k + 1) end, now_s - 100 * 86400,
        case when g % 7 = 0 then 0 else now_s - (g % 40) * 86400 end, now_s + 86400, 0,
        g % 11 = 0, g % 13 = 0, g, 0, '0x' || lpad(to_hex(g), 64, '0')
      from (select g, (g - 1) / 5 as w, (g - 1) % 5 as k, extract(epoch from now())::bigint as now_s
            from generate_series(1, ${ALLOCATIONS}) g) x`),
  );
  await step(
    "blocked subscribers",
    sql.unsafe(`insert into blocked_subscribers select ${CHAIN}, ${moduleOf("w % 1000 + 1")},
      '0x' || lpad(to_hex(w), 40, '0'), true, 2, 0 from generate_series(0, ${ALLOCATIONS / 5 - 1}, 97) w`),
  );
  // Four records per block; every fifth record belongs to the big merchant.
  await step(
    "5,000,000 activity rows",
    sql.unsafe(`insert into activity (chain_id, block_number, log_index, tx_hash, block_time, merchant, module,
        subscription_id, type, token, amount, fee, reason, keeper)
      select ${CHAIN}, 1000 + g / 4, g % 4, '0x' || lpad(to_hex(g), 64, '0'), to_timestamp(1700000000 + g * 3),
        ${merchantOf("m")}, ${moduleOf("m")}, g % ${ALLOCATIONS} + 1,
        case when g % 10 < 7 then 'CHARGE' when g % 10 < 9 then 'FAIL' else 'REFILL' end,
        '0x' || lpad(to_hex(1 + g % 3), 40, '0'),
        case when g % 10 between 7 and 8 then 0 else 1000000 + g end,
        case when g % 10 < 7 then 25000 end,
        case when g % 10 between 7 and 8 then (array['InsufficientAllowance','InsufficientBalance','TransferFailed','AllowanceExpired'])[1 + g % 4] end,
        case when g % 10 < 9 then '0x' || lpad(to_hex(99), 40, '0') end
      from (select g, case when g % 5 = 0 then ${MERCHANTS} * (1 + (g / 5) % 5) else g % ${MODULES} + 1 end as m
            from generate_series(1, ${ACTIVITY}) g) x`),
  );
  // Leave nothing for autovacuum to do during the runs (visibility map, hint bits, statistics), then checkpoint.
  await step(
    "vacuum analyze, checkpoint",
    sql
      .unsafe("vacuum analyze")
      .simple()
      .then(() => sql`checkpoint`),
  );
  console.log(`  seeded in ${((performance.now() - t0) / 1000).toFixed(1)} s`);
}

type WrkResult = { label: string; rps: number; p50: number; p99: number; non2xx: number; errors: string };

function toMs(v: string): number {
  const m = /^([\d.]+)(us|ms|s)$/.exec(v.trim());
  if (!m) return NaN;
  return Number(m[1]) * (m[2] === "us" ? 0.001 : m[2] === "ms" ? 1 : 1000);
}

async function wrk(
  label: string,
  url: string,
  opts: { script?: string; headers?: string[]; connections?: number; seconds?: number },
): Promise<WrkResult> {
  const duration = process.env.BENCH_DURATION ?? "10";
  const connections = String(opts.connections ?? process.env.BENCH_CONNECTIONS ?? 64);
  const threads = Number(connections) < 2 ? "1" : "2";
  const args = ["wrk", "-t", threads, "-c", connections, "-d", `${opts.seconds ?? duration}s`, "--latency"];
  for (const h of opts.headers ?? []) args.push("-H", h);
  if (opts.script) args.push("-s", opts.script);
  args.push(url);
  const proc = spawn(args, { stdout: "pipe", stderr: "pipe" });
  const out = await new Response(proc.stdout).text();
  await proc.exited;
  const pick = (re: RegExp) => re.exec(out)?.[1] ?? "";
  const result: WrkResult = {
    label,
    rps: Number(pick(/Requests\/sec:\s+([\d.]+)/)),
    p50: toMs(pick(/\s50%\s+(\S+)/)),
    p99: toMs(pick(/\s99%\s+(\S+)/)),
    non2xx: Number(pick(/Non-2xx or 3xx responses:\s+(\d+)/) || 0),
    errors: pick(/(Socket errors:[^\n]*)/),
  };
  if (!result.rps) console.log(out);
  return result;
}

async function main(): Promise<void> {
  if (process.argv[2] === "serve") return serve(process.argv[3], Number(process.argv[4]));

  const base = process.env.DATABASE_URL ?? "postgres://postgres@127.0.0.1:5432/postgres";
  // BENCH_REUSE=<database> benchmarks an already seeded database (kept afterwards); BENCH_KEEP=1 keeps a new one.
  const reuse = process.env.BENCH_REUSE;
  const keep = Boolean(reuse) || process.env.BENCH_KEEP === "1";
  const name = reuse ?? `bench_api_${Date.now().toString(36)}`;
  const admin = postgres(base, { max: 1, onnotice: () => {} });
  const url = new URL(base);
  url.pathname = `/${name}`;
  let server: ReturnType<typeof spawn> | undefined;
  const dir = mkdtempSync(join(tmpdir(), "bench-api-"));
  try {
    if (!reuse) {
      await admin.unsafe(`create database ${name}`);
      const db = await createDb({ url: url.toString(), max: 4 });
      await migrate(db.sql);
      console.log(`seeding ${name}`);
      await seed(db.sql);
      await db.close();
    }

    // Read every table and index once so the runs measure the API, not a cold disk (this VM reads ~0.1 ms a page).
    const warm = postgres(url.toString(), { max: 1, onnotice: () => {} });
    const t = performance.now();
    await warm`create extension if not exists pg_prewarm`.catch(() => {});
    await warm`select pg_prewarm(c.oid::regclass, 'read') from pg_class c
      where c.relnamespace = 'public'::regnamespace and c.relkind in ('r', 'i')`.catch((e) =>
      console.log(`prewarm skipped: ${e.message}`),
    );
    await warm.end();
    console.log(`prewarmed in ${((performance.now() - t) / 1000).toFixed(1)} s`);

    const probe = Bun.serve({ port: 0, hostname: "127.0.0.1", fetch: () => new Response() });
    const port = probe.port!;
    probe.stop(true);
    server = spawn(["bun", import.meta.path, "serve", url.toString(), String(port)], {
      stdout: "pipe",
      stderr: "inherit",
    });
    const reader = (server.stdout as ReadableStream<Uint8Array>).getReader();
    let seen = "";
    while (!seen.includes("READY")) {
      const { value, done } = await reader.read();
      if (done) throw new Error("the server exited before it was ready");
      seen += new TextDecoder().decode(value);
    }
    const origin = `http://127.0.0.1:${port}`;

    // Random wallets, each checked on its own module for plans 1,2,3 (three allocations per request): 10,000 drawn
    // from all 200,000 wallets (1M allocations), and a hot set of 1,000 wallets that stays in shared_buffers.
    const checkScript = (name: string, wallets: number) => {
      const paths: string[] = [];
      for (let i = 0; i < 10_000; i++) {
        const w = Math.floor(Math.random() * wallets);
        paths.push(
          `/v0/auth/check?module_address=${moduleAddress((w % 1000) + 1)}&wallet=${walletAddress(w)}&plan_ids=1,2,3`,
        );
      }
      const file = join(dir, name);
      const lua =
        `local paths = {\n${paths.map((p) => `"${p}"`).join(",\n")}\n}\n` +
        `math.randomseed(os.time())\nrequest = function()\n  return wrk.format("GET", paths[math.random(#paths)])\nend\n`;
      writeFileSync(file, lua);
      return { file, first: paths[0] };
    };
    const { file: script, first } = checkScript("check.lua", ALLOCATIONS / 5);
    const { file: hotScript } = checkScript("check-hot.lua", 1_000);
    const sample = await (await fetch(origin + first)).json();
    const page = await fetch(`${origin}/v0/activity/${BIG_MERCHANT}?limit=1000`, {
      headers: { authorization: `Bearer ${ADMIN_KEY}` },
    });
    const pageBody = (await page.json()) as unknown[];
    console.log(
      `sanity: check authorized=${(sample as { authorized: boolean }).authorized}, activity page ${page.status} with ${pageBody.length} records`,
    );

    const auth = [`Authorization: Bearer ${ADMIN_KEY}`];
    const activityUrl = `${origin}/v0/activity/${BIG_MERCHANT}?limit=1000`;
    // Warm-up (not reported): JIT, prepared statements, caches.
    await wrk("warm-up", origin, { script, seconds: 3 });
    await wrk("warm-up", activityUrl, { headers: auth, seconds: 2 });

    const results: WrkResult[] = [];
    results.push(await wrk("GET /healthz (ceiling)", `${origin}/healthz`, {}));
    results.push(await wrk("GET /v0/auth/check (indexed)", origin, { script }));
    results.push(await wrk("GET /v0/activity limit=1000", activityUrl, { headers: auth }));
    results.push(await wrk("GET /v0/auth/check (indexed)", origin, { script, connections: 4 }));
    results.push(await wrk("GET /v0/activity limit=1000", activityUrl, { headers: auth, connections: 1 }));
    results.push(await wrk("GET /v0/auth/check, 1k hot wallets", origin, { script: hotScript }));
    results.push(await wrk("GET /v0/auth/check, 1k hot wallets", origin, { script: hotScript, connections: 4 }));

    const loaded = Number(process.env.BENCH_CONNECTIONS ?? 64);
    const conns = [loaded, loaded, loaded, 4, 1, loaded, 4];
    console.log(`\nserver pool=${process.env.BENCH_POOL ?? 4}, wrk ${process.env.BENCH_DURATION ?? 10} s per run`);
    console.log(
      "route".padEnd(32) +
        "conns".padStart(6) +
        "req/s".padStart(10) +
        "p50 ms".padStart(10) +
        "p99 ms".padStart(10) +
        "  non-2xx",
    );
    results.forEach((r, i) => {
      console.log(
        r.label.padEnd(32) +
          String(conns[i]).padStart(6) +
          r.rps.toFixed(0).padStart(10) +
          r.p50.toFixed(2).padStart(10) +
          r.p99.toFixed(2).padStart(10) +
          `  ${r.non2xx}${r.errors ? "  " + r.errors : ""}`,
      );
    });
    const [ceiling, check, activity, checkLight, activityLight] = results;
    const settings = postgres(url.toString(), { max: 1, onnotice: () => {} });
    const [{ shared_buffers }] = await settings`select current_setting('shared_buffers') as shared_buffers`;
    await settings.end();
    console.log(
      `postgres shared_buffers=${shared_buffers}; ${navigator.hardwareConcurrency} CPUs shared by wrk, the API and Postgres`,
    );
    console.log(`auth check / trivial route throughput: ${(check.rps / ceiling.rps).toFixed(2)}`);
    // Closed-loop load: mean latency = connections / throughput (Little's law), whatever the code does.
    console.log(
      `Little's law at ${conns[1]} connections: check mean >= ${((conns[1] / check.rps) * 1000).toFixed(2)} ms, ` +
        `trivial route mean >= ${((conns[0] / ceiling.rps) * 1000).toFixed(2)} ms`,
    );
    const verdict = (ok: boolean) => (ok ? "met" : "MISSED");
    console.log(
      `targets at ${conns[1]} connections: check p50 <= 1 ms ${verdict(check.p50 <= 1)}, check p99 <= 5 ms ` +
        `${verdict(check.p99 <= 5)}, activity p50 <= 20 ms ${verdict(activity.p50 <= 20)}`,
    );
    console.log(
      `targets at light load: check p50 <= 1 ms ${verdict(checkLight.p50 <= 1)}, check p99 <= 5 ms ` +
        `${verdict(checkLight.p99 <= 5)}, activity p50 <= 20 ms ${verdict(activityLight.p50 <= 20)}`,
    );
  } finally {
    rmSync(dir, { recursive: true, force: true });
    server?.kill();
    await server?.exited;
    if (keep) console.log(`kept database ${name}`);
    else await admin.unsafe(`drop database if exists ${name} with (force)`);
    await admin.end();
  }
}

await main();
