/**
 * Lists streamed in constant memory: rows read in keyset chunks (each chunk its own short query, so PGlite's single
 * session and the Postgres pool are free between chunks), serialized as they come (a JSON array or CSV) into a
 * pull-based ReadableStream body. The next chunk is read only when the client has taken the previous one.
 *
 * A server-side cursor (postgres.js `.cursor(n)`) works through PGlite's socket too, but it holds the one session
 * for the whole response: every other query of the process waits behind a slow download. Keyset chunks do not.
 */
import { Type as t } from "@sinclair/typebox";
import type { OpenAPIV3 } from "openapi-types";
import { csvChunks, type CsvColumn } from "./csv";
import { documented, parseEnum, type RawParams } from "./params";
import { createLogger, type LogLevel } from "../common/log";
import { AppError, describeError } from "../common/errors";
import type { Sql } from "../db/client";

/** Rows per chunk of a streamed list (and the most a list without `limit` may hold to be served as one page). */
export const STREAM_CHUNK_ROWS = 1000;

/**
 * Rows per chunk of a list Postgres renders (the activity log): one query per chunk, so a bigger chunk costs only its
 * bytes in memory (about 0.5 MB per 1,000 JSON records).
 */
export const RENDERED_CHUNK_ROWS = 4000;

/** Rows per text of such a chunk: texts of ~50 KB, small enough for Postgres to build and send without new memory. */
export const RENDERED_PIECE_ROWS = 100;

/** Chain position of a row in (block_number, log_index) order: the keyset of every streamed list. */
export type Position = { blockNumber: string; logIndex: number };

/** A chunk of a keyset stream that did not end past the chunk before it: reading on would repeat rows forever. */
export class StalledStreamError extends AppError {
  constructor(previous: Position, last: Position | undefined) {
    super("a streamed chunk did not end past the chunk before it", { fields: { previous, last } });
  }
}

/** Order of two positions: negative, zero or positive. */
function comparePositions(a: Position, b: Position): number {
  const blocks = BigInt(a.blockNumber) - BigInt(b.blockNumber);
  return blocks === 0n ? Math.sign(a.logIndex - b.logIndex) : blocks < 0n ? -1 : 1;
}

/**
 * A guard over the chunks a stream hands out after `first`: each must end strictly past the one before it, all in
 * the direction of the first step, else it throws {@link StalledStreamError} (a keyset bug would otherwise send the
 * same rows again and again, without end).
 */
export function keysetProgress(
  first: Position | undefined,
): (chunk: { rows: number; last: Position | undefined }) => void {
  let previous = first;
  let direction = 0;
  return (chunk) => {
    if (chunk.rows === 0) return;
    if (previous) {
      const step = chunk.last ? comparePositions(chunk.last, previous) : 0;
      if (step === 0 || (direction !== 0 && step !== direction)) throw new StalledStreamError(previous, chunk.last);
      direction = step;
    }
    previous = chunk.last;
  };
}

/** Output formats of the list routes. */
export const LIST_FORMATS = ["json", "csv"] as const;

/** json (an array) or csv (RFC 4180 with a header row). */
export type ListFormat = (typeof LIST_FORMATS)[number];

/** `format`: json (default) or csv; anything else is a 400 invalid_parameter. */
export function parseFormat(params: RawParams): ListFormat {
  return parseEnum(params, "format", LIST_FORMATS, "json");
}

/** OpenAPI schema of `format` (the parser above is the runtime check). */
export const FormatParamDoc = documented(
  t.Union(
    LIST_FORMATS.map((f) => t.Literal(f)),
    {
      default: "json",
      description:
        "json (default): a JSON array. csv: RFC 4180 text (CRLF, a header row of the JSON field names plus the " +
        "amounts in token units as exact decimals), served as an attachment. Both are streamed when `limit` is absent.",
      examples: ["csv"],
    },
  ),
);

/** Adds the `text/csv` body of `format=csv` (with `example`) to a route's documented 200 response. */
export function withCsvContent(responses: OpenAPIV3.ResponsesObject, example: string): OpenAPIV3.ResponsesObject {
  const ok = responses[200] as OpenAPIV3.ResponseObject;
  ok.content = {
    ...ok.content,
    "text/csv": {
      schema: {
        type: "string",
        description:
          "format=csv: RFC 4180, CRLF line ends, a header row; empty cells for null; cells starting with =, +, -, @, " +
          "tab or CR prefixed with a single quote. Sent with Content-Disposition: attachment.",
      },
      example,
    },
  };
  return responses;
}

/**
 * Batches of a keyset scan: `first` (rows already read, if any), then `read(after, size)` from the last row's
 * position until a chunk comes back short. The next chunk's query starts as soon as a full chunk is handed out, so
 * the database reads chunk n+1 while the consumer serializes and sends chunk n (at most one chunk ahead: memory
 * stays flat).
 */
export async function* keysetBatches<T>(opts: {
  read: (after: Position | undefined, size: number) => Promise<T[]>;
  position: (row: T) => Position;
  after?: Position;
  first?: T[];
  size?: number;
}): AsyncGenerator<T[]> {
  const size = opts.size ?? STREAM_CHUNK_ROWS;
  let batch = opts.first ?? (await opts.read(opts.after, size));
  let ahead: Promise<T[]> | undefined;
  const advanced = keysetProgress(opts.after);
  const lastOf = (rows: T[]) => (rows.length > 0 ? opts.position(rows[rows.length - 1]!) : undefined);
  try {
    for (;;) {
      advanced({ rows: batch.length, last: lastOf(batch) });
      ahead = batch.length < size ? undefined : opts.read(lastOf(batch)!, size);
      if (batch.length > 0) yield batch;
      if (!ahead) return;
      batch = await ahead;
      ahead = undefined;
    }
  } finally {
    // A consumer that stops early (a client gone) leaves the read ahead to finish unobserved.
    ahead?.catch(() => {});
  }
}

/**
 * A JSON array of `batches` as text chunks. The first chunk is yielded only once the first batch is read, so a
 * failure of the first query still becomes an error response.
 */
export async function* jsonArrayChunks<T>(
  batches: AsyncIterable<readonly T[]>,
  toRecord: (row: T) => unknown,
): AsyncGenerator<string> {
  let out = "[";
  let first = true;
  for await (const batch of batches) {
    if (batch.length > 0) {
      // One stringify per batch (its array brackets cut): the same bytes as one per record, far fewer calls.
      const array = JSON.stringify(batch.map(toRecord));
      out += (first ? "" : ",") + array.slice(1, -1);
      first = false;
    }
    yield out;
    out = "";
  }
  yield out + "]";
}

/** A CSV document of `batches`, the header joined to the first batch (read before anything is sent, as above). */
async function* csvDocumentChunks<T>(
  columns: readonly CsvColumn<T>[],
  batches: AsyncIterable<readonly T[]>,
): AsyncGenerator<string> {
  const gen = csvChunks(columns, batches);
  const header = await gen.next();
  const first = await gen.next();
  yield (header.value ?? "") + (first.done ? "" : first.value);
  if (!first.done) yield* gen;
}

/** `batches` with each row mapped. */
async function* mapBatches<T, R>(batches: AsyncIterable<readonly T[]>, f: (row: T) => R): AsyncGenerator<R[]> {
  for await (const batch of batches) yield batch.map(f);
}

const encoder = new TextEncoder();

/** A row Postgres rendered (postgres.js `.raw()`: its columns as undecoded bytes), the record's text in one column. */
export type RenderedRow = readonly (Uint8Array | null)[];

/** How rendered rows form a document: the text before the first row, between two rows, after the last. */
export type RenderedDocument = { open: string; separator: string; close: string };

/** The JSON array of records rendered one per row. */
export const JSON_DOCUMENT: RenderedDocument = { open: "[", separator: ",", close: "]" };

/** `lead`, then column `text` of every row, `separator` between two rows, as one byte array. */
export function joinRendered(
  rows: readonly RenderedRow[],
  text: number,
  lead: Uint8Array,
  separator: Uint8Array,
): Uint8Array {
  let size = lead.length + Math.max(0, rows.length - 1) * separator.length;
  for (const row of rows) size += row[text]!.length;
  const out = new Uint8Array(size);
  out.set(lead, 0);
  let at = lead.length;
  for (let i = 0; i < rows.length; i++) {
    if (i > 0 && separator.length > 0) {
      out.set(separator, at);
      at += separator.length;
    }
    const bytes = rows[i]![text]!;
    out.set(bytes, at);
    at += bytes.length;
  }
  return out;
}

/** The whole document of rows held in memory (a page), as bytes. */
export function renderedDocument(rows: readonly RenderedRow[], text: number, doc: RenderedDocument): Uint8Array {
  const head = joinRendered(rows, text, encoder.encode(doc.open), encoder.encode(doc.separator));
  const close = encoder.encode(doc.close);
  const out = new Uint8Array(head.length + close.length);
  out.set(head, 0);
  out.set(close, head.length);
  return out;
}

/**
 * A keyset chunk Postgres rendered: its rows' texts joined, in pieces of a few dozen rows (each led by the document's
 * separator, or the first chunk's first by its opening), how many rows, the last row's position.
 */
export type RenderedChunk = { texts: Uint8Array[]; rows: number; last: Position | undefined };

/**
 * A document of keyset chunks Postgres rendered (see src/db/render.ts), as byte chunks: nothing is decoded or
 * serialized here. `first` is the chunk already read (more rows follow it), its text starting with the document's opening; the next
 * chunk's query starts as soon as a full chunk is handed out (one chunk ahead at most, as {@link keysetBatches}),
 * until a chunk comes back short; `close` ends the document.
 */
export async function* renderedChunks(opts: {
  first: RenderedChunk;
  read: (after: Position, size: number) => Promise<RenderedChunk>;
  /** Rows per chunk read. */
  size: number;
  close: string;
}): AsyncGenerator<Uint8Array> {
  let chunk = opts.first;
  let full = true;
  let ahead: Promise<RenderedChunk> | undefined;
  const advanced = keysetProgress(opts.first.last);
  try {
    for (;;) {
      ahead = full && chunk.last ? opts.read(chunk.last, opts.size) : undefined;
      if (chunk.rows > 0) yield* chunk.texts;
      if (!ahead) break;
      chunk = await ahead;
      ahead = undefined;
      advanced(chunk);
      full = chunk.rows >= opts.size;
    }
  } finally {
    // A consumer that stops early (a client gone) waits for the read ahead: no query outlives the stream.
    await ahead?.catch(() => {});
  }
  yield encoder.encode(opts.close);
}

/**
 * Chunks read at once, at most, by one stream of {@link renderedChunksInParallel}: one per core of a small
 * database host is what pays; more only holds pooled connections.
 */
export const MAX_PARALLEL_CHUNKS = 4;

/** Connections of each pool held by the parallel streams running over it. */
const heldByStreams = new WeakMap<object, number>();

/**
 * How many chunks a stream over `pool` (of `poolSize` connections) may read at once, and what gives them back when
 * it ends. The streams reading in parallel over a pool hold at most half of it together (the rest stays free for
 * other requests); a stream that finds fewer than two free reads one chunk at a time, as on PGlite's one session.
 */
export function takeChunkSlots(pool: object, poolSize: number): { parallel: number; release: () => void } {
  const budget = Math.min(MAX_PARALLEL_CHUNKS, Math.floor(poolSize / 2));
  const held = heldByStreams.get(pool) ?? 0;
  const parallel = Math.max(1, Math.min(budget, budget - held));
  if (parallel <= 1) return { parallel: 1, release: () => {} };
  heldByStreams.set(pool, held + parallel);
  let released = false;
  return {
    parallel,
    release: () => {
      if (released) return;
      released = true;
      heldByStreams.set(pool, (heldByStreams.get(pool) ?? parallel) - parallel);
    },
  };
}

/** A chunk being read: where it starts, where it must end (unknown for the last one), its read. */
type Pending = { after: Position; end: Position | undefined; read: Promise<RenderedChunk> };

const samePosition = (a: Position | undefined, b: Position | undefined) =>
  a !== undefined && b !== undefined && a.blockNumber === b.blockNumber && a.logIndex === b.logIndex;

/**
 * {@link renderedChunks} with up to `parallel` chunks read at once: `ends(after, size, count)` first finds where the
 * next chunks end (the position of every `size`-th row after `after`, `count` at most: an index-only scan, far
 * cheaper than rendering), so each chunk's query can start before the previous one returns. Chunks are handed out
 * in order, each as soon as it and all before it are read, so at most `parallel` chunks are held besides the one
 * being sent. A chunk that does not end where its end said (rows written or removed in between) drops the reads
 * after it and goes on from its own last row, as the sequential scan would. A consumer that stops early waits for
 * the reads in flight to finish (no query outlives the stream).
 */
export async function* renderedChunksInParallel(opts: {
  first: RenderedChunk;
  read: (after: Position, size: number) => Promise<RenderedChunk>;
  ends: (after: Position, size: number, count: number) => Promise<Position[]>;
  size: number;
  /** Chunks read at once, at most (at least 1). */
  parallel: number;
  /** Chunk ends asked for at once (default 4 × parallel). */
  endsAtOnce?: number;
  close: string;
}): AsyncGenerator<Uint8Array> {
  const { size } = opts;
  const parallel = Math.max(1, opts.parallel);
  const endsAtOnce = Math.max(parallel, opts.endsAtOnce ?? 4 * parallel);
  const inFlight: Pending[] = [];
  // Where the next chunk to read starts, and the ends known after it (`lastKnown`: no full chunk after them).
  let next: Position | undefined = opts.first.last;
  let known: Position[] = [];
  let lastKnown = false;
  // The ends query running, and its answer once it came.
  let finding: Promise<Position[]> | undefined;
  let found: Position[] | undefined;
  const find = (from: Position) => {
    const query = opts.ends(from, size, endsAtOnce);
    finding = query;
    found = undefined;
    query.then(
      (ends) => {
        if (finding === query) found = ends;
      },
      () => {}, // awaited (and thrown) where it is needed
    );
  };
  /** Starts reads until `parallel` are in flight; waits for chunk ends only if `mayWait` and nothing else runs. */
  const fill = async (mayWait: boolean) => {
    while (next && inFlight.length < parallel) {
      if (known.length === 0 && !lastKnown) {
        if (!finding) find(next);
        if (!found) {
          if (!mayWait || inFlight.length > 0) return;
          await finding;
        }
        known = found!;
        lastKnown = known.length < endsAtOnce;
        finding = found = undefined;
      }
      const end = known.shift();
      const read = opts.read(next, size);
      read.catch(() => {}); // awaited in order below; a failure must not go unhandled before its turn
      inFlight.push({ after: next, end, read });
      next = end;
      if (next && known.length === 0 && !lastKnown && !finding) find(next);
    }
  };
  const advanced = keysetProgress(opts.first.last);
  try {
    await fill(false);
    if (opts.first.rows > 0) yield* opts.first.texts;
    for (;;) {
      await fill(true);
      const pending = inFlight.shift();
      if (!pending) break;
      const chunk = await pending.read;
      advanced(chunk);
      const asExpected = pending.end ? chunk.rows === size && samePosition(chunk.last, pending.end) : chunk.rows < size;
      if (!asExpected) {
        // The rows moved under the ends: drop the reads after this chunk and go on from its last row.
        for (const p of inFlight.splice(0)) await p.read.catch(() => {});
        await finding?.catch(() => {});
        finding = found = undefined;
        known = [];
        lastKnown = false;
        next = chunk.rows > 0 ? chunk.last : pending.after;
      }
      await fill(false);
      if (chunk.rows > 0) yield* chunk.texts;
    }
  } finally {
    // A consumer that stops early (a client gone) or a failed read: wait for the queries still running.
    for (const p of inFlight) await p.read.catch(() => {});
    await finding?.catch(() => {});
  }
  yield encoder.encode(opts.close);
}

const bytes = (chunk: string | Uint8Array) => (typeof chunk === "string" ? encoder.encode(chunk) : chunk);

/**
 * A response whose body is `chunks`, pulled one at a time. The first chunk is awaited before the response exists,
 * so its errors take the normal error path (a 4xx/5xx envelope). An error after that cannot change the status any
 * more: it is logged and the body is aborted, so the client sees a truncated (unterminated) body, never a complete
 * but short list. A client that goes away cancels the stream and no further chunk is read.
 */
export async function streamResponse(
  chunks: AsyncGenerator<string | Uint8Array>,
  headers: Record<string, string>,
  onError: (err: unknown) => void,
): Promise<Response> {
  const first = await chunks.next();
  let pending: string | Uint8Array | undefined = first.done ? undefined : first.value;
  let finished = Boolean(first.done);
  // Set when the client went away: a chunk read meanwhile has nowhere to go, and that is no error.
  let cancelled = false;
  const body = new ReadableStream<Uint8Array>({
    async pull(controller) {
      try {
        if (pending !== undefined) {
          controller.enqueue(bytes(pending));
          pending = undefined;
          if (finished) controller.close();
          return;
        }
        const next = await chunks.next();
        if (cancelled) return;
        if (next.done) {
          finished = true;
          controller.close();
        } else controller.enqueue(bytes(next.value));
      } catch (err) {
        if (cancelled) return;
        onError(err);
        controller.error(err);
      }
    },
    async cancel() {
      cancelled = true;
      await chunks.return(undefined);
    },
  });
  return new Response(body, { headers });
}

/** What a streamed or paged list response needs. */
export type ListResponse<T, C> = {
  format: ListFormat;
  batches: AsyncIterable<readonly T[]>;
  /** The API record of a row (the JSON element). */
  toRecord: (row: T) => unknown;
  /** What the CSV columns read from a row (the record, plus what the decimal columns need). */
  toCsvRow: (row: T) => C;
  /** The CSV columns. */
  columns: readonly CsvColumn<C>[];
  /** Attachment name of the CSV, e.g. `activity-<merchant>-<chain>.csv`. */
  filename: string;
  /** Headers already decided (freshness, Link). */
  headers: Record<string, string | number>;
  /** Log level of the process and fields naming the request in the log line of an aborted stream. */
  logLevel: LogLevel;
  logFields: Record<string, unknown>;
};

/** The content headers of a list in `format`. */
export function listContentHeaders(format: ListFormat, filename: string): Record<string, string> {
  return format === "csv"
    ? { "content-type": "text/csv; charset=utf-8", "content-disposition": `attachment; filename="${filename}"` }
    : { "content-type": "application/json;charset=utf-8" };
}

/** Streams a list as JSON or CSV (see {@link streamResponse}). */
export function listResponse<T, C>(r: ListResponse<T, C>): Promise<Response> {
  const chunks =
    r.format === "csv"
      ? csvDocumentChunks(r.columns, mapBatches(r.batches, r.toCsvRow))
      : jsonArrayChunks(r.batches, r.toRecord);
  return sendList({ ...r, chunks });
}

/** Streams the chunks of a list already serialized in `format`, with its headers (see {@link streamResponse}). */
export function sendList(
  r: Pick<ListResponse<unknown, unknown>, "format" | "filename" | "headers" | "logLevel" | "logFields"> & {
    chunks: AsyncGenerator<string | Uint8Array>;
  },
): Promise<Response> {
  const chunks = r.chunks;
  const headers: Record<string, string> = {};
  for (const [k, v] of Object.entries(r.headers)) headers[k] = String(v);
  Object.assign(headers, listContentHeaders(r.format, r.filename));
  const log = createLogger(r.logLevel);
  return streamResponse(chunks, headers, (err) =>
    log("error", "list stream aborted after its first byte", { ...r.logFields, err: describeError(err) }),
  );
}

/** A read-only REPEATABLE READ transaction on a connection of its own, and what ends it (idempotent). */
export type Snapshot = { sql: Sql; close: () => Promise<void> };

/** Snapshots held on each pool (at most half of its connections: slow downloads never starve other requests). */
const snapshotsHeld = new WeakMap<object, number>();

/**
 * Opens a {@link Snapshot} on `pool`: every read of an export through it sees the database as of its first
 * statement, so its freshness row and all its rows agree. It holds one pooled connection until closed: only over a
 * pool of two connections or more (PGlite's one session would wait behind the whole download), and at most half of
 * the pool's connections at once; beyond that (or on PGlite) undefined, and the export reads current rows.
 */
export async function openSnapshot(pool: Sql): Promise<Snapshot | undefined> {
  const max = pool.options.max ?? 1;
  const held = snapshotsHeld.get(pool) ?? 0;
  if (max < 2 || held >= Math.floor(max / 2)) return undefined;
  snapshotsHeld.set(pool, held + 1);
  const give = () => snapshotsHeld.set(pool, (snapshotsHeld.get(pool) ?? 1) - 1);
  let reserved: Awaited<ReturnType<Sql["reserve"]>>;
  try {
    reserved = await pool.reserve();
  } catch (err) {
    give();
    throw err;
  }
  try {
    await reserved`begin isolation level repeatable read read only`;
  } catch (err) {
    reserved.release();
    give();
    throw err;
  }
  let closing: Promise<void> | undefined;
  const close = () =>
    (closing ??= (async () => {
      try {
        await reserved`rollback`;
      } finally {
        reserved.release();
        give();
      }
    })());
  return { sql: reserved as unknown as Sql, close };
}

/** `items`, then `close()` once they end, fail or are given up (a client gone). */
export async function* closing<T>(items: AsyncIterable<T>, close: () => Promise<void>): AsyncGenerator<T> {
  try {
    yield* items;
  } finally {
    await close().catch(() => {});
  }
}
