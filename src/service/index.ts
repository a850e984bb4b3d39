/**
 * Starts the service from a Config: ROLES picks what runs in this process: `api` (HTTP),
 * `indexer` (one writer per chain, the others wait as standbys) and `keeper` (only with KEEPER_PRIVATE_KEY).
 * SIGTERM/SIGINT stop it gracefully: no new requests, in-flight ones and the current batch finish, exit 0.
 */
import { createWalletClient, defineChain, http } from "viem";
import { privateKeyToAccount } from "viem/accounts";
import { createApp } from "../http/app";
import { controlRoutes } from "../http/features/control";
import { randomSecret } from "../auth/hash";
import { writeControlFile } from "../db/control-file";
import { createChainRegistry, publicClientFor } from "../chain/clients";
import { ConfigError, loadConfig, requireChain, type Config } from "../common/config";
import { createDb, type Db } from "../db/client";
import { migrate } from "../db/migrate";
import { createNotifier, type Notifier } from "../db/notify";
import { createIndexer } from "../indexer";
import { statsRollupsHook } from "../indexer/rollups";
import { createKeeper, type Keeper, type KeeperOptions } from "../keeper";
import { createLogger, type Logger } from "../common/log";

/** The running indexer, as returned by `createIndexer`. */
export type Indexer = ReturnType<typeof createIndexer>;

/** Options for {@link startService}: everything defaults to what `bun start` does. */
export type ServiceOptions = {
  log?: Logger;
  /** An open database to use instead of opening DATABASE_URL / DATA_DIR; `stop` closes it too. */
  db?: Db;
  /** Keeper tuning (tests use short timeouts). */
  keeper?: Partial<Omit<KeeperOptions, "sql" | "client" | "wallet" | "config" | "log">>;
  /** How long `stop` lets in-flight HTTP requests finish before cutting them (default 10 s). */
  drainTimeoutMs?: number;
};

/** A started service. */
export type Service = {
  /** Base URL of the HTTP API (loopback address), or null when the `api` role is off. */
  url: string | null;
  port: number | null;
  roles: string[];
  chainId: number;
  db: Db;
  notifier: Notifier;
  indexer?: Indexer;
  keeper?: Keeper;
  /** Graceful stop: HTTP drained, indexer batch and keeper pass finished, database closed. Idempotent. */
  stop: () => Promise<void>;
};

/** Loopback URL for a bound host: wildcard binds are reached through 127.0.0.1. */
function baseUrl(host: string, port: number): string {
  const h = host === "0.0.0.0" || host === "::" || host === "" ? "127.0.0.1" : host.includes(":") ? `[${host}]` : host;
  return `http://${h}:${port}`;
}

/** Opens the database, migrates it and starts the configured roles. Throws ConfigError on a bad setup. */
export async function startService(config: Config, opts: ServiceOptions = {}): Promise<Service> {
  const log = opts.log ?? createLogger(config.LOG_LEVEL);
  const roles = new Set(config.ROLES);
  const wantsChain = roles.has("indexer") || roles.has("keeper");
  if (wantsChain) requireChain(config);
  const chains = await createChainRegistry(config);
  const chainId = chains.defaultChainId;

  const db = opts.db ?? (await createDb({ url: config.DATABASE_URL, dataDir: config.DATA_DIR }));
  const stoppers: (() => Promise<unknown>)[] = [];
  let stopped: Promise<void> | undefined;
  const stop = () =>
    (stopped ??= (async () => {
      // Reverse start order: the API stops taking requests first, the database closes last.
      for (const s of stoppers.reverse()) {
        try {
          await s();
        } catch (err) {
          log("error", "shutdown step failed", { err });
        }
      }
      await db.close();
      log("info", "service stopped", {});
    })());

  try {
    const applied = await migrate(db.sql);
    if (applied.length) log("info", "migrations applied", { applied });
    const notifier = createNotifier(db);
    const active: string[] = [];
    const service: Service = { url: null, port: null, roles: active, chainId, db, notifier, stop };

    if (roles.has("indexer")) {
      requireChain(config);
      const indexer = createIndexer({
        sql: db.sql,
        db,
        client: chains.get(chainId) ?? publicClientFor(config.RPC_URL, config.RPC_TIMEOUT_MS),
        config: {
          PROCESSOR_ADDRESS: config.PROCESSOR_ADDRESS,
          START_BLOCK: config.START_BLOCK,
          CONFIRMATIONS: config.CONFIRMATIONS,
          POLL_INTERVAL_MS: config.POLL_INTERVAL_MS,
          chainId,
        },
        notifier,
        log,
        hooks: [statsRollupsHook()],
      });
      await indexer.start();
      stoppers.push(() => indexer.stop());
      service.indexer = indexer;
      active.push("indexer");
    }

    if (roles.has("keeper") && config.KEEPER_PRIVATE_KEY) {
      requireChain(config);
      const chain = defineChain({
        id: chainId,
        name: `chain-${chainId}`,
        nativeCurrency: { name: "Ether", symbol: "ETH", decimals: 18 },
        rpcUrls: { default: { http: [config.RPC_URL] } },
      });
      const wallet = createWalletClient({
        account: privateKeyToAccount(config.KEEPER_PRIVATE_KEY as `0x${string}`),
        chain,
        transport: http(config.RPC_URL, { timeout: config.RPC_TIMEOUT_MS, retryCount: 0 }),
      });
      const keeper = createKeeper({
        ...opts.keeper,
        sql: db.sql,
        client: chains.get(chainId) ?? publicClientFor(config.RPC_URL, config.RPC_TIMEOUT_MS),
        wallet,
        config: {
          chainId,
          PROCESSOR_ADDRESS: config.PROCESSOR_ADDRESS,
          POLL_INTERVAL_MS: config.POLL_INTERVAL_MS,
          retrySchedule: config.retrySchedule,
        },
        log,
      });
      await keeper.start();
      stoppers.push(() => keeper.stop());
      service.keeper = keeper;
      active.push("keeper");
    } else if (roles.has("keeper")) {
      log("info", "keeper off: KEEPER_PRIVATE_KEY is not set", {});
    }

    if (roles.has("api")) {
      const app = createApp({ sql: db.sql, config, chains, notifier });
      // The embedded database admits one process: `bun run apikey` then manages keys through this one.
      const controlDir = db.kind === "pglite" ? db.dataDir : undefined;
      const controlToken = controlDir ? randomSecret("ctl_") : null;
      if (controlToken) app.use(controlRoutes({ sql: db.sql, token: controlToken }));
      app.listen({ port: config.PORT, hostname: config.HOST });
      const port = app.server?.port ?? config.PORT;
      if (controlDir && controlToken) {
        const removeControlFile = writeControlFile(controlDir, {
          pid: process.pid,
          url: baseUrl(config.HOST, port),
          token: controlToken,
        });
        stoppers.unshift(async () => removeControlFile());
      }
      const drainMs = opts.drainTimeoutMs ?? 10_000;
      stoppers.push(async () => {
        // Stop accepting; let in-flight requests finish, but not forever.
        const drained = app.stop(false).then(() => true);
        const timedOut = Bun.sleep(drainMs).then(() => false);
        if (!(await Promise.race([drained, timedOut]))) await app.stop(true);
      });
      service.url = baseUrl(config.HOST, port);
      service.port = port;
      active.push("api");
    }

    log("info", "service started", {
      roles: active,
      chainId,
      port: service.port,
      db: db.kind,
      processor: config.PROCESSOR_ADDRESS ?? null,
      keeper: service.keeper?.address ?? null,
    });
    return service;
  } catch (err) {
    await stop().catch(() => {});
    throw err;
  }
}

/**
 * Runs `stop` on the first SIGTERM/SIGINT, then exits 0 (1 if stopping failed). A terminal's Ctrl-C reaches the
 * whole process group and `bun run` forwards it too, so the same signal often arrives twice: only a signal more
 * than 2 s after the first one forces an immediate exit (code 1).
 */
export function exitOnSignals(
  stop: () => Promise<unknown>,
  onSignal: (signal: string) => void = () => {},
  onError: (err: unknown) => void = () => {},
): void {
  let firstAt = 0;
  const handle = (signal: string) => {
    if (firstAt) {
      if (Date.now() - firstAt > 2_000) process.exit(1);
      return;
    }
    firstAt = Date.now();
    onSignal(signal);
    stop().then(
      () => process.exit(0),
      (err) => {
        onError(err);
        process.exit(1);
      },
    );
  };
  process.on("SIGTERM", () => handle("SIGTERM"));
  process.on("SIGINT", () => handle("SIGINT"));
}

/** Message of a start-up error, without stack traces or connection secrets. */
export function startErrorMessage(err: unknown): string {
  if (err instanceof ConfigError) return err.message;
  const e = err as { shortMessage?: string; message?: string; name?: string };
  const text = e?.shortMessage ?? e?.message ?? String(err);
  return `start failed: ${text.replace(/(\/\/[^:/@\s]+:)[^@\s]+@/g, "$1***@")}`;
}
