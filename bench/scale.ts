/**
 * Scale benchmark: the whole service (`bun start` with ROLES=api,indexer) backfills saved chains of different sizes
 * (states built by the shared side-by-side bench's `gen.ts`, e.g. `--events 50000` and `--events 500000 --subscribers
 * 18400`), runs alternating between them, each on a fresh database (Postgres via DATABASE_URL, or `--db pglite`).
 * Per run it prints: events, seconds from the spawn until `X-Indexed-Block` reports the state's last block, seconds
 * per 100,000 events, the service process's peak RSS (VmRSS sampled every 100 ms from /proc, and the kernel's
 * high-water mark VmHWM, through the idle phase), and the latency of `GET /v0/auth/check` for the state's paid-up
 * sample, sent at a fixed rate from the spawn on: p50/p95 of the answers given while the index was behind the head
 * ("during the backfill"), then, once the service is idle (its CPU below 5 % over half a second), 200 checks at the same
 * rate ("idle"). Afterwards every merchant's activity list must hold the chain's activity events.
 * Then the medians per state, and each state's time per event against the first state's.
 *
 *   bun run bench/scale.ts --state <dir>/state.json [--state <dir>/state-500k.json …] [--db postgres|pglite]
 *     [--rounds 3] [--rate 20] [--trace] [--split]
 *
 * `--split` (Postgres) runs the service as two processes on one database, `ROLES=indexer` and `ROLES=api` (the API's
 * process answers the checks; the indexer's is the one whose time, CPU and RSS are given, the API's peak RSS beside).
 * `--trace` prints RSS and the indexed block every 5 s of each run.
 */
import { resolve } from "node:path";
import { cpuMicros, loadAverage, peakRssMb, rssMb } from "./proc";
import { BENCH_ADMIN_KEY, readStateMeta, startStateService, type StateMeta } from "./state-service";

const args = process.argv.slice(2);
const opt = (name: string) => {
  const i = args.indexOf(`--${name}`);
  return i >= 0 ? args[i + 1] : undefined;
};
const statePaths = args.flatMap((a, i) => (a === "--state" && args[i + 1] ? [resolve(args[i + 1]!)] : []));
if (!statePaths.length) {
  console.error(
    "usage: bun run bench/scale.ts --state <dir>/state.json [--state …] [--db postgres|pglite] [--rounds 3]",
  );
  process.exit(2);
}
const dbKind = opt("db") === "pglite" ? "pglite" : "postgres";
const rounds = Number(opt("rounds") ?? 3);
const rate = Number(opt("rate") ?? 20);
const trace = args.includes("--trace");
const split = args.includes("--split");
const periodMs = 1000 / rate;
/** Checks answered in the idle phase. */
const IDLE_SAMPLES = 200;
const checkout = resolve(import.meta.dir, "..");

type Sample = { ms: number; status: number; block: bigint | null };

const pct = (xs: number[], p: number) => {
  if (!xs.length) return NaN;
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.min(s.length - 1, Math.floor((p / 100) * s.length))]!;
};
const median = (xs: number[]) => {
  const s = [...xs].sort((a, b) => a - b);
  const m = s.length >> 1;
  return s.length % 2 ? s[m]! : (s[m - 1]! + s[m]!) / 2;
};
const fmt = (n: number, d = 2) => n.toFixed(d);

/**
 * Sends a check every `periodMs` (at most 4 in flight: a tick with 4 pending is skipped and counted) until stopped;
 * `onAnswer` sees every answer. Requests the service refuses to connect (not up yet) are not samples.
 */
function prober(url: string, onAnswer: (s: Sample) => void) {
  let stopping = false;
  let inFlight = 0;
  let skipped = 0;
  let failed = 0;
  const pending = new Set<Promise<void>>();
  const one = async () => {
    const t = performance.now();
    try {
      const res = await fetch(url, { signal: AbortSignal.timeout(10_000) });
      await res.arrayBuffer();
      const h = res.headers.get("x-indexed-block");
      onAnswer({ ms: performance.now() - t, status: res.status, block: h ? BigInt(h) : null });
    } catch (err) {
      if (!String(err).includes("Unable to connect")) failed++;
    }
  };
  const loop = (async () => {
    let next = performance.now();
    while (!stopping) {
      if (inFlight >= 4) skipped++;
      else {
        inFlight++;
        const p = one().finally(() => {
          inFlight--;
          pending.delete(p);
        });
        pending.add(p);
      }
      next += periodMs;
      await Bun.sleep(Math.max(0, next - performance.now()));
    }
  })();
  return {
    stop: async () => {
      stopping = true;
      await loop;
      await Promise.all(pending);
      return { skipped, failed };
    },
  };
}

/** Waits until the process `pid` used under 5 % of a core over half a second (at most `maxMs`); returns the wait. */
async function quiet(pid: number, maxMs = 60_000): Promise<number> {
  const t0 = performance.now();
  let last = cpuMicros(pid);
  while (performance.now() - t0 < maxMs) {
    await Bun.sleep(500);
    const now = cpuMicros(pid);
    if (now - last < 25_000) break;
    last = now;
  }
  return (performance.now() - t0) / 1000;
}

/** Rows of every merchant's activity list (CSV, through the API with the admin key). */
async function activityRows(origin: string, meta: StateMeta): Promise<number> {
  let total = 0;
  for (const merchant of new Set(meta.modules.map((m) => m.merchant.toLowerCase()))) {
    const res = await fetch(`${origin}/v0/activity/${merchant}?format=csv`, {
      headers: { authorization: `Bearer ${BENCH_ADMIN_KEY}` },
    });
    if (!res.ok) throw new Error(`GET /v0/activity/${merchant} answered ${res.status}`);
    let lines = 0;
    for await (const chunk of res.body!) for (const b of chunk as Uint8Array) if (b === 10) lines++;
    total += lines - 1; // the header line
  }
  return total;
}

type Run = {
  events: number;
  seconds: number;
  up: number;
  per100k: number;
  cpu: number;
  peakSampled: number;
  hwm: number;
  rssIdle: number;
  /** With --split: the API process's peak RSS (VmHWM). */
  apiHwm: number | null;
  during: number[];
  idle: number[];
  other: Record<number, number>;
  settle: number;
  load: number;
  skipped: number;
  failed: number;
};

async function run(statePath: string, meta: StateMeta): Promise<Run> {
  const load = loadAverage();
  const service = await startStateService({ statePath, meta, checkout, db: dbKind, split, env: { LOG_LEVEL: "info" } });
  const t0 = performance.now();
  const last = BigInt(meta.lastBlock);
  let peakSampled = 0;
  let indexed = -1n;
  let up = 0;
  let headAt = 0;
  const during: number[] = [];
  const idle: number[] = [];
  const other: Record<number, number> = {};
  let phase: "backfill" | "settle" | "idle" = "backfill";
  const head = Promise.withResolvers<void>();
  const sampler = setInterval(() => {
    try {
      peakSampled = Math.max(peakSampled, rssMb(service.pid));
    } catch {
      // exited
    }
  }, 100);
  const tracer = trace
    ? setInterval(() => {
        const at = (performance.now() - t0) / 1000;
        console.log(`  ${fmt(at, 0)} s: RSS ${fmt(rssMb(service.pid), 0)} MB, indexed block ${indexed} / ${last}`);
      }, 5_000)
    : undefined;
  try {
    const probe = prober(service.checkUrl, (s) => {
      up ||= (performance.now() - t0) / 1000;
      if (s.block !== null && s.block > indexed) indexed = s.block;
      if (s.status !== 200) {
        other[s.status] = (other[s.status] ?? 0) + 1;
      } else if (phase === "backfill" && (s.block === null || s.block < last)) during.push(s.ms);
      else if (phase === "idle") idle.push(s.ms);
      if (indexed >= last && !headAt) {
        headAt = (performance.now() - t0) / 1000;
        head.resolve();
      }
    });
    const exited = (async () => {
      while (service.exitCode() === null && !headAt) await Bun.sleep(200);
      if (!headAt) throw new Error(`the service exited (${service.exitCode()}); log ${service.logFile}`);
    })();
    await Promise.race([head.promise, exited]);
    const seconds = headAt;
    phase = "settle";
    const settle = await quiet(service.pid);
    phase = "idle";
    while (idle.length < IDLE_SAMPLES && service.exitCode() === null) await Bun.sleep(periodMs);
    phase = "settle";
    const { skipped, failed } = await probe.stop();
    const cpu = cpuMicros(service.pid) / 1e6;
    const hwm = peakRssMb(service.pid);
    const rssIdle = rssMb(service.pid);
    const apiHwm = service.apiPid ? peakRssMb(service.apiPid) : null;
    const rows = await activityRows(service.origin, meta);
    if (rows !== meta.counts.activity) {
      throw new Error(`the service lists ${rows} activity records, the chain has ${meta.counts.activity}`);
    }
    const events = meta.counts.total;
    return {
      events,
      seconds,
      up,
      per100k: (seconds / events) * 100_000,
      cpu,
      peakSampled,
      hwm,
      rssIdle,
      apiHwm,
      during,
      idle,
      other,
      settle,
      load,
      skipped,
      failed,
    };
  } finally {
    clearInterval(sampler);
    if (tracer) clearInterval(tracer);
    await service.stop();
  }
}

const metas = statePaths.map((p) => readStateMeta(p));
const results: Run[][] = statePaths.map(() => []);
console.log(
  `${dbKind}${split ? " (split: ROLES=indexer and ROLES=api processes)" : ""}, ${rounds} rounds, checks at ${rate}/s; states: ` +
    statePaths.map((p, i) => `${p} (${metas[i]!.counts.total} events)`).join(", "),
);
for (let round = 1; round <= rounds; round++) {
  for (let i = 0; i < statePaths.length; i++) {
    const r = await run(statePaths[i]!, metas[i]!);
    results[i]!.push(r);
    const others = Object.entries(r.other)
      .map(([k, v]) => `${v}×${k}`)
      .join(" ");
    console.log(
      `round ${round} ${r.events} events: ${fmt(r.seconds)} s (up ${fmt(r.up)} s), ${fmt(r.per100k)} s per 100k events, ` +
        `service CPU ${fmt(r.cpu, 1)} s, peak RSS ${fmt(r.hwm, 0)} MB (VmHWM; sampled max ${fmt(r.peakSampled, 0)}, ` +
        `idle ${fmt(r.rssIdle, 0)})${r.apiHwm === null ? "" : `, API process peak RSS ${fmt(r.apiHwm, 0)} MB`}; check p50/p95 during backfill ${fmt(pct(r.during, 50))}/${fmt(pct(r.during, 95))} ms ` +
        `(n ${r.during.length}), idle ${fmt(pct(r.idle, 50))}/${fmt(pct(r.idle, 95))} ms (n ${r.idle.length}, after ` +
        `${fmt(r.settle, 1)} s to settle)${others ? `, other answers ${others}` : ""}` +
        `${r.skipped || r.failed ? `, ${r.skipped} ticks skipped, ${r.failed} failed` : ""}; load ${r.load}`,
    );
  }
}
console.log(`\nmedians of ${rounds} runs (${dbKind}):`);
const base = median(results[0]!.map((r) => r.per100k));
for (let i = 0; i < statePaths.length; i++) {
  const rs = results[i]!;
  const per100k = median(rs.map((r) => r.per100k));
  const p50During = median(rs.map((r) => pct(r.during, 50)));
  const p50Idle = median(rs.map((r) => pct(r.idle, 50)));
  console.log(
    `${metas[i]!.counts.total} events: ${fmt(median(rs.map((r) => r.seconds)))} s, ${fmt(per100k)} s per 100k events ` +
      `(${fmt(per100k / base)} × the first state's), peak RSS ${fmt(median(rs.map((r) => r.hwm)), 0)} MB, check p50 ` +
      `${fmt(p50During)} ms during the backfill / ${fmt(p50Idle)} ms idle = ${fmt(p50During / p50Idle)} ×, p95 ` +
      `${fmt(median(rs.map((r) => pct(r.during, 95))))} / ${fmt(median(rs.map((r) => pct(r.idle, 95))))} ms; ` +
      `loads ${rs.map((r) => r.load).join(", ")}`,
  );
}
