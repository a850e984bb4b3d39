/**
 * The indexer as a separate process, for kill -9 / restart and leader-election tests. Configured by env:
 * RPC_URL, PROCESSOR_ADDRESS, START_BLOCK, CHAIN_ID, POLL_INTERVAL_MS, and DATABASE_URL (Postgres) or
 * PGLITE_DIR (a PGlite data directory); optional INITIAL_RANGE / MAX_RANGE / TARGET_LOGS.
 * Prints one JSON line per committed batch ({"batch": toBlock}) and its status every 50 ms ({"status": …}).
 * SIGTERM stops it cleanly.
 */
import { publicClientFor } from "../src/chain/clients";
import { createDb } from "../src/db/client";
import { migrate } from "../src/db/migrate";
import { createIndexer } from "../src/indexer";

const env = process.env;
const print = (obj: unknown) =>
  process.stdout.write(`${JSON.stringify(obj, (_, v) => (typeof v === "bigint" ? v.toString() : v))}\n`);

const db = await createDb(env.DATABASE_URL ? { url: env.DATABASE_URL, max: 4 } : { dataDir: env.PGLITE_DIR! });
await migrate(db.sql);
const num = (v: string | undefined) => (v ? Number(v) : undefined);
const indexer = createIndexer({
  sql: db.sql,
  db,
  client: publicClientFor(env.RPC_URL!),
  config: {
    PROCESSOR_ADDRESS: env.PROCESSOR_ADDRESS!,
    START_BLOCK: Number(env.START_BLOCK ?? 0),
    CONFIRMATIONS: 0,
    POLL_INTERVAL_MS: Number(env.POLL_INTERVAL_MS ?? 50),
    chainId: Number(env.CHAIN_ID),
  },
  tuning: { initialRange: num(env.INITIAL_RANGE), maxRange: num(env.MAX_RANGE), targetLogs: num(env.TARGET_LOGS) },
  log: (level, msg, fields) => {
    if (msg === "indexed batch") print({ batch: String(fields?.toBlock) });
    else if (level !== "debug") print({ log: msg, level, ...fields });
  },
});
await indexer.start();
const timer = setInterval(() => print({ status: indexer.status() }), 50);
process.on("SIGTERM", async () => {
  clearInterval(timer);
  await indexer.stop();
  await db.close();
  print({ stopped: true });
  process.exit(0);
});
