/**
 * The whole service's backfill, as a user runs it, with where its CPU goes: loads a chain state built by the shared
 * side-by-side bench (`gen.ts` of ../shared/bench/indexer-vs-ponder, `state.json` + `state.meta.json`) into anvil,
 * starts `src/main.ts` of each checkout (ROLES=api,indexer, event log on) on a fresh database, and times it from the
 * spawn until `X-Indexed-Block` reports the state's last block. Prints per run: wall and start-up seconds, the
 * service's own CPU, its Postgres backends' CPU (by `application_name`), and the batches' stage times summed
 * (from the `indexed batch` debug lines), and the service's system CPU, file writes (PGlite's data directory) and
 * peak RSS, and the CPU of the whole machine during the run (all its processes: the wall time can be no less than it
 * divided by the cores).
 * Checkouts alternate, so each sees the same machine. `--keep` keeps each Postgres database for a look afterwards.
 *
 * `--prof <dir>` writes a CPU profile of each run's service there (`bun --cpu-prof`, on exit; open it in Chrome's
 * DevTools or speedscope).
 *
 *   bun run bench/backfill.ts --state <dir>/state.json [--db postgres|pglite] [--rounds 2] [--keep] [--prof dir]
 *     [checkout …]
 */
import { resolve } from "node:path";
import postgres from "postgres";
import { cpuMicros, cpuSplit, cpuTimes, loadAverage, peakRssMb, writtenMb } from "./proc";
import { readStateMeta, startStateService } from "./state-service";

const args = process.argv.slice(2);
const opt = (name: string) => {
  const i = args.indexOf(`--${name}`);
  return i >= 0 ? args.splice(i, 2)[1] : undefined;
};
const statePath = resolve(opt("state") ?? "state.json");
const dbKind = opt("db") ?? "postgres";
const rounds = Number(opt("rounds") ?? 2);
const keep = args.includes("--keep") && args.splice(args.indexOf("--keep"), 1).length > 0;
const profDir = opt("prof");
const checkouts = (args.length ? args : ["."]).map((p) => resolve(p));
const meta = readStateMeta(statePath);
const adminUrl = process.env.DATABASE_URL ?? "postgres://postgres@127.0.0.1:5432/postgres";
const admin = postgres(adminUrl, { max: 1, onnotice: () => {} });

/** One backfill of `checkout`; returns its figures. */
async function run(checkout: string) {
  const service = await startStateService({
    statePath,
    meta,
    checkout,
    db: dbKind === "pglite" ? "pglite" : "postgres",
    adminUrl,
    bunArgs: profDir ? ["--cpu-prof", `--cpu-prof-dir=${resolve(profDir)}`] : [],
    env: { LOG_LEVEL: "debug" },
  });
  const started = performance.now();
  const cpu0 = cpuTimes();
  let up = 0;
  try {
    for (;;) {
      if (service.exitCode() !== null)
        throw new Error(`the service exited (${service.exitCode()}); log ${service.logFile}`);
      if (performance.now() - started > 600_000) throw new Error(`no last block within 600 s; log ${service.logFile}`);
      try {
        const res = await fetch(service.checkUrl);
        up ||= (performance.now() - started) / 1000;
        const block = res.headers.get("x-indexed-block");
        await res.arrayBuffer();
        if (block && BigInt(block) >= BigInt(meta.lastBlock)) break;
      } catch {
        // not up yet
      }
      await Bun.sleep(50);
    }
    const wall = (performance.now() - started) / 1000;
    const cpu1 = cpuTimes();
    // Every process of the machine (the service, Postgres, anvil, this poller): the wall time is at least this ÷ cores.
    const machine = (cpu1.busy - cpu0.busy) / 100;
    const own = cpuMicros(service.pid) / 1e6;
    const { sys } = cpuSplit(service.pid);
    const written = writtenMb(service.pid);
    const peakRss = peakRssMb(service.pid);
    let pg = 0;
    if (service.dbUrl) {
      const backends = await admin<{ pid: number }[]>`
        select pid from pg_stat_activity where application_name = ${`subscription-indexer:${service.pid}`}`;
      for (const b of backends) pg += cpuMicros(b.pid) / 1e6;
    }
    return { wall, up, own, sys, written, peakRss, pg, machine };
  } finally {
    const log = await service.stop({ keep });
    const stages: Record<string, number> = {};
    for (const line of log.split("\n")) {
      if (!line.includes('"indexed batch"')) continue;
      for (const [k, v] of Object.entries(JSON.parse(line).stages ?? {})) stages[k] = (stages[k] ?? 0) + Number(v);
    }
    lastStages = stages;
  }
}

let lastStages: Record<string, number> = {};
const cores = navigator.hardwareConcurrency;
console.log(`${meta.counts.total} events in blocks ${meta.startBlock}..${meta.lastBlock}, ${dbKind}, ${rounds} rounds`);
for (let round = 1; round <= rounds; round++) {
  for (const checkout of checkouts) {
    const load = loadAverage();
    const r = await run(checkout);
    const top = Object.entries(lastStages)
      .filter(([k]) => !k.includes("."))
      .sort((a, b) => b[1] - a[1])
      .slice(0, 6)
      .map(([k, v]) => `${k} ${(v / 1000).toFixed(2)}`)
      .join(", ");
    console.log(
      `round ${round} ${checkout}: ${r.wall.toFixed(2)} s (up ${r.up.toFixed(2)} s), service CPU ${r.own.toFixed(2)} s` +
        ` (sys ${r.sys.toFixed(2)} s, wrote ${r.written.toFixed(0)} MB, peak RSS ${r.peakRss.toFixed(0)} MB)` +
        `${dbKind === "postgres" ? `, Postgres CPU ${r.pg.toFixed(2)} s` : ""}, machine CPU ${r.machine.toFixed(2)} s ` +
        `(${((100 * r.machine) / (cores * r.wall)).toFixed(0)} % of ${cores} cores), load ${load}; stage sums (s): ${top}`,
    );
  }
}
await admin.end();
