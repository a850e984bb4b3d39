/** The whole service in process over a test chain, as the renewal and keeper tests run it. */
import { loadConfig } from "../src/common/config";
import { startService, type Service } from "../src/service";
import type { TestChain } from "./chain";
import { freePort } from "./cli";
import { createTestDb } from "./db";

/**
 * Starts the service over `chain`'s processor on a fresh test database (a pool of `dbMax`): the chain's settings,
 * 100 ms polls, a free loopback port and quiet logs, then `env` (the roles and anything else) on top.
 */
export async function startChainService(
  chain: Pick<TestChain, "rpcUrl" | "processor" | "startBlock">,
  env: Record<string, string>,
  dbMax = 10,
): Promise<Service> {
  const config = loadConfig({
    RPC_URL: chain.rpcUrl,
    PROCESSOR_ADDRESS: chain.processor,
    START_BLOCK: chain.startBlock.toString(),
    POLL_INTERVAL_MS: "100",
    PORT: String(await freePort()),
    HOST: "127.0.0.1",
    LOG_LEVEL: "error",
    // A local chain bills nothing: no client-side compute-unit pacing unless a test asks for it.
    RPC_CU_PER_SECOND: "0",
    ...env,
  });
  return startService(config, { db: await createTestDb({ max: dbMax }) });
}
