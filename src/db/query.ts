/** Shared query helpers over the one postgres.js client: the query and transaction types, and COPY FROM STDIN. */
import type postgres from "postgres";
import { BulkWriteError } from "./errors";

/** A transaction (or the pool) to run queries on. */
export type Q = postgres.ISql<{}>;

/** An open transaction. */
export type Tx = postgres.TransactionSql<{}>;

/**
 * `query` planned for its own values at each execution (an unnamed statement, where postgres.js prepares every tagged
 * query): for a statement cheap to plan whose best path depends on its values. A prepared one switches to a generic
 * plan after five executions, and a generic plan, blind to the values, may walk a whole index range for a rare one.
 */
export function plannedForValues<R extends readonly postgres.MaybeRow[]>(
  query: postgres.PendingQuery<R>,
): postgres.PendingQuery<R> {
  (query as unknown as { options: { prepare?: boolean } }).options.prepare = false;
  return query;
}

// COPY text format: backslash, tab, newline and carriage return must be escaped; null is \N.
const COPY_SPECIAL = /[\\\t\n\r]/;
/** A value escaped for COPY's text format. */
export const copyText = (v: string): string =>
  COPY_SPECIAL.test(v) ? v.replace(/\\/g, "\\\\").replace(/\t/g, "\\t").replace(/\n/g, "\\n").replace(/\r/g, "\\r") : v;

// A bulk column as one text: values joined by the unit separator, null as the record separator (neither appears in
// the hashes, numbers, names and JSON a batch holds; a value that has one goes as an array instead).
const SEP = "\x1f";
const NUL = "\x1e";

/**
 * A text[] of `values` for a bulk insert's `unnest`: one text parameter split by `string_to_array`. Postgres parses
 * an array parameter (`${values}::text[]`) element by element at Bind, quoting and escaping included: on PGlite that
 * took ~1.6 s of a 53,000-event backfill's ~4.5 s of SQL; splitting the same text is cheaper. Falls back to the
 * array parameter when a value holds a separator, or for a single value (an empty one would split to no element).
 */
export function textColumn(q: Q, values: readonly (string | null)[]) {
  let plain = values.length > 1;
  for (let i = 0; plain && i < values.length; i++) {
    const v = values[i];
    plain = v === null || (v.indexOf(SEP) < 0 && v.indexOf(NUL) < 0);
  }
  if (!plain) return q`${values as (string | null)[]}::text[]`;
  const text = values.map((v) => v ?? NUL).join(SEP);
  return q`string_to_array(${text}::text, ${SEP}, ${NUL})`;
}

/** Each of `fields` over `rows` as a {@link textColumn}, by the field's name: the columns of a bulk insert's `unnest`. */
export function textColumns<R, K extends string>(
  q: Q,
  rows: readonly R[],
  fields: Record<K, (row: R) => string | null>,
): Record<K, ReturnType<typeof textColumn>> {
  const columns = {} as Record<K, ReturnType<typeof textColumn>>;
  for (const name in fields) columns[name] = textColumn(q, rows.map(fields[name]));
  return columns;
}

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
