/**
 * `bun run bench/gate.ts`: the gate's overhead. Starts the real API over the seeded test fixture (PGlite, or
 * DATABASE_URL), then measures (1) cached `gate.check` calls per second in-process (target ≥ 1,000,000/s) and (2)
 * the throughput of a Hono route behind `gate.hono()` against the same route ungated (target ≥ 0.8) and behind an
 * empty Hono middleware (what any middleware costs), each served by Bun.serve in a child process, with wrk when installed (64 connections, BENCH_DURATION s each, default 3;
 * BENCH_ROUNDS rounds, default 5, the ratios taken within each round and their median printed), else an in-process
 * loop of real HTTP requests. On a machine with two or more cores and `taskset`, the servers run on core 0 and wrk
 * (one thread) on core 1, so the load generator does not take the server's CPU; the servers' own CPU time per request
 * (from /proc) is printed too, the figure least moved by the machine's other jobs.
 */
import { readFileSync } from "node:fs";
import { availableParallelism, loadavg as osLoad } from "node:os";
import { spawn, spawnSync } from "bun";
import { Hono } from "hono";
import { createGate } from "../packages/gate/src/index";
import { startSeededApp } from "../testkit/app";
import { MOD, W } from "../testkit/seed";

const DURATION = Number(process.env.BENCH_DURATION ?? 3);
const ROUNDS = Number(process.env.BENCH_ROUNDS ?? 5);
const CHECKS = 5_000_000;
const PIN = availableParallelism() >= 2 && spawnSync(["sh", "-c", "command -v taskset"]).exitCode === 0;
/** The command, pinned to `core` when pinning is on. */
const onCore = (core: number, cmd: string[]) => (PIN ? ["taskset", "-c", String(core), ...cmd] : cmd);
const loadavg = () => osLoad()[0]!.toFixed(1);
/** A process's CPU time so far in µs (user + system, from /proc/<pid>/stat). */
function cpuMicros(pid: number): number {
  const fields = readFileSync(`/proc/${pid}/stat`, "utf8").split(") ")[1]!.split(" ");
  return ((Number(fields[11]) + Number(fields[12])) * 1e6) / 100; // utime, stime in clock ticks (100/s)
}

/** The route ungated, behind an empty Hono middleware (the floor of any middleware), and gated. */
type Kind = "open" | "empty" | "header" | "gated";

/** Child mode: serves the Hono route (gated or not) on a free port and prints the port. */
async function serveRoute(api: string, kind: Kind) {
  const app = new Hono();
  if (kind === "gated") {
    const gate = createGate({ baseUrl: api, module: MOD.a1, plans: [1] });
    app.use("/premium", gate.hono({ wallet: (c) => c.req.header("x-wallet") }));
  }
  if (kind === "empty") app.use("/premium", (_c, next) => next());
  // What reading the wallet costs any gate: the request's headers are built on first access.
  if (kind === "header")
    app.use("/premium", (c, next) => (c.req.header("x-wallet") ? next() : Promise.resolve(c.text("", 401))));
  app.get("/premium", (c) => c.json({ ok: true }));
  const server = Bun.serve({ port: 0, hostname: "127.0.0.1", fetch: app.fetch });
  console.log(server.port);
}

async function checksPerSecond(api: string): Promise<number> {
  const gate = createGate({ baseUrl: api, module: MOD.a1, plans: [1] });
  const first = await gate.check(W.alice);
  if (!first.authorized) throw new Error("the fixture's wallet is not authorized");
  let best = 0;
  for (let round = 0; round < 3; round++) {
    const started = performance.now();
    for (let i = 0; i < CHECKS; i++) await gate.check(W.alice);
    best = Math.max(best, CHECKS / ((performance.now() - started) / 1000));
  }
  return best;
}

async function routeUrl(api: string, kind: Kind) {
  const child = spawn(onCore(0, [process.execPath, import.meta.path, "--serve", api, kind]), {
    stdout: "pipe",
    stderr: "inherit",
  });
  const reader = child.stdout.getReader();
  const { value } = await reader.read();
  const port = Number(new TextDecoder().decode(value).trim());
  const url = `http://127.0.0.1:${port}/premium`;
  // Warm-up (the gated one fills its cache).
  for (let i = 0; i < 200; i++) await (await fetch(url, { headers: { "x-wallet": W.alice } })).text();
  return { url, pid: child.pid, stop: () => child.kill() };
}

/** Requests per second and requests answered over one measurement. */
type Rate = { perSecond: number; requests: number };

function wrkRate(url: string): Rate {
  const out = spawnSync(
    onCore(1, ["wrk", PIN ? "-t1" : "-t2", "-c64", `-d${DURATION}s`, "-H", `x-wallet: ${W.alice}`, url]),
  );
  const text = new TextDecoder().decode(out.stdout);
  const m = /Requests\/sec:\s+([\d.]+)/.exec(text);
  if (!m) throw new Error(`wrk failed: ${text}${new TextDecoder().decode(out.stderr)}`);
  if (/Non-2xx/.test(text)) throw new Error(`non-2xx answers:\n${text}`);
  return { perSecond: Number(m[1]), requests: Number(/(\d+) requests in/.exec(text)![1]) };
}

async function loopRate(url: string): Promise<Rate> {
  const end = performance.now() + DURATION * 1000;
  let n = 0;
  await Promise.all(
    Array.from({ length: 64 }, async () => {
      while (performance.now() < end) {
        const res = await fetch(url, { headers: { "x-wallet": W.alice } });
        if (res.status !== 200) throw new Error(`status ${res.status}`);
        await res.text();
        n++;
      }
    }),
  );
  return { perSecond: n / DURATION, requests: n };
}

async function main() {
  const seeded = await startSeededApp();
  seeded.app.listen({ port: 0, hostname: "127.0.0.1" });
  const api = `http://127.0.0.1:${seeded.app.server!.port}`;
  try {
    const perSecond = await checksPerSecond(api);
    console.log(`cached gate.check: ${Math.round(perSecond).toLocaleString("en")}/s (target ≥ 1,000,000/s)`);

    const hasWrk = spawnSync(["sh", "-c", "command -v wrk"]).exitCode === 0;
    const kinds: Kind[] = ["open", "empty", "header", "gated"];
    const routes = await Promise.all(kinds.map((k) => routeUrl(api, k)));
    const rate = hasWrk ? wrkRate : loopRate;
    // Each round measures the three back to back, in a rotating order; the ratios are taken within a round (the
    // machine's load moves between rounds) and their median is reported.
    const runs: number[][] = [];
    const cpu: number[][] = []; // server CPU µs per request
    for (let round = 0; round < ROUNDS; round++) {
      const r = kinds.map(() => 0);
      const c = kinds.map(() => 0);
      for (let k = 0; k < kinds.length; k++) {
        const i = (k + round) % kinds.length;
        const before = cpuMicros(routes[i]!.pid);
        const m = await rate(routes[i]!.url);
        c[i] = (cpuMicros(routes[i]!.pid) - before) / m.requests;
        r[i] = m.perSecond;
      }
      runs.push(r);
      cpu.push(c);
    }
    for (const r of routes) r.stop();
    const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!;
    const fmt = (n: number) => Math.round(n).toLocaleString("en");
    const tool = hasWrk ? `wrk ${PIN ? "-t1" : "-t2"} -c64` : "in-process loop, 64 in flight";
    const where = PIN ? "server on core 0, client on core 1" : "server and client share the cores";
    console.log(`Hono route, ${tool}, ${where}, ${DURATION} s × ${ROUNDS} rounds (medians; load ${loadavg()}):`);
    const us = (i: number) => median(cpu.map((c) => c[i]!)).toFixed(2);
    console.log(
      `  ungated:                ${fmt(median(runs.map((r) => r[0]!)))} req/s, server ${us(0)} µs CPU/request`,
    );
    console.log(
      `  empty middleware:       ${fmt(median(runs.map((r) => r[1]!)))} req/s, server ${us(1)} µs CPU/request`,
    );
    console.log(
      `  reads the header only:  ${fmt(median(runs.map((r) => r[2]!)))} req/s, server ${us(2)} µs CPU/request`,
    );
    console.log(
      `  gated (cached answer):  ${fmt(median(runs.map((r) => r[3]!)))} req/s, server ${us(3)} µs CPU/request`,
    );
    const vsOpen = median(runs.map((r) => r[3]! / r[0]!));
    const vsEmpty = median(runs.map((r) => r[3]! / r[1]!));
    const vsHeader = median(runs.map((r) => r[3]! / r[2]!));
    const cpuVsOpen = median(cpu.map((c) => c[0]! / c[3]!));
    console.log(
      `gated / ungated: ${vsOpen.toFixed(3)} (target ≥ 0.8); gated / empty middleware: ${vsEmpty.toFixed(3)}; ` +
        `gated / header-reading middleware: ${vsHeader.toFixed(3)}; ` +
        `by server CPU per request, ungated ÷ gated: ${cpuVsOpen.toFixed(3)}`,
    );
  } finally {
    // The listener only: the app's onStop would unsubscribe from the notifier after the database is gone.
    seeded.app.server?.stop(true);
    await seeded.close();
  }
}

if (process.argv[2] === "--serve") await serveRoute(process.argv[3]!, process.argv[4] as Kind);
else await main();
