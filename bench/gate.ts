/**
 * `bun run bench/gate.ts`: the gate's overhead. Starts the real API over the seeded test fixture (PGlite, or
 * DATABASE_URL), then measures (1) cached `gate.check` calls per second in-process (target ≥ 1,000,000/s) and (2)
 * the throughput of a Hono route behind `gate.hono()` against the same route ungated (target ≥ 0.8) and behind an
 * empty Hono middleware (what any middleware costs), each served by
 * Bun.serve in a child process, with wrk when installed (2 threads, 64 connections, BENCH_DURATION s, default 5;
 * alternating runs, best of BENCH_ROUNDS, default 2), else an in-process loop of real HTTP requests.
 */
import { spawn, spawnSync } from "bun";
import { Hono } from "hono";
import { createGate } from "../packages/gate/src/index";
import { startSeededApp } from "../testkit/app";
import { MOD, W } from "../testkit/seed";

const DURATION = Number(process.env.BENCH_DURATION ?? 5);
const ROUNDS = Number(process.env.BENCH_ROUNDS ?? 2);
const CHECKS = 5_000_000;

/** The route ungated, behind an empty Hono middleware (the floor of any middleware), and gated. */
type Kind = "open" | "empty" | "gated";

/** Child mode: serves the Hono route (gated or not) on a free port and prints the port. */
async function serveRoute(api: string, kind: Kind) {
  const app = new Hono();
  if (kind === "gated") {
    const gate = createGate({ baseUrl: api, module: MOD.a1, plans: [1] });
    app.use("/premium", gate.hono({ wallet: (c) => c.req.header("x-wallet") }));
  }
  if (kind === "empty") app.use("/premium", (_c, next) => next());
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
  const child = spawn([process.execPath, import.meta.path, "--serve", api, kind], {
    stdout: "pipe",
    stderr: "inherit",
  });
  const reader = child.stdout.getReader();
  const { value } = await reader.read();
  const port = Number(new TextDecoder().decode(value).trim());
  const url = `http://127.0.0.1:${port}/premium`;
  // Warm-up (the gated one fills its cache).
  for (let i = 0; i < 200; i++) await (await fetch(url, { headers: { "x-wallet": W.alice } })).text();
  return { url, stop: () => child.kill() };
}

function wrkRate(url: string): number {
  const out = spawnSync(["wrk", "-t2", "-c64", `-d${DURATION}s`, "-H", `x-wallet: ${W.alice}`, url]);
  const text = new TextDecoder().decode(out.stdout);
  const m = /Requests\/sec:\s+([\d.]+)/.exec(text);
  if (!m) throw new Error(`wrk failed: ${text}${new TextDecoder().decode(out.stderr)}`);
  if (/Non-2xx/.test(text)) throw new Error(`non-2xx answers:\n${text}`);
  return Number(m[1]);
}

async function loopRate(url: string): Promise<number> {
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
  return n / DURATION;
}

async function main() {
  const seeded = await startSeededApp();
  seeded.app.listen({ port: 0, hostname: "127.0.0.1" });
  const api = `http://127.0.0.1:${seeded.app.server!.port}`;
  try {
    const perSecond = await checksPerSecond(api);
    console.log(`cached gate.check: ${Math.round(perSecond).toLocaleString("en")}/s (target ≥ 1,000,000/s)`);

    const hasWrk = spawnSync(["sh", "-c", "command -v wrk"]).exitCode === 0;
    const kinds: Kind[] = ["open", "empty", "gated"];
    const routes = await Promise.all(kinds.map((k) => routeUrl(api, k)));
    const rate = hasWrk ? wrkRate : loopRate;
    const best = [0, 0, 0];
    for (let round = 0; round < ROUNDS; round++) {
      for (const [i, r] of routes.entries()) best[i] = Math.max(best[i]!, await rate(r.url));
    }
    for (const r of routes) r.stop();
    const [open, empty, gated] = best as [number, number, number];
    const fmt = (n: number) => Math.round(n).toLocaleString("en");
    const tool = hasWrk ? "wrk -t2 -c64" : "in-process loop, 64 in flight";
    console.log(`Hono route ungated:                ${fmt(open)} req/s (${tool}, ${DURATION} s, best of ${ROUNDS})`);
    console.log(`Hono route, empty middleware:      ${fmt(empty)} req/s`);
    console.log(`Hono route gated (cached answer):  ${fmt(gated)} req/s`);
    console.log(
      `gated / ungated: ${(gated / open).toFixed(3)} (target ≥ 0.8); gated / empty middleware: ${(gated / empty).toFixed(3)}`,
    );
  } finally {
    await seeded.app.stop(true);
    await seeded.close();
  }
}

if (process.argv[2] === "--serve") await serveRoute(process.argv[3]!, process.argv[4] as Kind);
else await main();
