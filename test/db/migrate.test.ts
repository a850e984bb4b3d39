import { afterAll, beforeAll, expect, test } from "bun:test";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import type { Db } from "../../src/db/client";
import { listMigrations, migrate, MigrationError } from "../../src/db/migrate";
import { createTestDb, testDbKind } from "../../testkit/db";

let db: Db;
const dirs: string[] = [];
/** A folder of migration files for one test, removed after the file's tests. */
const migrationsFolder = (prefix: string) => {
  dirs.push(mkdtempSync(join(tmpdir(), prefix)));
  return dirs.at(-1)!;
};

beforeAll(async () => {
  db = await createTestDb();
}, 60_000);

afterAll(async () => {
  await db?.close();
  for (const dir of dirs) rmSync(dir, { recursive: true, force: true });
});

test("migration files are NNNN_verb_noun.sql with unique, increasing numbers", () => {
  const names = listMigrations().map((m) => m.name);
  expect(names[0]).toStartWith("0001_");
  const numbers = names.map((n) => Number(n.slice(0, 4)));
  expect(new Set(numbers).size).toBe(numbers.length);
  expect([...numbers].sort((a, b) => a - b)).toEqual(numbers);
});

test("every migration is recorded once and a second run applies nothing", async () => {
  const rows = await db.sql<{ name: string }[]>`select name from schema_migrations order by name`;
  expect(rows.map((r) => r.name)).toEqual(listMigrations().map((m) => m.name));
  expect(await migrate(db.sql)).toEqual([]);
});

test("concurrent runs serialize on the lock: each migration applied exactly once", async () => {
  const dir = migrationsFolder("migrations-");
  writeFileSync(
    join(dir, "0001_create_probe.sql"),
    "create table probe (id int primary key);\ninsert into probe values (1);",
  );
  writeFileSync(join(dir, "0002_add_probe_row.sql"), "insert into probe values (2);");
  // On Postgres these race on separate pooled connections; on PGlite they queue on its one session.
  const results = await Promise.all([migrate(db.sql, dir), migrate(db.sql, dir), migrate(db.sql, dir)]);
  expect(results.flat().sort()).toEqual(["0001_create_probe.sql", "0002_add_probe_row.sql"]);
  const probe = await db.sql<{ id: number }[]>`select id from probe order by id`;
  expect(probe.map((r) => r.id)).toEqual([1, 2]);
});

test("a failing migration is reported by name and leaves nothing behind", async () => {
  const dir = migrationsFolder("migrations-bad-");
  writeFileSync(join(dir, "0001_create_half.sql"), "create table half (id int);\nselect no_such_function();");
  const run = migrate(db.sql, dir);
  await expect(run).rejects.toThrow(MigrationError);
  await expect(migrate(db.sql, dir)).rejects.toThrow("0001_create_half.sql");
  const [t] = await db.sql<{ n: number }[]>`
    select count(*)::int as n from information_schema.tables where table_name = 'half'`;
  expect(t.n).toBe(0);
  const [m] = await db.sql<
    { n: number }[]
  >`select count(*)::int as n from schema_migrations where name = '0001_create_half.sql'`;
  expect(m.n).toBe(0);
});

test("pending files go together; when one fails, it is named and the run leaves nothing behind", async () => {
  const dir = migrationsFolder("migrations-together-");
  writeFileSync(join(dir, "0001_create_first.sql"), "create table first_probe (id int);\n-- no semicolon after this");
  writeFileSync(join(dir, "0002_create_second.sql"), "create table second_probe (id int);\nselect no_such_function();");
  writeFileSync(join(dir, "0003_create_third.sql"), "create table third_probe (id int);");
  await expect(migrate(db.sql, dir)).rejects.toThrow(
    new MigrationError("migration 0002_create_second.sql failed: function no_such_function() does not exist"),
  );
  const tables = async () =>
    (
      await db.sql<{ name: string }[]>`
        select table_name as name from information_schema.tables where table_name like '%\_probe' order by 1`
    ).map((r) => r.name);
  expect(await tables()).toEqual([]);
  const recorded = async () =>
    (await db.sql<{ name: string }[]>`select name from schema_migrations where name like '000%\_create\_%d.sql'`)
      .length;
  expect(await recorded()).toBe(0);

  writeFileSync(join(dir, "0002_create_second.sql"), "create table second_probe (id int);");
  expect(await migrate(db.sql, dir)).toEqual([
    "0001_create_first.sql",
    "0002_create_second.sql",
    "0003_create_third.sql",
  ]);
  expect(await tables()).toEqual(["first_probe", "second_probe", "third_probe"]);
  expect(await migrate(db.sql, dir)).toEqual([]);
});

test(`numeric(78,0) round-trips uint256 exactly (${testDbKind})`, async () => {
  const max = (2n ** 256n - 1n).toString();
  const [r] = await db.sql<{ v: string }[]>`select ${max}::numeric(78,0) as v`;
  expect(r.v).toBe(max);
});

test("0018 gives attempts recorded before it a receipt: a success delivered, an answered failure rejected, any other unknown", async () => {
  // The database as it was before 0018, holding attempts of the three kinds the old code recorded.
  await db.sql`alter table webhook_attempts drop column receipt`;
  await db.sql`delete from schema_migrations where name = '0018_add_attempt_receipt.sql'`;
  await db.sql`
    insert into webhook_endpoints (id, merchant, url, event_types, secret)
    values ('we_old', '0x00000000000000000000000000000000000000aa', 'https://example.com/', '{*}', 'whsec_x')`;
  await db.sql`
    insert into webhook_deliveries (id, endpoint_id, event_seq, event_id, event_type, attempts)
    values ('wd_old', 'we_old', 1, 'evt_old', 'charge.succeeded', 4)`;
  await db.sql`
    insert into webhook_attempts (delivery_id, attempt, endpoint_id, outcome, response_status, error, duration_ms)
    values ('wd_old', 1, 'we_old', 'failed', 500, 'HTTP 500', 3), ('wd_old', 2, 'we_old', 'failed', null, 'timeout after 10000 ms', 10000),
      ('wd_old', 3, 'we_old', 'failed', 302, 'redirect (not followed)', 3), ('wd_old', 4, 'we_old', 'succeeded', 200, null, 3)`;
  expect(await migrate(db.sql)).toEqual(["0018_add_attempt_receipt.sql"]);
  const rows = await db.sql<{ receipt: string }[]>`
    select receipt from webhook_attempts where delivery_id = 'wd_old' order by attempt`;
  expect(rows.map((r) => r.receipt)).toEqual(["rejected", "unknown", "rejected", "delivered"]);
});
