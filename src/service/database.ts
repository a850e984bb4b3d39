/** The service's database as `startService` opens it, without loading the roles' modules (see src/main.ts). */
import type { Config } from "../common/config";
import type { Logger } from "../common/log";
import { createDb, PGLITE_READER_SHARED_BUFFERS, type Db } from "../db/client";

/** Opens DATABASE_URL (or the embedded DATA_DIR) with the pool and buffers the configured roles need. */
export function openDatabase(config: Config, log: Logger): Promise<Db> {
  // Each chain's indexer and keeper keep a connection for their locks: the pool grows with the chains.
  const max = 8 + 2 * Math.max(1, config.indexed.length);
  // Without the indexer (on PGlite: the API alone) the process only reads the index: a small buffer pool.
  const sharedBuffers = config.ROLES.includes("indexer") ? undefined : PGLITE_READER_SHARED_BUFFERS;
  return createDb({ url: config.DATABASE_URL, dataDir: config.DATA_DIR, max, log, sharedBuffers });
}
