/**
 * Table maintenance where no autovacuum runs: a table with many dead rows is vacuumed (its dead rows gone), one with
 * many new rows analyzed, one with neither left alone, and the loop runs passes until stopped.
 */
import { afterAll, beforeAll, expect, test } from "bun:test";
import type { Db } from "../../src/db/client";
import { createMaintenance, maintainTables } from "../../src/db/maintenance";
import { createTestDb, testDbKind } from "../../testkit/db";

let db: Db;

beforeAll(async () => {
  db = await createTestDb();
});
afterAll(async () => {
  await db?.close();
});

/** Runs `work` on one connection and hands its counts to the server's statistics (they flush when it is idle). */
async function counted(work: (sql: Db["sql"]) => Promise<unknown>): Promise<void> {
  const conn = await db.sql.reserve();
  try {
    await work(conn as unknown as Db["sql"]);
    await conn`select pg_stat_force_next_flush()`;
    await conn`select 1`;
  } finally {
    conn.release();
  }
}

const stat = async (table: string) =>
  (
    await db.sql<{ dead: number; vacuums: number; analyzes: number }[]>`
      select n_dead_tup::int as dead, (vacuum_count + autovacuum_count)::int as vacuums,
        (analyze_count + autoanalyze_count)::int as analyzes
      from pg_stat_user_tables where relname = ${table}`
  )[0]!;

test(`a pass vacuums the churned table, analyzes the grown one, leaves the others (${testDbKind})`, async () => {
  await counted(async (sql) => {
    // Churn: 300 allocations updated three times (dead rows), 300 new tokens (changes since no statistics).
    await sql`
      insert into subscriptions (chain_id, subscription_id, module, merchant, subscriber, plan_id, max_executions,
        created_at, next_charge_at, block_number, log_index, tx_hash)
      select 1, g, '0xm', '0xmerchant', '0xs' || g, 1, 0, 0, 0, g, 0, '0xtx' from generate_series(1, 300) g`;
    for (let i = 0; i < 3; i++) await sql`update subscriptions set times_executed = times_executed + 1`;
    await sql`insert into tokens (chain_id, address, symbol, decimals)
      select 1, '0xt' || g, 'T', 6 from generate_series(1, 300) g`;
  });
  // The statistics collector sees them (a flush is asynchronous to the reader's snapshot).
  for (let i = 0; i < 100 && (await stat("subscriptions")).dead < 900; i++) await Bun.sleep(20);
  expect((await stat("subscriptions")).dead).toBeGreaterThanOrEqual(900);
  const before = { subs: await stat("subscriptions"), tokens: await stat("tokens"), plans: await stat("plans") };

  const result = await maintainTables(db.sql);
  expect(result.vacuumed).toContain("subscriptions");
  expect([...result.vacuumed, ...result.analyzed]).toContain("tokens");
  expect([...result.vacuumed, ...result.analyzed]).not.toContain("plans");

  await counted(async () => {});
  for (let i = 0; i < 100 && (await stat("subscriptions")).vacuums === before.subs.vacuums; i++) await Bun.sleep(20);
  const after = await stat("subscriptions");
  expect(after.vacuums).toBeGreaterThan(before.subs.vacuums);
  expect(after.dead).toBe(0);
  expect((await stat("tokens")).analyzes).toBeGreaterThan(before.tokens.analyzes);
  expect(await stat("plans")).toEqual(before.plans);

  // Nothing changed since: the next pass has nothing to do.
  expect(await maintainTables(db.sql)).toEqual({ vacuumed: [], analyzed: [] });
});

test(`the loop runs passes every interval and stop waits for the one running (${testDbKind})`, async () => {
  const lines: string[] = [];
  await counted((sql) => sql`update subscriptions set times_executed = times_executed + 1`);
  for (let i = 0; i < 100 && (await stat("subscriptions")).dead < 300; i++) await Bun.sleep(20);
  const m = createMaintenance({ sql: db.sql, log: (_level, msg) => lines.push(msg), intervalMs: 20 });
  m.start();
  for (let i = 0; i < 200 && !lines.includes("tables maintained"); i++) await Bun.sleep(10);
  await m.stop();
  expect(lines).toContain("tables maintained");
  const count = lines.length;
  await Bun.sleep(100);
  expect(lines.length).toBe(count);
});
