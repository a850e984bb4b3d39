import { EventEmitter } from "node:events";
import type { Db } from "./client";

/** What the indexer announces after each committed batch. */
export type IndexedBatch = { chainId: number; fromBlock: string; toBlock: string; reorg: boolean };

/** Publish/subscribe for committed batches: Postgres LISTEN/NOTIFY, or in-process on PGlite. */
export type Notifier = {
  publish: (batch: IndexedBatch) => Promise<void>;
  subscribe: (fn: (batch: IndexedBatch) => void) => Promise<() => Promise<void>>;
};

const CHANNEL = "indexed_batch";

/** Creates the notifier for a database; LISTEN/NOTIFY does not cross PGlite's socket, so it stays in-process there. */
export function createNotifier(db: Pick<Db, "sql" | "kind">): Notifier {
  const local = new EventEmitter();
  local.setMaxListeners(0);
  if (db.kind === "pglite") {
    return {
      publish: async (batch) => void local.emit(CHANNEL, batch),
      subscribe: async (fn) => {
        local.on(CHANNEL, fn);
        return async () => void local.off(CHANNEL, fn);
      },
    };
  }
  return {
    publish: async (batch) => {
      await db.sql.notify(CHANNEL, JSON.stringify(batch));
    },
    subscribe: async (fn) => {
      const { unlisten } = await db.sql.listen(CHANNEL, (payload) => fn(JSON.parse(payload) as IndexedBatch));
      return unlisten;
    },
  };
}
