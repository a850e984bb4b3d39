/**
 * A private PostgreSQL cluster for a test: initdb in a temporary directory, trust auth, a free loopback port,
 * removed by `stop`. Made with the machine's server binaries (found by `pgBinDir`; `scripts/test-deps.sh` installs
 * them where none exist). It never uses the machine's own server nor assumes one on 5432. As root, the server runs
 * as the `postgres` user (initdb refuses root).
 */
import { chmodSync, chownSync, existsSync, mkdtempSync, readdirSync, realpathSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { spawnSync } from "node:child_process";
import { freePort } from "./cli";

const hasServer = (dir: string) => existsSync(join(dir, "initdb")) && existsSync(join(dir, "pg_ctl"));

/** The directory of the PostgreSQL server binaries: `pg_config --bindir`, else `initdb` on the PATH, else the newest `/usr/lib/postgresql/<v>/bin`. */
export function pgBinDir(): string {
  const pgConfig = Bun.which("pg_config");
  if (pgConfig) {
    const r = spawnSync(pgConfig, ["--bindir"], { encoding: "utf8" });
    const dir = r.stdout?.trim();
    if (r.status === 0 && dir && hasServer(dir)) return dir;
  }
  const initdb = Bun.which("initdb");
  if (initdb) {
    const dir = dirname(realpathSync(initdb));
    if (hasServer(dir)) return dir;
  }
  const lib = "/usr/lib/postgresql";
  const versions = existsSync(lib)
    ? readdirSync(lib)
        .filter((v) => /^\d+$/.test(v) && hasServer(join(lib, v, "bin")))
        .sort((a, b) => Number(b) - Number(a))
    : [];
  if (versions[0]) return join(lib, versions[0], "bin");
  throw new Error(
    "no PostgreSQL server binaries (initdb, pg_ctl) found: run `sh scripts/test-deps.sh` to install them",
  );
}

/** Runs a server binary (as `postgres` when root); throws with its output on a non-zero exit. */
export function runPg(cmd: string, args: string[]): string {
  const asPostgres = process.getuid?.() === 0;
  const [file, argv] = asPostgres ? ["runuser", ["-u", "postgres", "--", cmd, ...args]] : [cmd, args];
  const r = spawnSync(file, argv, { encoding: "utf8" });
  if (r.status !== 0) throw new Error(`${cmd} ${args.join(" ")} failed: ${r.stderr || r.stdout || r.error}`);
  return r.stdout;
}

/** A temporary directory the server's user may write to. */
export function clusterDir(prefix: string): string {
  const dir = mkdtempSync(join(tmpdir(), prefix));
  chmodSync(dir, 0o755);
  if (process.getuid?.() === 0) {
    const uid = spawnSync("id", ["-u", "postgres"], { encoding: "utf8" }).stdout.trim();
    const gid = spawnSync("id", ["-g", "postgres"], { encoding: "utf8" }).stdout.trim();
    if (!uid)
      throw new Error("running as root needs a `postgres` user to run the test cluster (Debian's package adds it)");
    chownSync(dir, Number(uid), Number(gid));
  }
  return dir;
}

/** A running private cluster. */
export type PgCluster = {
  /** `postgres://postgres@127.0.0.1:<port>/postgres` (trust auth). */
  url: string;
  port: number;
  /** Its data directory. */
  dataDir: string;
  /** Stops it (immediate) and removes its files; safe to call twice. */
  stop: () => Promise<void>;
};

/** Starts a cluster in `parent` (a `clusterDir`), adding `conf` to postgresql.conf and `hba` to pg_hba.conf. */
export async function startClusterIn(
  parent: string,
  name: string,
  opts: { conf?: string; hba?: string } = {},
): Promise<PgCluster> {
  const bin = pgBinDir();
  const dataDir = join(parent, name);
  const port = await freePort();
  runPg(join(bin, "initdb"), ["-D", dataDir, "-U", "postgres", "--auth=trust", "-E", "UTF8", "--no-sync"]);
  const conf = `listen_addresses = '127.0.0.1'\nport = ${port}\nunix_socket_directories = '${parent}'\nfsync = off\n${opts.conf ?? ""}`;
  runPg("sh", ["-c", `printf '%s' "$1" >> "$2/postgresql.conf"`, "sh", conf, dataDir]);
  if (opts.hba) runPg("sh", ["-c", `printf '%s\\n' "$1" >> "$2/pg_hba.conf"`, "sh", opts.hba, dataDir]);
  runPg(join(bin, "pg_ctl"), ["-D", dataDir, "-l", join(parent, `${name}.log`), "-w", "start"]);
  let running = true;
  return {
    url: `postgres://postgres@127.0.0.1:${port}/postgres`,
    port,
    dataDir,
    stop: async () => {
      if (!running) return;
      running = false;
      try {
        runPg(join(bin, "pg_ctl"), ["-D", dataDir, "-m", "immediate", "-w", "stop"]);
      } catch {
        // already down
      }
    },
  };
}

/** Starts a private cluster of its own; `stop` also removes its directory. */
export async function startPgCluster(opts: { conf?: string; hba?: string } = {}): Promise<PgCluster> {
  const parent = clusterDir("pg-cluster-");
  try {
    const cluster = await startClusterIn(parent, "data", opts);
    return {
      ...cluster,
      stop: async () => {
        await cluster.stop();
        rmSync(parent, { recursive: true, force: true });
      },
    };
  } catch (err) {
    rmSync(parent, { recursive: true, force: true });
    throw err;
  }
}
