/**
 * Starts the service from a Config. ROLES picks what runs in this process, in this order: `indexer` (one writer per
 * chain, the others wait as standbys), `keeper` (only with KEEPER_PRIVATE_KEY), `webhooks` (the dispatcher) and `api` (HTTP). Stop runs in reverse:
 * no new requests, in-flight ones and the current batch finish, then the database closes.
 */
import { createChainRegistry, type RpcObserver } from "../chain/clients";
import { budgetSettings, configureBudgets, parseWeights } from "../chain/budget";
import type { Metrics } from "../metrics";
import type { Db } from "../db/client";
import { requireRoleSettings, siweDomainWarning, type Config } from "../common/config";
import { createLogger, maskInLogs, resolveLogFormat } from "../common/log";
import { createDb } from "../db/client";
import { createMaintenance } from "../db/maintenance";
import { migrate } from "../db/migrate";
import { createNotifier } from "../db/notify";
import { secureStoredSecrets } from "../webhooks/secrets";
import type { Role, RoleContext, Service, ServiceOptions } from "./context";
import { apiRole } from "./roles/api";
import { indexerRole } from "./roles/indexer";
import { keeperRole } from "./roles/keeper";
import { webhooksRole } from "./roles/webhooks";
import { openDatabase } from "./database";
import { logStartup } from "./summary";

export type { Service, ServiceOptions } from "./context";

/** How often the embedded database's tables are maintained (no autovacuum runs there). */
const MAINTENANCE_INTERVAL_MS = 5 * 60_000;

/** Every role, in start order. */
const ROLES: Role[] = [indexerRole, keeperRole, webhooksRole, apiRole];

/**
 * The metrics registry and its listener (METRICS_HOST, default 127.0.0.1; never the API's port). Loaded only when
 * METRICS_PORT is set: prom-client adds ~40 ms to every start-up.
 */
async function startMetrics(
  config: Config,
  db: Db,
  service: Service,
  stoppers: (() => Promise<void>)[],
): Promise<Metrics> {
  const { createMetrics, startMetricsListener } = await import("../metrics");
  const poolMax =
    db.kind === "postgres" ? ((db.sql as unknown as { options?: { max?: number } }).options?.max ?? null) : null;
  const metrics = createMetrics({ sql: db.sql, poolMax });
  const listener = startMetricsListener(metrics, config.METRICS_HOST, config.METRICS_PORT!);
  stoppers.push(listener.stop);
  service.metricsUrl = listener.url;
  return metrics;
}

/** Opens the database, migrates it and starts the configured roles. Throws ConfigError on a bad setup. */
export async function startService(config: Config, opts: ServiceOptions = {}): Promise<Service> {
  maskInLogs(config.ADMIN_API_KEY);
  maskInLogs(config.WEBHOOK_SECRET_KEY);
  const log = opts.log ?? createLogger(config.LOG_LEVEL, undefined, resolveLogFormat(config.LOG_FORMAT));
  const wanted = new Set<string>(config.ROLES);
  requireRoleSettings(config);
  const siweWarning = wanted.has("api") ? siweDomainWarning(config) : undefined;
  if (siweWarning) log("warn", siweWarning, {});
  // A stopped service leaves the process's budgets as it found them (a test process starts several services).
  const budgetsBefore = budgetSettings();
  configureBudgets({
    cuPerSecond: config.RPC_CU_PER_SECOND,
    weights: parseWeights(config.RPC_CU_WEIGHTS),
    maxBatch: config.RPC_MAX_BATCH,
  });
  const rpc: { observer?: RpcObserver } = {};
  // Only with metrics do the clients report their calls (no wrapper on the RPC path otherwise).
  // The dispatcher reads no chain: a `ROLES=webhooks` process needs no chain setting.
  const needsDefault = config.ROLES.some((r) => r !== "webhooks");
  const chains = await createChainRegistry(config, config.METRICS_PORT === undefined ? undefined : rpc, {
    needsDefault,
  });
  const chainId = chains.defaultChainId;
  const db = opts.db ?? (await openDatabase(config, log));
  const stoppers: (() => Promise<void>)[] = [async () => configureBudgets(budgetsBefore)];
  let stopped: Promise<void> | undefined;
  const stop = () =>
    (stopped ??= (async () => {
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
    const applied = await migrate(db.sql).catch((err) => {
      throw databaseError(config, err);
    });
    if (applied.length) log("info", "migrations applied", { applied });
    await secureStoredSecrets(db.sql, {
      secretKey: config.WEBHOOK_SECRET_KEY,
      production: config.NODE_ENV === "production",
      log,
    });
    const notifier = createNotifier(db, log);
    const service: Service = {
      url: null,
      port: null,
      roles: [],
      chainId,
      db,
      notifier,
      indexers: new Map(),
      keepers: new Map(),
      spendPermissionKeepers: [],
      stop,
    };
    const metrics = config.METRICS_PORT === undefined ? undefined : await startMetrics(config, db, service, stoppers);
    if (metrics) rpc.observer = metrics.rpc;
    // The replica serves the API's index reads; nothing migrates or writes it.
    const readDb =
      config.DATABASE_READ_URL && wanted.has("api") ? await createDb({ url: config.DATABASE_READ_URL }) : undefined;
    if (readDb) stoppers.push(() => readDb.close());
    const ctx: RoleContext = {
      config,
      opts,
      db,
      readDb,
      notifier,
      chains,
      chainId,
      log,
      service,
      indexerHooks: [],
      metrics,
    };
    // PGlite runs no autovacuum: the process that writes it reclaims dead rows and keeps the statistics itself.
    if (db.kind === "pglite" && config.ROLES.some((r) => r !== "api")) {
      const maintenance = createMaintenance({ sql: db.sql, log, intervalMs: MAINTENANCE_INTERVAL_MS });
      maintenance.start();
      stoppers.push(maintenance.stop);
    }
    for (const role of ROLES) {
      if (!wanted.has(role.name)) continue;
      const stopRole = await role.start(ctx);
      if (!stopRole) continue;
      stoppers.push(stopRole);
      service.roles.push(role.name);
    }
    await logStartup(log, config, chains, service).catch((err) => log("warn", "start-up summary failed", { err }));
    log("info", "service started", {
      roles: service.roles,
      chainId,
      port: service.port,
      db: db.kind,
      processor: config.PROCESSOR_ADDRESS ?? null,
      chains: (chains.indexed ?? []).map((c) => c.chainId),
      keeper: service.keeper?.address ?? null,
      metrics: service.metricsUrl ?? null,
    });
    return service;
  } catch (err) {
    await stop().catch(() => {});
    throw err;
  }
}

/** A first database error at start-up, naming DATABASE_URL (host and port only) when the server is not there. */
function databaseError(config: Config, err: unknown): unknown {
  const code = (err as { code?: string })?.code;
  if (!config.DATABASE_URL || !code || !/^E[A-Z]+$/.test(code) || !URL.canParse(config.DATABASE_URL)) return err;
  const { hostname, port } = new URL(config.DATABASE_URL);
  return new Error(`DATABASE_URL (${hostname}:${port || 5432}) cannot be reached: ${code}`, { cause: err });
}
