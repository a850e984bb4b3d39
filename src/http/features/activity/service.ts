/** Activity records (CHARGE, FAIL, REFILL) of a merchant, in chain order. */
import type { Sql } from "../../../db/client";
import { DEADLINE_FAST_MS, DEADLINE_LIST_MS, withDeadline } from "../../deadline";
import { ACTIVITY_CSV_COLUMNS, type ActivityRecord, type ActivityType } from "./model";
import type { ReadDeps } from "../../chain-state";
import type { Loaded } from "../../cache";
import { InvalidParameterError } from "../../errors";
import { AppError } from "../../../common/errors";
import {
  activityRecordSql,
  activityTimestampSql,
  eventId,
  toActivityRecord as toRecord,
  type ActivityRecordRow,
  type SqlFragment,
} from "../../../domain/records";
import { jsonObjectSql, sqlLiteral } from "../../../db/render";
import { csvHeader, csvLineSql } from "../../csv";
import {
  JSON_DOCUMENT,
  joinRendered,
  renderedChunks,
  renderedChunksInParallel,
  renderedDocument,
  takeChunkSlots,
  type RenderedChunk,
  sendList,
  RENDERED_CHUNK_ROWS,
  RENDERED_PIECE_ROWS,
  STREAM_CHUNK_ROWS,
  type ListFormat,
  type Position,
  type RenderedDocument,
} from "../../stream";

export { eventId };

/** An activity row as {@link listActivity} selects it: the record's columns (one mapping, in domain/records). */
export type ActivityRow = ActivityRecordRow;

/** A serialized page of activity records, as the activity routes send (and cache) it. */
export type ActivityPage = {
  /** UTF-8 JSON array of the page's records. */
  body: Uint8Array;
  /** event_id of the page's last record when `limit` cut the page (the `Link` header's cursor), else null. */
  nextAfter: string | null;
  /** The chain's freshness row as read before the page (`X-Indexed-Block`, `X-Indexed-At`). */
  indexedBlock: string | null;
  indexedTime: Date | null;
};

/** Filters and page of an activity list. */
export type ActivityQuery = {
  merchant: string;
  chainId: number;
  type?: ActivityType;
  since?: Date;
  /** Exact, case-insensitive token symbol. */
  token?: string;
  order: "asc" | "desc";
  limit?: number;
  /** Chain position of the `starting_after` event. */
  after?: { blockNumber: string; logIndex: number };
  /** Only records at or below this block: the indexed block the response's freshness headers name. */
  maxBlock?: string;
};

/**
 * Chain position of the merchant's first record at or after `since` (activity_merchant_time_idx, index only): the
 * lower bound that spares a `since` query the merchant's older history. Exact because block timestamps increase
 * with block numbers (an EVM consensus rule); `block_time >= since` stays in the query as the filter of record.
 */
function sinceBound(sql: Sql, q: ActivityQuery) {
  return sql`select b.block_number, b.log_index from activity b
    where b.merchant = ${q.merchant} and b.chain_id = ${q.chainId} and b.block_time >= ${q.since!}
    order by b.block_time, b.block_number, b.log_index limit 1`;
}

/** The records of `q`: `limit + 1` rows at most so the caller can tell a cut page (all of them without a limit). */
export function listActivity(sql: Sql, q: ActivityQuery): Promise<ActivityRow[]> {
  return selectActivity(sql, q, q.limit ? q.limit + 1 : undefined);
}

/**
 * One indexed scan of activity_merchant_idx (activity_merchant_type_idx with a type) in (block_number, log_index)
 * order, token metadata left joined; `rows` rows at most. A record without a token (the indexer may leave it empty
 * on failures) takes the token of its subscription's plan.
 */
export async function selectActivity(sql: Sql, q: ActivityQuery, rows: number | undefined): Promise<ActivityRow[]> {
  return withDeadline(
    sql<ActivityRow[]>`
      select a.chain_id, a.block_number, a.log_index, a.tx_hash, ${activityTimestampSql(sql)} as timestamp,
        a.module, a.subscription_id, a.type, a.amount, a.fee, a.reason, a.keeper, t.symbol, t.decimals,
        a.permission_hash
      ${activityFrom(sql, q, rows)}
      ${orderBy(sql, q)}`,
    DEADLINE_LIST_MS,
  );
}

/**
 * A row of {@link selectRenderedActivity} as postgres.js `.raw()` hands it over, undecoded: block_number, log_index,
 * tx_hash, then the record rendered by Postgres (its JSON, or its CSV line).
 */
export type RenderedActivityRow = [Uint8Array, Uint8Array, Uint8Array, Uint8Array];

/** Column of the rendered record in a {@link RenderedActivityRow}. */
const RENDERED = 3;

/** The record of `format` in SQL: its JSON, or its CSV line (CRLF included). */
function recordTextSql(sql: Sql, format: ListFormat): SqlFragment {
  return format === "csv" ? csvLineSql(sql, ACTIVITY_CSV_COLUMNS) : jsonObjectSql(sql, activityRecordSql(sql));
}

/**
 * The records of {@link selectActivity} rendered by Postgres, byte for byte what `JSON.stringify` of
 * toActivityRecord (or csvLines of ACTIVITY_CSV_COLUMNS) gives: one text column to decode per row, not fourteen.
 */
export async function selectRenderedActivity(
  sql: Sql,
  q: ActivityQuery,
  rows: number | undefined,
  format: ListFormat,
): Promise<RenderedActivityRow[]> {
  const query = sql`
    select a.block_number, a.log_index, a.tx_hash, ${recordTextSql(sql, format)}
    ${activityFrom(sql, q, rows)}
    ${orderBy(sql, q)}`.raw();
  return (await withDeadline(query, DEADLINE_LIST_MS)) as unknown as RenderedActivityRow[];
}

/**
 * The next `rows` records of `q` rendered by Postgres (see {@link selectRenderedActivity}) as a chunk of the stream:
 * the texts of every {@link RENDERED_PIECE_ROWS} records joined into one piece, each led by the document's separator,
 * a few dozen rows for postgres.js to take apart instead of one per record.
 */
export async function selectRenderedChunk(
  sql: Sql,
  q: ActivityQuery,
  rows: number,
  format: ListFormat,
): Promise<RenderedChunk> {
  const separator = sqlLiteral(sql, documentOf(format).separator);
  const dir = q.order === "desc" ? sql`desc` : sql`asc`;
  const last = q.order === "desc" ? sql`min` : sql`max`;
  // Pieces, not one text per chunk: a text of megabytes costs Postgres more than its rendering (each copy of it,
  // as it grows, into the output and the send buffer, lands on freshly mapped memory), ~35 % of the stream's CPU.
  const query = sql`
    select count(*)::int, ${last}(array[p.block_number, p.log_index::bigint]),
      ${separator} || string_agg(p.text, ${separator} order by p.n)
    from (
      select r.*, row_number() over w as n, (row_number() over w - 1) / ${RENDERED_PIECE_ROWS} as piece
      from (
        select a.block_number, a.log_index, ${recordTextSql(sql, format)} as text
        ${activityFrom(sql, q, rows)}
        ${orderBy(sql, q)}
      ) r
      window w as (order by r.block_number ${dir}, r.log_index ${dir})
    ) p
    group by p.piece
    order by p.piece`.raw();
  const pieces = (await withDeadline(query, DEADLINE_LIST_MS)) as unknown as [Uint8Array, Uint8Array, Uint8Array][];
  if (pieces.length === 0) return { texts: [], rows: 0, last: undefined };
  let count = 0;
  for (const [n] of pieces) count += Number(utf8.decode(n));
  const [blockNumber, logIndex] = utf8
    .decode(pieces[pieces.length - 1]![1])
    .slice(1, -1)
    .split(",");
  return {
    texts: pieces.map((p) => p[2]),
    rows: count,
    last: { blockNumber: blockNumber!, logIndex: Number(logIndex) },
  };
}

/**
 * `from` the records of `q` (alias `a`) with their token (alias `t`): the keyset scan and its limit run first, over
 * activity alone, and the few token rows are joined to its result (a join inside the scan costs a token lookup for
 * every record). The token filter compares each record's token with the addresses of the symbol, read once: as an
 * `exists` it became a hash join over the merchant's whole history, sorted, whenever the planner planned for the
 * values at hand (the first five executions of a prepared statement on each connection): 1.7–2.9 s per chunk of the
 * 1M-record bench merchant, ~0.5 s now (the keyset scan; the rest is JIT compilation, see the README).
 */
function activityFrom(sql: Sql, q: ActivityQuery, rows: number | undefined): SqlFragment {
  return sql`
    from (
      select a.*, ${tokenAddressSql(sql)} as token_address
      ${activityScan(sql, q)}
      ${orderBy(sql, q)}
      ${rows ? sql`limit ${rows}` : sql``}
    ) a
    left join tokens t on t.chain_id = a.chain_id and t.address = a.token_address`;
}

/** A record's token: its own, else its subscription's plan's (the indexer may leave it empty on failures). */
function tokenAddressSql(sql: Sql): SqlFragment {
  return sql`coalesce(a.token, (
        select p.token from subscriptions s
        join plans p on p.chain_id = s.chain_id and p.module = s.module and p.plan_id = s.plan_id
        where s.chain_id = a.chain_id and s.subscription_id = a.subscription_id))`;
}

/**
 * `from activity a where` the filters and keyset position of `q` (no order, no limit); the position is `q.after`, or
 * `after` (SQL of a row value `(block_number, log_index)`) when given.
 */
function activityScan(sql: Sql, q: ActivityQuery, after?: SqlFragment): SqlFragment {
  const desc = q.order === "desc";
  const position = after ?? (q.after && sql`(${q.after.blockNumber}::bigint, ${q.after.logIndex}::int)`);
  return sql`
      from activity a
      where a.merchant = ${q.merchant} and a.chain_id = ${q.chainId}
      ${q.type ? sql`and a.type = ${q.type}` : sql``}
      ${q.maxBlock !== undefined ? sql`and a.block_number <= ${q.maxBlock}::bigint` : sql``}
      ${q.since ? sql`and a.block_time >= ${q.since} and (a.block_number, a.log_index) >= (${sinceBound(sql, q)})` : sql``}
      ${
        q.token
          ? sql`and ${tokenAddressSql(sql)} = any(array(
              select k.address from tokens k where k.chain_id = ${q.chainId} and lower(k.symbol) = lower(${q.token})))`
          : sql``
      }
      ${
        position
          ? desc
            ? sql`and (a.block_number, a.log_index) < ${position}`
            : sql`and (a.block_number, a.log_index) > ${position}`
          : sql``
      }`;
}

/**
 * Where the next `count` chunks of `rows` records of `q` end: the position of every `rows`-th record after
 * `q.after` (fewer when the list ends first). The keyset scan alone, without the records' other columns
 * (index only on activity_merchant_idx without filters), one end after the other (each `offset rows - 1` from the
 * one before): what lets the chunks be rendered at once. (Numbering the rows with a window over all `rows * count`
 * cost 2–3 times as much.)
 */
export async function selectChunkEnds(sql: Sql, q: ActivityQuery, rows: number, count: number): Promise<Position[]> {
  const end = (after?: SqlFragment) =>
    sql`select a.block_number, a.log_index ${activityScan(sql, q, after)} ${orderBy(sql, q)} offset ${rows - 1} limit 1`;
  const query = sql`
    with recursive e as (
      select 1 as n, x.block_number, x.log_index from (${end()}) x
      union all
      select e.n + 1, x.block_number, x.log_index
      from e cross join lateral (${end(sql`(e.block_number, e.log_index)`)}) x
      where e.n < ${count}
    )
    select block_number, log_index from e order by n`.raw();
  const found = (await withDeadline(query, DEADLINE_LIST_MS)) as unknown as [Uint8Array, Uint8Array][];
  return found.map(([block, log]) => ({ blockNumber: utf8.decode(block), logIndex: Number(utf8.decode(log)) }));
}

/** Chain order of `q`: `order by` block and log index, ascending or descending. */
function orderBy(sql: Sql, q: ActivityQuery): SqlFragment {
  const dir = q.order === "desc" ? sql`desc` : sql`asc`;
  return sql`order by a.block_number ${dir}, a.log_index ${dir}`;
}

const utf8 = new TextDecoder();

/** Chain position of an activity record of the merchant (for `starting_after`), or undefined. */
export async function activityPosition(
  sql: Sql,
  q: { merchant: string; chainId: number; txHash: string; logIndex: number },
): Promise<{ blockNumber: string; logIndex: number } | undefined> {
  const [row] = await withDeadline(
    sql<{ block_number: string; log_index: number }[]>`
      select block_number, log_index from activity
      where chain_id = ${q.chainId} and tx_hash = ${q.txHash} and log_index = ${q.logIndex} and merchant = ${q.merchant}`,
    DEADLINE_FAST_MS,
  );
  return row && { blockNumber: row.block_number, logIndex: row.log_index };
}

/** The API record of a row (one mapping, in domain/records.ts). */
export function toActivityRecord(r: ActivityRow): ActivityRecord {
  return toRecord(r) as ActivityRecord;
}

/**
 * Thrown by {@link loadActivityPage} when a list without `limit` has more than one chunk of records: it is streamed
 * instead of served (and cached) as one page. Carries what was read, so the stream starts from it.
 */
export class ListOverflow extends AppError {
  constructor(
    readonly query: ActivityQuery,
    readonly format: ListFormat,
    readonly first: RenderedActivityRow[],
    readonly chain: { indexedBlock: string | null; indexedTime: Date | null },
    /** The chain's rollback count read before the freshness row (see {@link assertSameSnapshot}). */
    readonly rollbackSeq: string | null = null,
  ) {
    super("the list is longer than one chunk: stream it");
  }
}

/** The code of the error trailer of a stream cut short by a reorg below its indexed block. */
export const REORG_DURING_EXPORT = "reorg_during_export";

/** A rollback removed blocks at or below a stream's indexed block while it was being read. */
export class ExportReorgedError extends AppError {
  constructor(
    readonly chainId: number,
    readonly indexedBlock: string,
  ) {
    super(
      `chain ${chainId} was reorganised below block ${indexedBlock} while this export was read: the rows after ` +
        "this point would not be the index at that block; download it again",
    );
  }
}

/** The rollback count of a chain's index (0020-era rows: 0), or null when the chain has no row. */
export async function rollbackSeqOf(sql: Sql, chainId: number): Promise<string | null> {
  const [row] = await sql<{ seq: string }[]>`select rollback_seq::text as seq from chains where chain_id = ${chainId}`;
  return row?.seq ?? null;
}

/**
 * Throws {@link ExportReorgedError} unless every rollback of the chain since `seq` was read kept `indexedBlock`:
 * rows up to that block read after this check are still the index at that block. Only the latest rollback's kept
 * block is stored, so two rollbacks or more count as one that reached below it.
 */
export async function assertSameSnapshot(
  sql: Sql,
  q: { chainId: number; seq: string; indexedBlock: string },
): Promise<void> {
  const [row] = await sql<{ seq: string; kept: string | null }[]>`
    select rollback_seq::text as seq, rolled_back_to::text as kept from chains where chain_id = ${q.chainId}`;
  if (!row || row.seq === q.seq) return;
  const kept = row.kept === null ? -1n : BigInt(row.kept);
  if (BigInt(row.seq) === BigInt(q.seq) + 1n && kept >= BigInt(q.indexedBlock)) return;
  throw new ExportReorgedError(q.chainId, q.indexedBlock);
}

/** How the rendered rows of `format` form the document (CSV: the header row first). */
function documentOf(format: ListFormat): RenderedDocument {
  return format === "csv" ? { open: csvHeader(ACTIVITY_CSV_COLUMNS), separator: "", close: "" } : JSON_DOCUMENT;
}

/**
 * Reads and serializes one page (a cache entry); the freshness row is read first and bounds the records
 * (`block_number <= indexed block`), so the page never holds more than its headers claim. Without `limit`, reads
 * one chunk plus one record: a list that fits is a page, a longer one throws {@link ListOverflow}.
 */
export async function loadActivityPage(
  deps: Pick<ReadDeps, "readSql" | "chainState">,
  query: ActivityQuery,
  cursor: { chainId: number; txHash: string; logIndex: number } | undefined,
  format: ListFormat,
): Promise<Loaded<ActivityPage>> {
  // A list that may stream notes the chain's rollbacks before its bound: the stream checks none reached below it.
  const rollbackSeq = query.limit === undefined ? await rollbackSeqOf(deps.readSql, query.chainId) : null;
  // Read now, not from the cache: the bound must include every batch committed before this request.
  const chain = await deps.chainState.fresh(query.chainId);
  const q: ActivityQuery = { ...query, maxBlock: chain?.indexedBlock ?? undefined };
  if (cursor) {
    const position =
      cursor.chainId === q.chainId
        ? await activityPosition(deps.readSql, { ...cursor, merchant: q.merchant, chainId: q.chainId })
        : undefined;
    if (!position) {
      throw new InvalidParameterError(
        "starting_after",
        `starting_after does not name an activity record of this merchant on chain ${q.chainId}`,
      );
    }
    q.after = position;
  }
  const freshness = { indexedBlock: chain?.indexedBlock ?? null, indexedTime: chain?.indexedTime ?? null };
  const cap = q.limit ?? STREAM_CHUNK_ROWS;
  const rows = await selectRenderedActivity(deps.readSql, q, cap + 1, format);
  let nextAfter: string | null = null;
  if (rows.length > cap) {
    if (q.limit === undefined) throw new ListOverflow(q, format, rows, freshness, rollbackSeq);
    rows.length = cap;
    const last = rows[rows.length - 1]!;
    nextAfter = eventId({
      chain_id: String(q.chainId),
      tx_hash: utf8.decode(last[2]),
      log_index: Number(utf8.decode(last[1])),
    });
  }
  const body = renderedDocument(rows, RENDERED, documentOf(format));
  return { value: { body, nextAfter, ...freshness } };
}

/**
 * Streams the whole list of an overflowing query (JSON array or CSV), continuing after the rows already read, in
 * chunks bounded by the same indexed block. Postgres renders every record and joins each chunk into one text (see
 * {@link selectRenderedChunk}); over a pool, several chunks at once on their own connections (their ends found
 * first by {@link selectChunkEnds}), on PGlite's one session one after the other.
 */
export function streamActivity(
  deps: Pick<ReadDeps, "readSql" | "config">,
  overflow: ListOverflow,
  opts: { filename: string; headers: Record<string, string | number>; requestId?: string },
): Promise<Response> {
  const q = overflow.query;
  const format = overflow.format;
  const doc = documentOf(format);
  const rows = overflow.first;
  const last = rows[rows.length - 1]!;
  const first: RenderedChunk = {
    texts: [joinRendered(rows, RENDERED, utf8Bytes(doc.open), utf8Bytes(doc.separator))],
    rows: rows.length,
    last: { blockNumber: utf8.decode(last[0]), logIndex: Number(utf8.decode(last[1])) },
  };
  const seq = overflow.rollbackSeq;
  const bound = q.maxBlock;
  // Each chunk is checked after its read: no rollback since the start reached below the bound the headers state.
  const read = async (after: Position, size: number) => {
    const chunk = await selectRenderedChunk(deps.readSql, { ...q, after }, size, format);
    if (seq !== null && bound !== undefined) {
      await assertSameSnapshot(deps.readSql, { chainId: q.chainId, seq, indexedBlock: bound });
    }
    return chunk;
  };
  const slots = takeChunkSlots(deps.readSql, deps.readSql.options.max);
  const chunks =
    slots.parallel > 1
      ? renderedChunksInParallel({
          first,
          read,
          ends: (after, size, count) => selectChunkEnds(deps.readSql, { ...q, after }, size, count),
          size: RENDERED_CHUNK_ROWS,
          parallel: slots.parallel,
          close: doc.close,
        })
      : renderedChunks({ first, read, size: RENDERED_CHUNK_ROWS, close: doc.close });
  return sendList({
    format,
    chunks: withErrorTrailer(releasing(chunks, slots.release), format),
    filename: opts.filename,
    headers: opts.headers,
    logLevel: deps.config.LOG_LEVEL,
    logFields: { route: "activity", merchant: q.merchant, chain_id: q.chainId, request_id: opts.requestId },
  });
}

const utf8Bytes = (text: string) => new TextEncoder().encode(text);

/**
 * `chunks`; when a reorg cuts the stream short, an error trailer before the body is aborted: a last line a reader
 * can show (a JSON object after the unterminated array, a `#error` line after the CSV rows), never a complete list.
 */
async function* withErrorTrailer(chunks: AsyncGenerator<Uint8Array>, format: ListFormat): AsyncGenerator<Uint8Array> {
  try {
    yield* chunks;
  } catch (err) {
    if (err instanceof ExportReorgedError) {
      const error = { type: "api_error", code: REORG_DURING_EXPORT, message: err.message };
      yield utf8Bytes(
        format === "csv" ? `#error ${REORG_DURING_EXPORT}: ${err.message}\r\n` : `\n${JSON.stringify({ error })}\n`,
      );
    }
    throw err;
  }
}

/** `chunks`, then `release` once they end, fail or are given up. */
async function* releasing<T>(chunks: AsyncGenerator<T>, release: () => void): AsyncGenerator<T> {
  try {
    yield* chunks;
  } finally {
    release();
  }
}
