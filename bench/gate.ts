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
import { availableParallelism, loadavg as osLoad } from "node:os";
import { spawn, spawnSync } from "bun";
import { cpuMicros } from "./proc";
import { Hono, type Context } from "hono";
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

/**
 * The route: bare; behind an empty Hono middleware (the floor of any middleware); behind a middleware that only reads
 * the wallet header (the floor of any gate); gated by the `hono()` middleware and by the `honoRoute()` handler, the
 * wallet read from the header; and as a merchant's app has it,
 * behind a session middleware that puts the signed-in wallet on the context (here: from the header), ungated and gated.
 */
type Kind = "open" | "empty" | "header" | "gated" | "route-gated" | "session" | "session-gated";
const KINDS: { kind: Kind; label: string }[] = [
  { kind: "open", label: "ungated" },
  { kind: "empty", label: "empty middleware" },
  { kind: "header", label: "reads the header only" },
  { kind: "gated", label: "gated (cached answer)" },
  { kind: "route-gated", label: "gated by honoRoute" },
  { kind: "session", label: "session, ungated" },
  { kind: "session-gated", label: "session, gated" },
];

/** Child mode: serves the Hono route of `kind` on a free port and prints the port. */
async function serveRoute(api: string, kind: Kind) {
  const app = new Hono<{ Variables: { wallet: string } }>();
  const gate = () => createGate({ baseUrl: api, module: MOD.a1, plans: [1] });
  if (kind === "empty") app.use("/premium", (_c, next) => next());
  // Bun builds a request's headers on first access: what reading the wallet costs any gate.
  if (kind === "header")
    app.use("/premium", (c, next) => (c.req.header("x-wallet") ? next() : Promise.resolve(c.text("", 401))));
  if (kind === "gated") app.use("/premium", gate().hono({ wallet: (c) => c.req.header("x-wallet") }));
  if (kind === "session" || kind === "session-gated") {
    app.use("/premium", (c, next) => {
      const wallet = c.req.header("x-wallet");
      if (!wallet) return Promise.resolve(c.text("", 401));
      c.set("wallet", wallet);
      return next();
    });
  }
  if (kind === "session-gated") app.use("/premium", gate().hono({ wallet: (c) => c.get("wallet") }));
  const route = (c: Context) => c.json({ ok: true });
  if (kind === "route-gated") app.get("/premium", gate().honoRoute({ wallet: (c) => c.req.header("x-wallet") }, route));
  else app.get("/premium", route);
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
    const kinds = KINDS.map((k) => k.kind);
    const routes = await Promise.all(kinds.map((k) => routeUrl(api, k)));
    const rate = hasWrk ? wrkRate : loopRate;
    // Each round measures them back to back, in a rotating order; the ratios are taken within a round (the
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
    KINDS.forEach(({ label }, i) =>
      console.log(
        `  ${`${label}:`.padEnd(24)}${fmt(median(runs.map((r) => r[i]!)))} req/s, server ${us(i)} µs CPU/request`,
      ),
    );
    const ratio = (a: Kind, b: Kind) => {
      const [i, j] = [kinds.indexOf(a), kinds.indexOf(b)];
      return median(runs.map((r) => r[i]! / r[j]!)).toFixed(3);
    };
    const cpuRatio = median(cpu.map((c) => c[0]! / c[3]!)).toFixed(3);
    console.log(
      `gated / ungated: ${ratio("gated", "open")} (target ≥ 0.8; by server CPU per request ${cpuRatio}); ` +
        `gated by honoRoute / ungated: ${ratio("route-gated", "open")}; ` +
        `gated / header-reading middleware: ${ratio("gated", "header")}; ` +
        `behind the session middleware, gated / ungated: ${ratio("session-gated", "session")}`,
    );
  } finally {
    // The listener only: the app's onStop would unsubscribe from the notifier after the database is gone.
    seeded.app.server?.stop(true);
    await seeded.close();
  }
}

if (process.argv[2] === "--serve") await serveRoute(process.argv[3]!, process.argv[4] as Kind);
else await main();
