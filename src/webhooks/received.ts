/** Which endpoints may have received an event (webhooks.md §1): what a withdrawal's `event.reverted` follows. */
import type { PendingQuery, Row } from "postgres";
import type { Sql } from "../db/client";
import type { Q } from "../db/query";

/**
 * Whether the endpoint of delivery `d` (in scope) may have its event (webhooks.md §1, "Received"): an attempt that
 * was delivered or whose outcome is unknown, or a claimed attempt not recorded yet (in flight, or its process died).
 */
export const mayHaveReceived = (q: Q) => q`(
  exists (select 1 from webhook_attempts a where a.delivery_id = d.id and a.receipt in ('delivered', 'unknown'))
  or d.attempts > (select count(*) from webhook_attempts a where a.delivery_id = d.id))`;

/**
 * `lateral` the deliveries of the event whose id is `eventId` (SQL), as `d` (id, endpoint_id, attempts, status):
 * the auto ones by webhook_deliveries_auto_idx, the explicit ones by webhook_deliveries_explicit_event_idx (one
 * scan of each; a single `event_id =` over both partial indexes is planned as a scan of the whole table).
 */
export const deliveriesOfEvent = (q: Q, eventId: PendingQuery<Row[]>) => q`lateral (
  select d.id, d.endpoint_id, d.attempts, d.status from webhook_deliveries d
  where d.event_id = ${eventId} and d.origin = 'auto'
  union all
  select d.id, d.endpoint_id, d.attempts, d.status from webhook_deliveries d
  where d.event_id = ${eventId} and d.origin <> 'auto') d`;

/** The endpoints that may have received the event `eventId`, through any of its deliveries. */
export async function endpointsThatMayHave(sql: Sql, eventId: string): Promise<Set<string>> {
  const rows = await sql<{ endpoint_id: string }[]>`
    select distinct d.endpoint_id from ${deliveriesOfEvent(sql, sql`${eventId}::text`)} where ${mayHaveReceived(sql)}`;
  return new Set(rows.map((r) => r.endpoint_id));
}
