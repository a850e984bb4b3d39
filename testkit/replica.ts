/**
 * A temporary primary and a streaming replica of it, made with this machine's PostgreSQL binaries (a private
 * cluster from `pg-cluster.ts`, then `pg_basebackup -R`), on free ports, removed by `stop`. The machine's own server
 * is left alone: its pg_hba.conf has no replication entry, and a test must not change it.
 */
import { rmSync } from "node:fs";
import { join } from "node:path";
import postgres from "postgres";
import { freePort } from "./cli";
import { clusterDir, pgBinDir, runPg, startClusterIn, type PgCluster } from "./pg-cluster";

/** A running primary + replica pair. */
export type ReplicaPair = {
  primaryUrl: string;
  replicaUrl: string;
  /** Pauses or resumes WAL replay on the replica (a lagging replica on demand). */
  pauseReplay: () => Promise<void>;
  resumeReplay: () => Promise<void>;
  stop: () => Promise<void>;
};

/** Starts the pair (a few seconds). */
export async function startReplicaPair(): Promise<ReplicaPair> {
  const bin = pgBinDir();
  const dir = clusterDir("replica-");
  const replica = join(dir, "replica");
  let primary: PgCluster | undefined;
  let replicaUp = false;
  const stop = async () => {
    if (replicaUp) {
      replicaUp = false;
      try {
        runPg(join(bin, "pg_ctl"), ["-D", replica, "-m", "immediate", "-w", "stop"]);
      } catch {
        // already down
      }
    }
    await primary?.stop();
    rmSync(dir, { recursive: true, force: true });
  };
  let p2 = 0;
  try {
    primary = await startClusterIn(dir, "primary", {
      conf: "wal_level = replica\nmax_wal_senders = 4\n",
      hba: "host replication all 127.0.0.1/32 trust",
    });
    const basebackup = ["-h", "127.0.0.1", "-p", String(primary.port), "-U", "postgres", "-D", replica];
    runPg(join(bin, "pg_basebackup"), [...basebackup, "-R", "-X", "stream"]);
    p2 = await freePort();
    runPg(join(bin, "pg_ctl"), ["-D", replica, "-o", `-p ${p2}`, "-l", join(dir, "replica.log"), "-w", "start"]);
    replicaUp = true;
  } catch (err) {
    await stop();
    throw err;
  }
  const replicaUrl = `postgres://postgres@127.0.0.1:${p2}/postgres`;
  const onReplica = async (query: string) => {
    const sql = postgres(replicaUrl, { max: 1, onnotice: () => {} });
    try {
      await sql.unsafe(query);
    } finally {
      await sql.end();
    }
  };
  return {
    primaryUrl: primary.url,
    replicaUrl,
    pauseReplay: () => onReplica("select pg_wal_replay_pause()"),
    resumeReplay: () => onReplica("select pg_wal_replay_resume()"),
    stop,
  };
}
