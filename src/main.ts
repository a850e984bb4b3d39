/** `bun start`: the service from the environment (roles from ROLES); wiring lives in `service/`. */
import { loadConfig, type Config } from "./common/config";
import { createLogger, resolveLogFormat } from "./common/log";
import { exitOnSignals, startErrorMessage, startService } from "./service";

if (import.meta.main) {
  let config: Config;
  try {
    config = loadConfig();
  } catch (err) {
    console.error(startErrorMessage(err));
    process.exit(1);
  }
  const log = createLogger(config.LOG_LEVEL, undefined, resolveLogFormat(config.LOG_FORMAT));
  const starting = startService(config, { log });
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
