/** Reads of the event log (`merchant_events`). */
import type { Sql } from "../../../db/client";
import { toEnvelope, type EventEnvelope, type EventRow } from "../../../events/envelope";
import { DEADLINE_FAST_MS, DEADLINE_LIST_MS, withDeadline } from "../../deadline";

/** Filters and page of the event log. */
export type EventQuery = {
  merchant: string;
  chainId?: number;
  types?: string[];
  since?: Date;
  order: "asc" | "desc";
  limit: number;
  /** seq of the `starting_after` event. */
  afterSeq?: string;
};

const COLUMNS = "seq, id, chain_id, merchant, type, block_number, ts, data";

/** One page (`limit + 1` rows, so the caller can tell a cut page). */
export async function listEvents(sql: Sql, q: EventQuery): Promise<{ events: EventEnvelope[]; more: boolean }> {
  const desc = q.order === "desc";
  const rows = await withDeadline(
    sql<EventRow[]>`
      select ${sql.unsafe(COLUMNS)} from merchant_events
      where merchant = ${q.merchant}
      ${q.chainId !== undefined ? sql`and chain_id = ${q.chainId}` : sql``}
      ${q.types ? sql`and type = any(${q.types})` : sql``}
      ${q.since ? sql`and ts >= ${q.since}` : sql``}
      ${q.afterSeq ? (desc ? sql`and seq < ${q.afterSeq}` : sql`and seq > ${q.afterSeq}`) : sql``}
      order by seq ${desc ? sql`desc` : sql`asc`}
      limit ${q.limit + 1}`,
    DEADLINE_LIST_MS,
  );
  return { events: rows.slice(0, q.limit).map(toEnvelope), more: rows.length > q.limit };
}

/** One event of the merchant, or undefined. */
export async function findEvent(
  sql: Sql,
  merchant: string,
  id: string,
): Promise<(EventEnvelope & { seq: string }) | undefined> {
  const [row] = await withDeadline(
    sql<EventRow[]>`select ${sql.unsafe(COLUMNS)} from merchant_events where id = ${id} and merchant = ${merchant}`,
    DEADLINE_FAST_MS,
  );
  return row && { ...toEnvelope(row), seq: row.seq };
}
