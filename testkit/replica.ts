/**
 * A temporary primary and a streaming replica of it, made with this machine's PostgreSQL binaries (initdb, then
 * `pg_basebackup -R`), on free ports, removed by `stop`. The machine's own server is left alone: its pg_hba.conf
 * has no replication entry, and a test must not change it. As root, the servers run as the `postgres` user.
 */
import { chmodSync, chownSync, mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { spawnSync } from "node:child_process";
import { freePort } from "./cli";

const BIN = "/usr/lib/postgresql/15/bin";

/** A running primary + replica pair. */
export type ReplicaPair = {
  primaryUrl: string;
  replicaUrl: string;
  /** Pauses or resumes WAL replay on the replica (a lagging replica on demand). */
  pauseReplay: () => Promise<void>;
  resumeReplay: () => Promise<void>;
  stop: () => Promise<void>;
};

function run(cmd: string, args: string[]): string {
  const asPostgres = process.getuid?.() === 0;
  const [file, argv] = asPostgres ? ["runuser", ["-u", "postgres", "--", cmd, ...args]] : [cmd, args];
  const r = spawnSync(file, argv, { encoding: "utf8" });
  if (r.status !== 0) throw new Error(`${cmd} ${args.join(" ")} failed: ${r.stderr || r.stdout}`);
  return r.stdout;
}

/** Starts the pair (a few seconds). */
export async function startReplicaPair(): Promise<ReplicaPair> {
  const dir = mkdtempSync(join(tmpdir(), "replica-"));
  chmodSync(dir, 0o755);
  if (process.getuid?.() === 0) {
    const uid = spawnSync("id", ["-u", "postgres"], { encoding: "utf8" }).stdout.trim();
    const gid = spawnSync("id", ["-g", "postgres"], { encoding: "utf8" }).stdout.trim();
    chownSync(dir, Number(uid), Number(gid));
  }
  const primary = join(dir, "primary");
  const replica = join(dir, "replica");
  const [p1, p2] = [await freePort(), await freePort()];
  const started: string[] = [];
  const stop = async () => {
    for (const d of started.reverse()) {
      try {
        run(`${BIN}/pg_ctl`, ["-D", d, "-m", "immediate", "-w", "stop"]);
      } catch {
        // already down
      }
    }
    rmSync(dir, { recursive: true, force: true });
  };
  try {
    run(`${BIN}/initdb`, ["-D", primary, "-U", "postgres", "--auth=trust", "-E", "UTF8"]);
    const conf = `listen_addresses = '127.0.0.1'\nunix_socket_directories = '${dir}'\nwal_level = replica\nmax_wal_senders = 4\nfsync = off\n`;
    run("sh", ["-c", `printf "%s" "${conf}" >> ${primary}/postgresql.conf`]);
    run("sh", ["-c", `echo "host replication all 127.0.0.1/32 trust" >> ${primary}/pg_hba.conf`]);
    run(`${BIN}/pg_ctl`, ["-D", primary, "-o", `-p ${p1}`, "-l", join(dir, "primary.log"), "-w", "start"]);
    started.push(primary);
    run(`${BIN}/pg_basebackup`, [
      "-h",
      "127.0.0.1",
      "-p",
      String(p1),
      "-U",
      "postgres",
      "-D",
      replica,
      "-R",
      "-X",
      "stream",
    ]);
    run(`${BIN}/pg_ctl`, ["-D", replica, "-o", `-p ${p2}`, "-l", join(dir, "replica.log"), "-w", "start"]);
    started.push(replica);
  } catch (err) {
    await stop();
    throw err;
  }
  const psql = (port: number, sqlText: string) =>
    run("psql", ["-h", "127.0.0.1", "-p", String(port), "-U", "postgres", "-Atc", sqlText]);
  return {
    primaryUrl: `postgres://postgres@127.0.0.1:${p1}/postgres`,
    replicaUrl: `postgres://postgres@127.0.0.1:${p2}/postgres`,
    pauseReplay: async () => void psql(p2, "select pg_wal_replay_pause()"),
    resumeReplay: async () => void psql(p2, "select pg_wal_replay_resume()"),
    stop,
  };
}
