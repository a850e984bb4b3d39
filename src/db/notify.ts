import { EventEmitter } from "node:events";
import type { Db } from "./client";
import type { Q } from "./query";
import { createLogger, type Logger } from "../common/log";

/** What the indexer announces after each committed batch. */
export type IndexedBatch = {
  chainId: number;
  fromBlock: string;
  toBlock: string;
  reorg: boolean;
  /** The chain's cursor stamp the batch committed (`moveCursor`); absent when the cursor did not move. */
  stamp?: string;
};

/** Publish/subscribe for committed batches: Postgres LISTEN/NOTIFY, or in-process on PGlite. */
export type Notifier = {
  publish: (batch: IndexedBatch) => Promise<void>;
  subscribe: (fn: (batch: IndexedBatch) => void) => Promise<() => Promise<void>>;
};

const CHANNEL = "indexed_batch";

/**
 * The stamp of a `chains` row's cursor, as SQL over its columns: the indexed block, its hash and when the cursor last
 * moved (every batch and rollback sets `updated_at` in its transaction), so two commits never share one.
 */
export const cursorStamp = (q: Q) =>
  q`concat_ws(':', indexed_block, indexed_hash, (extract(epoch from updated_at) * 1000000)::bigint)`;

/** A NOTIFY payload as a batch, or null (logged) when it is not one: anyone with database access can NOTIFY. */
export function parseBatch(payload: string, log: Logger): IndexedBatch | null {
  try {
    const b = JSON.parse(payload) as Partial<IndexedBatch> | null;
    if (b && Number.isSafeInteger(b.chainId) && typeof b.fromBlock === "string" && typeof b.toBlock === "string") {
      const batch: IndexedBatch = {
        chainId: b.chainId!,
        fromBlock: b.fromBlock,
        toBlock: b.toBlock,
        reorg: b.reorg === true,
      };
      if (typeof b.stamp === "string") batch.stamp = b.stamp;
      return batch;
    }
  } catch {
    // reported below
  }
  log("warn", "ignored a malformed notification", { channel: CHANNEL, payload: payload.slice(0, 200) });
  return null;
}

/**
 * Creates the notifier for a database; LISTEN/NOTIFY does not cross PGlite's socket, so it stays in-process there.
 * A malformed payload is logged and dropped, never thrown into the listener.
 */
export function createNotifier(db: Pick<Db, "sql" | "kind">, log: Logger = createLogger("info")): Notifier {
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
      const { unlisten } = await db.sql.listen(CHANNEL, (payload) => {
        const batch = parseBatch(payload, log);
        if (batch) fn(batch);
      });
      // The listener is detached before the UNLISTEN is sent; that statement fails only when the connection is
      // closing, which ends the LISTEN too (a service stopping while its database closes must not throw).
      return () =>
        unlisten().then(
          () => {},
          () => {},
        );
    },
  };
}
