/** The deliveries' planner statistics, refreshed after a burst of new rows. */
import type { Sql } from "../db/client";

/**
 * Deliveries created at once from which the table's planner statistics are refreshed. A burst into a table the
 * planner believes small (a fresh installation, a first endpoint of a large merchant, a replay) made the claim read
 * an endpoint's whole backlog and sort it, through the wrong index: 22.8 ms a claim at 20,000 pending, 3.5 ms once
 * analyzed, and ten times fewer deliveries a second to one endpoint until autovacuum came by.
 */
export const DELIVERY_BURST = 5_000;

/** Refreshes the deliveries' planner statistics after `created` new rows, when that is a burst (after its commit). */
export async function analyzeAfterBurst(sql: Sql, created: number): Promise<void> {
  if (created >= DELIVERY_BURST) await sql`analyze webhook_deliveries`;
}
