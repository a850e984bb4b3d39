/** What the benchmarks read of processes and the machine (Linux /proc), and the wrk scripts they share. */
import { readFileSync, writeFileSync } from "node:fs";
import { spawn } from "bun";
import { join } from "node:path";

/** CPU time (user + system) of `pid` so far, in µs; clock ticks are 100 a second. */
export function cpuMicros(pid: number | string): number {
  const fields = readFileSync(`/proc/${pid}/stat`, "utf8").split(") ")[1]!.split(" ");
  return (Number(fields[11]) + Number(fields[12])) * 10_000;
}

/** User and system CPU seconds of `pid` so far. */
export function cpuSplit(pid: number): { user: number; sys: number } {
  const fields = readFileSync(`/proc/${pid}/stat`, "utf8").split(") ")[1]!.split(" ");
  return { user: Number(fields[11]) / 100, sys: Number(fields[12]) / 100 };
}

/** Bytes `pid` wrote through write(2) so far, files and pipes (socket sends are not counted), in MB. */
export function writtenMb(pid: number): number {
  const m = /^wchar: (\d+)$/m.exec(readFileSync(`/proc/${pid}/io`, "utf8"));
  return m ? Number(m[1]) / 1e6 : NaN;
}

/** Resident set size of `pid` in MB (VmRSS), NaN when unreadable. */
export function rssMb(pid: number): number {
  const m = /VmRSS:\s+(\d+) kB/.exec(readFileSync(`/proc/${pid}/status`, "utf8"));
  return m ? Number(m[1]) / 1024 : NaN;
}

/** Peak resident set size of `pid` so far in MB (VmHWM), NaN when unreadable. */
export function peakRssMb(pid: number): number {
  const m = /VmHWM:\s+(\d+) kB/.exec(readFileSync(`/proc/${pid}/status`, "utf8"));
  return m ? Number(m[1]) / 1024 : NaN;
}

/** Busy and total jiffies (100 a second) of every CPU of the machine so far (/proc/stat). */
export function cpuTimes(): { busy: number; total: number } {
  const f = readFileSync("/proc/stat", "utf8").split("\n")[0]!.trim().split(/\s+/).slice(1).map(Number);
  const total = f.reduce((a, b) => a + b, 0);
  return { busy: total - f[3]! - f[4]!, total };
}

/** The machine's 1-minute load average. */
export function loadAverage(): number {
  return Number(readFileSync("/proc/loadavg", "utf8").split(" ")[0]);
}

/** Writes a wrk script whose `request()` builds each path with `pathExpr` (Lua), seeded per thread; returns its path. */
export function wrkScript(dir: string, name: string, pathExpr: string): string {
  const file = join(dir, name);
  writeFileSync(
    file,
    `local counter = 0
function setup(thread)
  counter = counter + 1
  thread:set("id", counter)
end
function init(args)
  math.randomseed(os.time() * 100 + id)
end
request = function()
  return wrk.format("GET", ${pathExpr})
end
`,
  );
  return file;
}

/** Lua for the path of an indexed check of wallet number `wallet` (a Lua expression) on its module, as bench/api.ts seeds them. */
export const checkPathLua = (wallet: string) =>
  `(function() local w = ${wallet} return string.format(` +
  `"/v0/auth/check?module_address=0x%040x&wallet=0x%040x&plan_ids=1,2,3", 1000001 + w % 1000, w) end)()`;

/** A `bench/api.ts serve` server of one checkout over the database at `url`. */
export type ApiServer = { name: string; pid: number; origin: string; stop: () => Promise<void> };

/** Starts `bench/api.ts serve` of checkout `dir` on a free port; resolves once it printed READY. */
export async function serveCheckout(dir: string, url: string): Promise<ApiServer> {
  const probe = Bun.serve({ port: 0, hostname: "127.0.0.1", fetch: () => new Response() });
  const port = probe.port!;
  probe.stop(true);
  const child = spawn(["bun", join(dir, "bench/api.ts"), "serve", url, String(port)], {
    stdout: "pipe",
    stderr: "inherit",
  });
  const reader = (child.stdout as ReadableStream<Uint8Array>).getReader();
  let seen = "";
  while (!seen.includes("READY")) {
    const { value, done } = await reader.read();
    if (done) throw new Error(`the server of ${dir} exited before it was ready`);
    seen += new TextDecoder().decode(value);
  }
  const stop = async () => {
    child.kill();
    await child.exited;
  };
  return { name: dir, pid: child.pid, origin: `http://127.0.0.1:${port}`, stop };
}
