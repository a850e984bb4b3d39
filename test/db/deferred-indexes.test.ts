/**
 * The initial backfill's deferred indexes: dropped only on empty tables, recorded with their definitions, built back
 * to exactly what the migrations made (concurrently, once each), and built by a migration run before any migration.
 */
import { afterEach, beforeEach, expect, test } from "bun:test";
import { cpSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import type { Db } from "../../src/db/client";
import {
  buildDeferredIndexes,
  deferIndexes,
  deferredIndexes,
  DEFERRABLE_INDEXES,
  ifNotExists,
  indexesDeferred,
} from "../../src/db/deferred-indexes";
import { migrate, migrationsDir } from "../../src/db/migrate";
import { createTestDb, testDbKind } from "../../testkit/db";

let db: Db;

beforeEach(async () => {
  db = await createTestDb();
});

afterEach(async () => {
  await db?.close();
});

/** Every index of the schema with its definition. */
async function indexes() {
  const rows = await db.sql<{ indexname: string; indexdef: string }[]>`
    select indexname, indexdef from pg_indexes where schemaname = current_schema() order by indexname`;
  return rows.map((r) => `${r.indexname}: ${r.indexdef}`);
}

test(`deferring drops the secondary indexes and building restores exactly the migrations' (${testDbKind})`, async () => {
  const before = await indexes();
  const names = await deferIndexes(db.sql);
  expect(names.sort()).toEqual([...DEFERRABLE_INDEXES].sort());
  expect(await deferredIndexes(db.sql)).toEqual([...DEFERRABLE_INDEXES].sort());
  expect(await indexesDeferred(db.sql)).toBe(true);
  const during = await indexes();
  expect(during.length).toBe(before.length - DEFERRABLE_INDEXES.length);
  for (const n of DEFERRABLE_INDEXES) expect(during.some((d) => d.startsWith(`${n}:`))).toBe(false);
  // Deferring again finds nothing more to drop and keeps the recorded definitions.
  expect(await deferIndexes(db.sql)).toEqual([]);

  // Two builders at once (two chains' indexers): each index is built once and both succeed.
  const [a, b] = await Promise.all([buildDeferredIndexes(db.sql), buildDeferredIndexes(db.sql)]);
  expect([...a, ...b].sort()).toEqual([...DEFERRABLE_INDEXES].sort());
  expect(await indexes()).toEqual(before);
  expect(await indexesDeferred(db.sql)).toBe(false);
  expect(await buildDeferredIndexes(db.sql)).toEqual([]);
});

test(`a database that holds rows never loses an index (${testDbKind})`, async () => {
  const before = await indexes();
  await db.sql`insert into subscriptions (chain_id, subscription_id, module, merchant, subscriber, plan_id,
      max_executions, created_at, next_charge_at, block_number, log_index, tx_hash)
    values (1, 1, '0xm', '0xmerchant', '0xs', 1, 0, 0, 0, 1, 0, '0xt')`;
  expect(await deferIndexes(db.sql)).toEqual([]);
  expect(await indexes()).toEqual(before);
  expect(await indexesDeferred(db.sql)).toBe(false);
});

test("a recorded definition is rebuilt idempotently, unique or not", () => {
  expect(ifNotExists("CREATE INDEX a_idx ON public.a USING btree (x)")).toBe(
    "CREATE INDEX IF NOT EXISTS a_idx ON public.a USING btree (x)",
  );
  expect(ifNotExists("CREATE UNIQUE INDEX b_idx ON public.b USING btree (y)")).toBe(
    "CREATE UNIQUE INDEX IF NOT EXISTS b_idx ON public.b USING btree (y)",
  );
});

test(`a migration run builds the deferred indexes before any migration, and only then (${testDbKind})`, async () => {
  const before = await indexes();
  await deferIndexes(db.sql);
  // No migration pending (every process runs migrate at start): the backfill keeps its deferral.
  expect(await migrate(db.sql)).toEqual([]);
  expect(await indexesDeferred(db.sql)).toBe(true);

  // A new migration that relies on a deferred index: it fails unless the index is built first.
  const dir = mkdtempSync(join(tmpdir(), "migrations-"));
  try {
    cpSync(migrationsDir, dir, { recursive: true });
    writeFileSync(join(dir, "9999_use_deferred_index.sql"), "alter index activity_merchant_idx set (fillfactor = 90);");
    expect(await migrate(db.sql, dir)).toEqual(["9999_use_deferred_index.sql"]);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
  expect(await indexesDeferred(db.sql)).toBe(false);
  const after = await indexes();
  expect(after.length).toBe(before.length);
});
