/** A service with the API role over a fresh embedded database (PGlite in a temporary DATA_DIR), on a free port. */
import { mkdtempSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { loadConfig } from "../src/common/config";
import { startService, type Service } from "../src/service";
import { freePort } from "./cli";

/** Starts it; `env` is added to the environment (e.g. WEBHOOK_ALLOW_PRIVATE_URLS). Stop the service when done. */
export async function startEmbeddedApi(prefix: string, env: Record<string, string> = {}) {
  const dataDir = mkdtempSync(join(tmpdir(), prefix));
  const config = loadConfig({
    DATA_DIR: dataDir,
    ROLES: "api",
    CHAIN_ID: "31337",
    PORT: String(await freePort()),
    HOST: "127.0.0.1",
    SIWE_DOMAIN: "localhost",
    ...env,
  });
  const service: Service = await startService(config, { log: () => {} });
  return { service, dataDir };
}
