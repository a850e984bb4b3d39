/** `bun start`: the service from the environment (roles from ROLES); wiring lives in `service/`. */
import { loadConfig, requireRoleSettings, type Config } from "./common/config";
import { createLogger, resolveLogFormat, type Logger } from "./common/log";
import { migrate } from "./db/migrate";
import type { Service } from "./service";
import { openDatabase } from "./service/database";
import { exitOnSignals, startErrorMessage } from "./service/process";

/**
 * Opens the database and starts the service. The server applies a fresh database's migrations while this process
 * loads the service's modules (the HTTP app, viem), instead of one after the other; `startService` then finds them
 * applied, or applies them itself and reports why they fail.
 */
async function start(config: Config, log: Logger): Promise<Service> {
  // A setting the roles lack stops start-up before the database is touched.
  requireRoleSettings(config);
  const db = await openDatabase(config, log);
  let early: Promise<unknown> = Promise.resolve();
  await new Promise<void>((applying) => {
    early = migrate(db.sql, undefined, { onApplying: applying })
      .then((applied) => applied.length && log("info", "migrations applied", { applied }))
      .finally(applying)
      .catch(() => {});
  });
  const { startService } = await import("./service");
  await early;
  // The service owns the database from here: its `stop` closes it, after a failed start too.
  return startService(config, { log, db });
}

if (import.meta.main) {
  let config: Config;
  try {
    config = loadConfig();
  } catch (err) {
    console.error(startErrorMessage(err));
    process.exit(1);
  }
  const log = createLogger(config.LOG_LEVEL, undefined, resolveLogFormat(config.LOG_FORMAT));
  const starting = start(config, log);
  // Before start-up ends: a signal right after "service started" (or during start-up) must stop it gracefully too.
  exitOnSignals(
    async () => (await starting).stop(),
    (signal) => log("info", "shutting down", { signal }),
    (err) => log("error", "shutdown failed", { err }),
  );
  try {
    await starting;
  } catch (err) {
    console.error(startErrorMessage(err));
    process.exit(1);
  }
}
