/**
 * The indexer as a separate process, for kill -9 / restart and leader-election tests. Configured by env:
 * RPC_URL, PROCESSOR_ADDRESS, START_BLOCK, CHAIN_ID, POLL_INTERVAL_MS, and DATABASE_URL (Postgres) or
 * PGLITE_DIR (a PGlite data directory); optional INITIAL_RANGE / MAX_RANGE / TARGET_LOGS. With WEBHOOKS=1 it
 * runs as the service's indexer and webhooks roles do: the event log and the fan-out outbox in each batch, and a dispatcher
 * (fast retries, private destinations allowed). SPEND_PERMISSION_MANAGER with SPEND_PERMISSION_SPENDERS (comma-separated),
 * and optionally SPEND_PERMISSION_START_BLOCK / _GRACE_S and ENTRYPOINT_ADDRESSES, indexes Spend Permissions too (an
 * empty PROCESSOR_ADDRESS: only them); EVENTS=1 writes the event log (with the permissions' events) in each batch.
 * Prints one JSON line per committed batch ({"batch": toBlock}) and its status every 50 ms ({"status": …}, with
 * `pending` deliveries and outbox ranges under WEBHOOKS=1).
 * SIGTERM stops it cleanly.
 */
import { publicClientFor } from "../src/chain/clients";
import { createDb } from "../src/db/client";
import { migrate } from "../src/db/migrate";
import { createIndexer } from "../src/indexer";
import { statsRollupsHook } from "../src/indexer/rollups";
import { eventsHook } from "../src/events/hook";
import { withPermissionEvents } from "../src/events/spend-permission-events";
import { enqueueFanOut } from "../src/webhooks/fanout";
import { createDispatcher } from "../src/webhooks/dispatcher";
import { undelivered } from "./webhooks";

const env = process.env;
const print = (obj: unknown) =>
  process.stdout.write(`${JSON.stringify(obj, (_, v) => (typeof v === "bigint" ? v.toString() : v))}\n`);

const db = await createDb(env.DATABASE_URL ? { url: env.DATABASE_URL, max: 4 } : { dataDir: env.PGLITE_DIR! });
await migrate(db.sql);
const num = (v: string | undefined) => (v ? Number(v) : undefined);
const spendPermissions = env.SPEND_PERMISSION_MANAGER
  ? {
      manager: env.SPEND_PERMISSION_MANAGER.toLowerCase(),
      spenders: env.SPEND_PERMISSION_SPENDERS!.toLowerCase().split(",").sort(),
      startBlock: Number(env.SPEND_PERMISSION_START_BLOCK ?? env.START_BLOCK ?? 0),
      graceS: Number(env.SPEND_PERMISSION_GRACE_S ?? 86400),
      entryPoints: (env.ENTRYPOINT_ADDRESSES ?? "").toLowerCase().split(",").filter(Boolean),
    }
  : undefined;
const extra = spendPermissions ? withPermissionEvents() : undefined;
const indexer = createIndexer({
  sql: db.sql,
  db,
  client: publicClientFor(env.RPC_URL!),
  config: {
    PROCESSOR_ADDRESS: env.PROCESSOR_ADDRESS || undefined,
    START_BLOCK: Number(env.START_BLOCK ?? 0),
    CONFIRMATIONS: 0,
    POLL_INTERVAL_MS: Number(env.POLL_INTERVAL_MS ?? 50),
    chainId: Number(env.CHAIN_ID),
    spendPermissions,
  },
  hooks:
    env.WEBHOOKS === "1"
      ? [statsRollupsHook(), eventsHook({ onEvents: enqueueFanOut, extra })]
      : env.EVENTS === "1"
        ? [eventsHook({ extra })]
        : [],
  tuning: { initialRange: num(env.INITIAL_RANGE), maxRange: num(env.MAX_RANGE), targetLogs: num(env.TARGET_LOGS) },
  log: (level, msg, fields) => {
    if (msg === "indexed batch") print({ batch: String(fields?.toBlock) });
    else if (level !== "debug") print({ log: msg, level, ...fields });
  },
});
const dispatcher =
  env.WEBHOOKS === "1"
    ? createDispatcher({
        sql: db.sql,
        log: () => {},
        config: {
          timeoutMs: 2000,
          retrySchedule: [0.2, 0.5, 1, 1, 1],
          disableAfterS: 3600,
          perEndpoint: 4,
          concurrency: 16,
          pollIntervalMs: 50,
          allowPrivate: true,
          secretKey: undefined,
        },
      })
    : undefined;
await indexer.start();
await dispatcher?.start();
const pending = async () => (dispatcher ? await undelivered(db.sql) : undefined);
const timer = setInterval(async () => print({ status: { ...indexer.status(), pending: await pending() } }), 50);
process.on("SIGTERM", async () => {
  clearInterval(timer);
  await dispatcher?.stop();
  await indexer.stop();
  await db.close();
  print({ stopped: true });
  process.exit(0);
});
