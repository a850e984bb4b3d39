/** Reads of the event log (`event_log`: stored events and activity events). */
import type { Sql } from "../../../db/client";
import { plannedForValues } from "../../../db/query";
import { EVENT_COLUMNS, toEnvelope, type EventEnvelope, type EventRow } from "../../../events/envelope";
import { activityEventKey } from "../../../events/ids";
import { DEADLINE_FAST_MS, DEADLINE_LIST_MS, withDeadline } from "../../deadline";
import { listResponse, STREAM_CHUNK_ROWS, type ListFormat } from "../../stream";
import type { LogLevel } from "../../../common/log";
import { EVENT_CSV_COLUMNS } from "./model";
import { ACTIVITY_TYPES } from "../../../domain/records";

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

/** The filters of `q` but its types, on the columns `seq`, `chain` and `ts` of one table of the log. */
function commonFilters(sql: Sql, q: EventQuery, cols: { seq: string; chain: string; ts: string }) {
  const after = q.afterSeq
    ? q.order === "desc"
      ? sql`and ${sql(cols.seq)} < ${q.afterSeq}`
      : sql`and ${sql(cols.seq)} > ${q.afterSeq}`
    : sql``;
  return sql`${q.chainId !== undefined ? sql`and ${sql(cols.chain)} = ${q.chainId}` : sql``}
    ${q.since ? sql`and ${sql(cols.ts)} >= ${q.since}` : sql``} ${after}`;
}

/**
 * The seqs of up to `n` events of the `types` after `q.afterSeq`, in the query's order, each table of the log read in
 * seq order by its own indexes: a statement of its own, cheap to plan and planned for the types asked each time (a
 * cached generic plan, blind to them, walks the merchant's whole log for a rare type).
 */
async function seqsOfTypes(sql: Sql, q: EventQuery, types: string[], n: number, ms: number): Promise<string[]> {
  const dir = q.order === "desc" ? sql`desc` : sql`asc`;
  // Stored events: a scan per type, by (merchant, type, seq) for a rare one (status changes are most of them).
  const stored = types.map(
    (t) => sql`(select m.seq from merchant_events m
      where m.merchant = ${q.merchant} and m.type = ${t} ${commonFilters(sql, q, { seq: "m.seq", chain: "m.chain_id", ts: "m.ts" })}
      order by m.seq ${dir} limit ${n})`,
  );
  // Activity events by the row's own type (the event type is a CASE of it, which neither an index nor an estimate
  // reads); when none of the types is an activity event's, the branch is cut before it starts (a One-Time Filter).
  const rowTypes = () =>
    sql`array(select t from unnest(${[...ACTIVITY_TYPES]}::text[]) t where activity_event_type(t) = any(${types}))`;
  const activity = sql`(select a.event_seq from activity a
    where a.merchant = ${q.merchant} and a.event_seq is not null
      and cardinality(${rowTypes()}) > 0 and a.type = any(${rowTypes()})
      ${commonFilters(sql, q, { seq: "a.event_seq", chain: "a.chain_id", ts: "a.block_time" })}
    order by a.event_seq ${dir} limit ${n})`;
  const rows = await withDeadline(
    plannedForValues(sql<{ seq: string }[]>`
      select s.seq from (${[...stored, activity].reduce((all, p) => sql`${all} union all ${p}`)}) s (seq)
      order by s.seq ${dir} limit ${n}`),
    ms,
  );
  return rows.map((r) => r.seq);
}

/**
 * Up to `n` events after `q.afterSeq`, in the query's order. With a type filter, the page's seqs first, then only
 * those events from the view: through the view, the type is a CASE of the activity row's that no index serves, and
 * every matching event's id and token was computed before the page was cut (a `type=charge.failed` page of a merchant
 * with 30,000 events took 47–150 ms).
 */
async function readEvents(sql: Sql, q: EventQuery, n: number): Promise<EventRow[]> {
  const dir = q.order === "desc" ? sql`desc` : sql`asc`;
  if (!q.types) {
    return withDeadline(
      sql<EventRow[]>`
        select ${sql.unsafe(EVENT_COLUMNS)} from event_log e
        where e.merchant = ${q.merchant} and e.seq is not null
          ${commonFilters(sql, q, { seq: "e.seq", chain: "e.chain_id", ts: "e.ts" })}
        order by e.seq ${dir}
        limit ${n}`,
      DEADLINE_LIST_MS,
    );
  }
  const start = performance.now();
  const seqs = await seqsOfTypes(sql, q, q.types, n, DEADLINE_LIST_MS);
  if (seqs.length === 0) return [];
  return withDeadline(
    sql<EventRow[]>`
      select ${sql.unsafe(EVENT_COLUMNS)} from event_log e
      where e.merchant = ${q.merchant} and e.seq = any(${seqs}::bigint[])
      order by e.seq ${dir}`,
    Math.max(1, DEADLINE_LIST_MS - (performance.now() - start)),
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
  // An activity event's id names its row; any other id is a stored event's (`merchant_events`), found by its unique
  // index (`stored` is a constant of the view's branch: the activity branch is not scanned).
  const key = activityEventKey(id);
  const [row] = await withDeadline(
    sql<(EventRow & { reverted_by: string | null })[]>`
      select ${sql.unsafe(EVENT_COLUMNS)}, e.reverted_by from event_log e where e.id = ${id} and e.merchant = ${merchant}
      ${chainId !== undefined ? sql`and e.chain_id = ${chainId}` : sql``}
      ${key ? sql`and e.chain_id = ${key.chainId} and e.block_number = ${key.blockNumber.toString()} and e.log_index = ${key.logIndex}` : sql`and e.stored`}`,
    DEADLINE_FAST_MS,
  );
  return row && { ...toEnvelope(row), seq: row.seq, revertedBy: row.reverted_by };
}
