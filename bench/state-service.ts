/**
 * The whole service over a saved chain, as the whole-service benches run it: a chain state built by the shared
 * side-by-side bench (`gen.ts` of indexer-vs-ponder: `state.json` + `state.meta.json`) loaded into a fresh anvil,
 * and `src/main.ts` of a checkout started through its launcher (as `bun start`), ROLES=api,indexer, on a fresh
 * Postgres database (DATABASE_URL names the server) or PGlite in a temporary data directory.
 */
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import postgres from "postgres";
import { startAnvil } from "../src/chain/anvil";

/** What gen.ts writes beside a state (the fields the benches read). */
export type StateMeta = {
  chainId: number;
  processor: string;
  startBlock: string;
  lastBlock: string;
  modules: { merchant: string; address: string }[];
  counts: { total: number; activity: number; byEvent: Record<string, number> };
  /** A paid-up subscription at the last block. */
  sample: { module: string; wallet: string; planId: number; subscriptionId: string };
};

/** The metadata beside `statePath` (`x.json` → `x.meta.json`). */
export function readStateMeta(statePath: string): StateMeta {
  return JSON.parse(readFileSync(resolve(statePath).replace(/(\.json)?$/, ".meta.json"), "utf8")) as StateMeta;
}

/** The admin key the benches give the service (it reads every merchant's lists). */
export const BENCH_ADMIN_KEY = "bench-admin-key-0123456789abcdef";

/** A running service over a loaded state. */
export type StateService = {
  /** The process that indexes (with `split`, the `ROLES=indexer` one). */
  pid: number;
  /** With `split`: the `ROLES=api` process that answers the HTTP API. */
  apiPid?: number;
  origin: string;
  /** `GET /v0/auth/check` of the meta's paid-up sample (public, mode indexed). */
  checkUrl: string;
  /** The Postgres database's URL (undefined on PGlite). */
  dbUrl?: string;
  dbName?: string;
  exitCode: () => number | null;
  logFile: string;
  /** Stops the service and anvil, drops the database (unless `keep`), removes the data directory; returns the log. */
  stop: (opts?: { keep?: boolean }) => Promise<string>;
};

/** Loads `statePath` into anvil and starts the service of `checkout` over it; returns once spawned (not yet up). */
export async function startStateService(opts: {
  statePath: string;
  meta: StateMeta;
  checkout: string;
  db: "postgres" | "pglite";
  /** The Postgres server's URL for `create database` (default DATABASE_URL or the local server). */
  adminUrl?: string;
  /** Bun options before `run` (e.g. `--cpu-prof`). */
  bunArgs?: string[];
  /** Two processes on the same Postgres database, `ROLES=indexer` and `ROLES=api`, instead of one with both. */
  split?: boolean;
  env?: Record<string, string>;
}): Promise<StateService> {
  const { meta } = opts;
  const adminUrl = opts.adminUrl ?? process.env.DATABASE_URL ?? "postgres://postgres@127.0.0.1:5432/postgres";
  const anvil = await startAnvil({
    args: ["--load-state", resolve(opts.statePath), "--chain-id", String(meta.chainId)],
  });
  const dataDir = mkdtempSync(join(tmpdir(), "bench-state-service-"));
  const logFile = join(dataDir, "service.log");
  let dbUrl: string | undefined;
  let dbName: string | undefined;
  if (opts.db === "postgres") {
    dbName = `bench_state_${Date.now().toString(36)}`;
    const admin = postgres(adminUrl, { max: 1, onnotice: () => {} });
    await admin.unsafe(`create database ${dbName}`);
    await admin.end();
    const u = new URL(adminUrl);
    u.pathname = `/${dbName}`;
    dbUrl = u.toString();
  }
  const port = 20_000 + Math.floor(Math.random() * 20_000);
  const env: Record<string, string | undefined> = {
    ...process.env,
    DATABASE_URL: dbUrl,
    DATA_DIR: join(dataDir, "data"),
    RPC_URL: anvil.rpcUrl,
    PROCESSOR_ADDRESS: meta.processor,
    START_BLOCK: String(meta.startBlock),
    CHAIN_ID: String(meta.chainId),
    CONFIRMATIONS: "0",
    POLL_INTERVAL_MS: "200",
    PORT: String(port),
    HOST: "127.0.0.1",
    SIWE_DOMAIN: "localhost",
    ADMIN_API_KEY: BENCH_ADMIN_KEY,
    ...opts.env,
  };
  if (!dbUrl) delete env.DATABASE_URL;
  if (opts.split && opts.db !== "postgres") throw new Error("split roles need Postgres (PGlite is one process's)");
  // As `bun start` runs it: through the checkout's launcher (its environment included), which execs bun.
  const spawn = (roles: string, file: string) =>
    Bun.spawn(["sh", "scripts/bun.sh", ...(opts.bunArgs ?? []), "run", "src/main.ts"], {
      cwd: opts.checkout,
      env: { ...env, ROLES: opts.env?.ROLES ?? roles },
      stdout: Bun.file(file),
      stderr: "ignore",
    });
  const child = spawn(opts.split ? "indexer" : "api,indexer", logFile);
  const api = opts.split ? spawn("api", join(dataDir, "api.log")) : undefined;
  const children = api ? [child, api] : [child];
  const s = meta.sample;
  const origin = `http://127.0.0.1:${port}`;
  return {
    pid: child.pid,
    apiPid: api?.pid,
    origin,
    checkUrl: `${origin}/v0/auth/check?module_address=${s.module.toLowerCase()}&wallet=${s.wallet.toLowerCase()}&plan_ids=${s.planId}`,
    dbUrl,
    dbName,
    exitCode: () => children.find((c) => c.exitCode !== null)?.exitCode ?? null,
    logFile,
    stop: async ({ keep = false } = {}) => {
      // A process that exited on its own (a crash) leaves its log and data directory for a look.
      const crashed = children.some((c) => c.exitCode !== null && c.exitCode !== 0);
      for (const c of children) c.kill("SIGTERM");
      await Promise.all(children.map((c) => c.exited));
      await anvil.stop();
      if (dbName && keep) console.log(`kept database ${dbName}`);
      else if (dbName) {
        const admin = postgres(adminUrl, { max: 1, onnotice: () => {} });
        await admin.unsafe(`drop database if exists ${dbName} with (force)`);
        await admin.end();
      }
      const log = readFileSync(logFile, "utf8");
      if (crashed) console.error(`a service process exited on its own: kept its log and data in ${dataDir}`);
      else rmSync(dataDir, { recursive: true, force: true });
      return log;
    },
  };
}
