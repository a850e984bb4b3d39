/** Reads of the event log (`event_log`: stored events and activity events). */
import type { Sql } from "../../../db/client";
import { EVENT_COLUMNS, toEnvelope, type EventEnvelope, type EventRow } from "../../../events/envelope";
import { activityEventKey } from "../../../events/ids";
import { DEADLINE_FAST_MS, DEADLINE_LIST_MS, withDeadline } from "../../deadline";
import { listResponse, STREAM_CHUNK_ROWS, type ListFormat } from "../../stream";
import type { LogLevel } from "../../../common/log";
import { EVENT_CSV_COLUMNS } from "./model";

/** Filters and page of the event log. */
export type EventQuery = {
  merchant: string;
  chainId?: number;
  types?: string[];
  since?: Date;
  order: "asc" | "desc";
  /** Page size; undefined: every matching event, streamed. */
  limit?: number;
  /** seq of the `starting_after` event. */
  afterSeq?: string;
};

/** Up to `n` events after `q.afterSeq`, in the query's order. */
function readEvents(sql: Sql, q: EventQuery, n: number): Promise<EventRow[]> {
  const desc = q.order === "desc";
  return withDeadline(
    sql<EventRow[]>`
      select ${sql.unsafe(EVENT_COLUMNS)} from event_log e
      where e.merchant = ${q.merchant} and e.seq is not null
      ${q.chainId !== undefined ? sql`and e.chain_id = ${q.chainId}` : sql``}
      ${q.types ? sql`and e.type = any(${q.types})` : sql``}
      ${q.since ? sql`and e.ts >= ${q.since}` : sql``}
      ${q.afterSeq ? (desc ? sql`and e.seq < ${q.afterSeq}` : sql`and e.seq > ${q.afterSeq}`) : sql``}
      order by e.seq ${desc ? sql`desc` : sql`asc`}
      limit ${n}`,
    DEADLINE_LIST_MS,
  );
}

/** Every matching event in chunks, each read after the previous one's last seq (memory stays flat). */
async function* eventBatches(sql: Sql, q: EventQuery): AsyncGenerator<EventRow[]> {
  let afterSeq = q.afterSeq;
  for (;;) {
    const rows = await readEvents(sql, { ...q, afterSeq }, STREAM_CHUNK_ROWS);
    if (rows.length > 0) yield rows;
    if (rows.length < STREAM_CHUNK_ROWS) return;
    afterSeq = rows.at(-1)!.seq;
  }
}

/**
 * The event log as JSON or CSV: one page of `limit` (its last id in `nextAfter` when cut), or, without `limit`,
 * every matching event streamed in constant memory, as the activity routes do.
 */
export async function eventsResponse(
  sql: Sql,
  q: EventQuery,
  opts: { format: ListFormat; headers: Record<string, string>; link: (afterId: string) => string; logLevel: LogLevel },
): Promise<Response> {
  let batches: AsyncIterable<EventRow[]>;
  const headers = { ...opts.headers };
  if (q.limit === undefined) batches = eventBatches(sql, q);
  else {
    const rows = await readEvents(sql, q, q.limit + 1);
    const page = rows.slice(0, q.limit);
    if (rows.length > q.limit) headers.link = opts.link(page.at(-1)!.id);
    batches = (async function* () {
      yield page;
    })();
  }
  return listResponse({
    format: opts.format,
    batches,
    toRecord: toEnvelope,
    toCsvRow: toEnvelope,
    columns: EVENT_CSV_COLUMNS,
    filename: `events-${q.merchant}.csv`,
    headers,
    logLevel: opts.logLevel,
    logFields: { route: "events", merchant: q.merchant },
  });
}

/** One event of the merchant (on `chainId` when given), or undefined. */
export async function findEvent(
  sql: Sql,
  merchant: string,
  id: string,
  chainId?: number,
): Promise<(EventEnvelope & { seq: string; revertedBy: string | null }) | undefined> {
  // An activity event's id names its row; any other id is a stored event's (`data` set), found by its unique index.
  const key = activityEventKey(id);
  const [row] = await withDeadline(
    sql<(EventRow & { reverted_by: string | null })[]>`
      select ${sql.unsafe(EVENT_COLUMNS)}, e.reverted_by from event_log e where e.id = ${id} and e.merchant = ${merchant}
      ${chainId !== undefined ? sql`and e.chain_id = ${chainId}` : sql``}
      ${key ? sql`and e.chain_id = ${key.chainId} and e.block_number = ${key.blockNumber.toString()} and e.log_index = ${key.logIndex}` : sql`and e.data is not null`}`,
    DEADLINE_FAST_MS,
  );
  return row && { ...toEnvelope(row), seq: row.seq, revertedBy: row.reverted_by };
}
