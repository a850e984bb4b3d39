/** Shared query helpers over the one postgres.js client: the query and transaction types, and COPY FROM STDIN. */
import type postgres from "postgres";
import { BulkWriteError } from "./errors";

/** A transaction (or the pool) to run queries on. */
export type Q = postgres.ISql<{}>;

/** An open transaction. */
export type Tx = postgres.TransactionSql<{}>;

// COPY text format: backslash, tab, newline and carriage return must be escaped; null is \N.
const COPY_SPECIAL = /[\\\t\n\r]/;
/** A value escaped for COPY's text format. */
export const copyText = (v: string): string =>
  COPY_SPECIAL.test(v) ? v.replace(/\\/g, "\\\\").replace(/\t/g, "\\t").replace(/\n/g, "\\n").replace(/\r/g, "\\r") : v;

/**
 * Streams rows into `COPY … FROM STDIN` (Postgres only: PGlite's socket does not speak COPY). postgres.js
 * reports a failed COPY to no one, so a query queued right behind it turns the failure into an error here.
 */
export async function copyIn(tx: Tx, query: ReturnType<Tx>, text: string): Promise<void> {
  const stream = await query.writable();
  await new Promise<void>((resolve, reject) => stream.write(text, (err) => (err ? reject(err) : resolve())));
  stream.end();
  for (;;) {
    try {
      await tx`select 1`;
      return;
    } catch (err) {
      // Until the stream hands CopyDone to the connection, queries are refused locally: try again.
      if ((err as { code?: string }).code !== "COPY_IN_PROGRESS") {
        throw new BulkWriteError(`COPY failed (the server's reason is not reported): ${(err as Error).message}`, {
          cause: err,
        });
      }
      await new Promise((r) => setTimeout(r, 1));
    }
  }
}
