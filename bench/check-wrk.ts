/**
 * `bun run bench/check-wrk.ts <database url> <checkout> [<checkout>…]`: throughput of the hot indexed authorization
 * check against `/healthz` over HTTP with wrk (64 connections, 2 threads), for one or more checkouts of this
 * repository served side by side (each by its own `bench/api.ts serve` child on the `bench/api.ts` database kept with
 * `BENCH_KEEP=1`) and alternated round by round, so the machine's other load falls on every checkout alike. Each
 * line reports requests/s and the server's CPU time per request (utime + stime from /proc/<pid>/stat). The hot set is
 * the 1,000 first wallets, as in bench/api.ts. Env: ROUNDS (3), SECONDS (5 per line), CONNECTIONS (64).
 */
import { spawn } from "bun";
import { mkdtempSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { checkPathLua, cpuMicros, loadAverage, serveCheckout, wrkScript, type ApiServer } from "./proc";

const url = process.argv[2]!;
const dirs = process.argv.slice(3);
const ROUNDS = Number(process.env.ROUNDS ?? 3);
const SECONDS = process.env.SECONDS ?? "5";
const CONNECTIONS = process.env.CONNECTIONS ?? "64";

const dir = mkdtempSync(join(tmpdir(), "check-wrk-"));
const hotScript = wrkScript(dir, "hot.lua", checkPathLua("math.random(0, 999)"));

type Server = ApiServer;
const servers: Server[] = [];
for (const d of dirs) servers.push({ ...(await serveCheckout(d, url)), name: d.split("/").pop()! });

async function wrk(s: Server, path: string | null, seconds = SECONDS) {
  const args = ["wrk", "-t", "2", "-c", CONNECTIONS, "-d", `${seconds}s`];
  if (path === null) args.push("-s", hotScript, s.origin);
  else args.push(s.origin + path);
  const c0 = cpuMicros(s.pid);
  const out = await new Response(spawn(args, { stdout: "pipe" }).stdout).text();
  const cpu = cpuMicros(s.pid) - c0;
  const requests = Number(/(\d+) requests in/.exec(out)?.[1] ?? 0);
  const rps = Number(/Requests\/sec:\s+([\d.]+)/.exec(out)?.[1] ?? 0);
  if (/Non-2xx/.test(out)) throw new Error(`non-2xx answers from ${s.name}:\n${out}`);
  return { rps, cpuPerRequest: cpu / requests };
}

try {
  for (const s of servers) await wrk(s, null, "3"); // warm-up: JIT, statements, the hot entries
  const ratios: Record<string, number[]> = {};
  for (let r = 0; r < ROUNDS; r++) {
    for (const s of servers) {
      const load = loadAverage();
      const h = await wrk(s, "/healthz");
      const c = await wrk(s, null);
      (ratios[s.name] ??= []).push(c.rps / h.rps);
      console.log(
        `round ${r} ${s.name} (load ${load}): healthz ${h.rps.toFixed(0)} req/s ${h.cpuPerRequest.toFixed(1)} µs CPU/req, ` +
          `hot check ${c.rps.toFixed(0)} req/s ${c.cpuPerRequest.toFixed(1)} µs CPU/req, ratio ${(c.rps / h.rps).toFixed(2)}`,
      );
    }
  }
  for (const [name, xs] of Object.entries(ratios)) {
    const sorted = [...xs].sort((a, b) => a - b);
    console.log(
      `${name}: hot ÷ /healthz throughput ${xs.map((x) => x.toFixed(2)).join(", ")} (median ${sorted[Math.floor(xs.length / 2)]!.toFixed(2)})`,
    );
  }
} finally {
  await Promise.all(servers.map((s) => s.stop()));
}
process.exit(0);
