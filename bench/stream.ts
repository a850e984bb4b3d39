/**
 * `bun run bench/stream.ts <database url> <checkout> [<checkout>…]`: the whole activity log of the 1M-record merchant
 * of the `bench/api.ts` database (kept with `BENCH_KEEP=1`), downloaded with `curl` to /dev/null from one server per
 * checkout (each its own `bench/api.ts serve` child), the checkouts alternated within each round so the machine's
 * other load falls on all alike. Each line: wall time (curl's time_total), bytes, the server's CPU time and that of
 * its Postgres backends (utime + stime from /proc, backends found by the server's application_name), the server's
 * peak RSS (sampled every 50 ms) and the 1-minute load at the start. With VERIFY=1, first checks that every checkout
 * sends the same bytes (SHA-1 of each download, JSON and CSV). Env: ROUNDS (2), FORMATS (json,csv).
 */
import { spawn } from "bun";
import postgres from "postgres";
import { cpuMicros, loadAverage, rssMb, serveCheckout, type ApiServer } from "./proc";

const url = process.argv[2]!;
const dirs = process.argv.slice(3);
const ROUNDS = Number(process.env.ROUNDS ?? 2);
const FORMATS = (process.env.FORMATS ?? "json,csv").split(",");
const ADMIN_KEY = "bench-admin-key-0123456789abcdef";
const BIG_MERCHANT = "0xe" + "0".repeat(39);

type Server = ApiServer;

const pg = postgres(url, { max: 1, onnotice: () => {} });

/** CPU µs of the Postgres backends of `server` so far (its pool's connections, by application_name). */
async function backendsCpu(server: Server): Promise<number> {
  const rows = await pg<{ pid: number }[]>`
    select pid from pg_stat_activity where application_name = ${`subscription-indexer:${server.pid}`}`;
  let total = 0;
  for (const r of rows) {
    try {
      total += cpuMicros(r.pid);
    } catch {
      // a backend that ended since
    }
  }
  return total;
}

const pathOf = (format: string) => `/v0/activity/${BIG_MERCHANT}${format === "csv" ? "?format=csv" : ""}`;
const curlArgs = (s: Server, format: string) => [
  "curl",
  "-sS",
  "--fail",
  "-H",
  `authorization: Bearer ${ADMIN_KEY}`,
  s.origin + pathOf(format),
];

async function download(s: Server, format: string) {
  const load = loadAverage();
  const cpu0 = cpuMicros(s.pid);
  const pg0 = await backendsCpu(s);
  let peak = rssMb(s.pid);
  const sampler = setInterval(() => (peak = Math.max(peak, rssMb(s.pid))), 50);
  const proc = spawn([...curlArgs(s, format), "-o", "/dev/null", "-w", "%{time_total} %{size_download}"], {
    stdout: "pipe",
  });
  const out = await new Response(proc.stdout).text();
  if ((await proc.exited) !== 0) throw new Error(`curl failed against ${s.name}`);
  clearInterval(sampler);
  const cpu = (cpuMicros(s.pid) - cpu0) / 1e6;
  const pgCpu = ((await backendsCpu(s)) - pg0) / 1e6;
  const [wall, bytes] = out.trim().split(" ").map(Number);
  return { wall: wall!, bytes: bytes!, cpu, pgCpu, peak, load };
}

const servers: Server[] = [];
try {
  for (const d of dirs) servers.push(await serveCheckout(d, url));
  if (process.env.VERIFY === "1") {
    for (const format of FORMATS) {
      const sums: string[] = [];
      for (const s of servers) {
        const sh = spawn(
          [
            "sh",
            "-c",
            `${curlArgs(s, format)
              .map((a) => `'${a}'`)
              .join(" ")} | sha1sum`,
          ],
          {
            stdout: "pipe",
          },
        );
        sums.push((await new Response(sh.stdout).text()).split(" ")[0]!);
      }
      console.log(`${format} sha1: ${sums.join(" ")} ${new Set(sums).size === 1 ? "(equal)" : "DIFFERENT"}`);
    }
  }
  console.log(
    "round format checkout                      wall s   MB     server CPU s  Postgres CPU s  peak RSS MB  load",
  );
  for (let round = 1; round <= ROUNDS; round++) {
    for (const format of FORMATS) {
      // Alternate which checkout goes first from round to round.
      const order = round % 2 === 1 ? servers : [...servers].reverse();
      for (const s of order) {
        const r = await download(s, format);
        console.log(
          `${String(round).padEnd(6)}${format.padEnd(7)}${s.name.padEnd(31)}${r.wall.toFixed(2).padStart(6)}` +
            `${(r.bytes / 1e6).toFixed(0).padStart(6)}${r.cpu.toFixed(2).padStart(15)}${r.pgCpu.toFixed(2).padStart(16)}` +
            `${r.peak.toFixed(0).padStart(13)}${r.load.toFixed(2).padStart(6)}`,
        );
      }
    }
  }
} finally {
  await Promise.all(servers.map((s) => s.stop()));
  await pg.end();
}
