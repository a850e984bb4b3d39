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
import { describeError } from "../common/errors";

/** Rows per chunk of a streamed list (and the most a list without `limit` may hold to be served as one page). */
export const STREAM_CHUNK_ROWS = 1000;

/**
 * Rows per chunk of a list Postgres renders (the activity log): one query and one text per chunk, so a bigger chunk
 * costs only its bytes in memory (about 0.5 MB per 1,000 JSON records).
 */
export const RENDERED_CHUNK_ROWS = 4000;

/** Chain position of a row in (block_number, log_index) order: the keyset of every streamed list. */
export type Position = { blockNumber: string; logIndex: number };

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
  try {
    for (;;) {
      ahead = batch.length < size ? undefined : opts.read(opts.position(batch[batch.length - 1]), size);
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
 * A keyset chunk Postgres rendered as one text: its rows' texts joined (led by the document's separator, or by its
 * opening for the first chunk), how many rows, the last row's position.
 */
export type RenderedChunk = { text: Uint8Array | null; rows: number; last: Position | undefined };

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
  try {
    for (;;) {
      ahead = full && chunk.last ? opts.read(chunk.last, opts.size) : undefined;
      if (chunk.text && chunk.rows > 0) yield chunk.text;
      if (!ahead) break;
      chunk = await ahead;
      ahead = undefined;
      full = chunk.rows >= opts.size;
    }
  } finally {
    // A consumer that stops early (a client gone) leaves the read ahead to finish unobserved.
    ahead?.catch(() => {});
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
        if (next.done) {
          finished = true;
          controller.close();
        } else controller.enqueue(bytes(next.value));
      } catch (err) {
        onError(err);
        controller.error(err);
      }
    },
    async cancel() {
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
