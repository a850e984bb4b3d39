/**
 * Table maintenance where no autovacuum runs (PGlite): the dead rows of updates and deletes (deliveries, allocations,
 * outlooks) are reclaimed and the planner's statistics follow the data, by autovacuum's own default thresholds. The
 * counters are the server's statistics of this process (they start at zero when the database is opened).
 */
import { createPollLoop } from "../common/async";
import type { Logger } from "../common/log";
import type { Sql } from "./client";

/** A table name as a quoted SQL identifier. */
const quote = (name: string) => `"${name.replace(/"/g, '""')}"`;

/** The tables one pass vacuumed (with their statistics) and those it only analyzed. */
export type MaintenanceResult = { vacuumed: string[]; analyzed: string[] };

/**
 * One pass: `VACUUM (ANALYZE)` each table whose dead rows pass autovacuum's threshold (50 + 20 % of its rows),
 * `ANALYZE` each whose changes since its last statistics pass 50 + 10 %. Not autovacuum's vacuum of tables that only
 * grow (the log, the activity): on PGlite it holds the one connection, for seconds on a large table, to set
 * visibility bits they do little with. Never throws for one table: a failure is logged and the next goes on.
 */
export async function maintainTables(sql: Sql, log?: Logger): Promise<MaintenanceResult> {
  const due = await sql<{ name: string; vacuum: boolean }[]>`
    select s.relname as name, s.n_dead_tup > 50 + 0.2 * greatest(c.reltuples, 0) as vacuum
    from pg_stat_user_tables s join pg_class c on c.oid = s.relid
    where s.schemaname = current_schema()
      and (s.n_dead_tup > 50 + 0.2 * greatest(c.reltuples, 0)
        or s.n_mod_since_analyze > 50 + 0.1 * greatest(c.reltuples, 0))
    order by s.relname`;
  const result: MaintenanceResult = { vacuumed: [], analyzed: [] };
  for (const t of due) {
    try {
      await sql.unsafe(`${t.vacuum ? "vacuum (analyze)" : "analyze"} ${quote(t.name)}`);
      (t.vacuum ? result.vacuumed : result.analyzed).push(t.name);
    } catch (err) {
      log?.("warn", "table maintenance failed", { table: t.name, err });
    }
  }
  return result;
}

/** `maintainTables` every `intervalMs` (the first pass one interval after `start`); `stop` waits for a pass running. */
export function createMaintenance(opts: { sql: Sql; log: Logger; intervalMs: number }) {
  let started = false;
  return createPollLoop({
    intervalMs: opts.intervalMs,
    step: async () => {
      // The loop's first pass comes at once; the counters then hold nothing of this process yet.
      if (!started) {
        started = true;
        return false;
      }
      const t = performance.now();
      const r = await maintainTables(opts.sql, opts.log);
      if (r.vacuumed.length + r.analyzed.length > 0) {
        opts.log("info", "tables maintained", { ...r, ms: Math.round(performance.now() - t) });
      }
      return false;
    },
    onError: (err) => opts.log("warn", "table maintenance failed", { err }),
  });
}
