import { afterAll, expect, test } from "bun:test";
import { existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { createDb, type Sql } from "../../src/db/client";
import { listMigrations, migrate } from "../../src/db/migrate";
import { extractTemplate, loadTemplate, readTemplate, templateFile } from "../../src/db/pglite-template";
import { PGlite } from "@electric-sql/pglite";

// These are about the embedded database: they run PGlite whichever database the suite is on.
const root = mkdtempSync(join(tmpdir(), "pglite-template-"));
afterAll(() => rmSync(root, { recursive: true, force: true }));

/** Everything the migrations define, as comparable text: columns, constraints, indexes, functions, triggers. */
async function schemaOf(sql: Sql): Promise<unknown> {
  return {
    columns: await sql`select table_name, column_name, data_type, column_default, is_nullable, ordinal_position
      from information_schema.columns where table_schema = 'public' order by table_name, ordinal_position`,
    constraints: await sql`select conrelid::regclass::text as t, conname, pg_get_constraintdef(oid) as def
      from pg_constraint where connamespace = 'public'::regnamespace order by 1, 2`,
    indexes: await sql`select tablename, indexname, indexdef from pg_indexes where schemaname = 'public' order by 1, 2`,
    functions: await sql`select proname, pg_get_functiondef(oid) as def from pg_proc
      where pronamespace = 'public'::regnamespace order by 1, 2`,
    triggers:
      await sql`select tgrelid::regclass::text as t, tgname from pg_trigger where not tgisinternal order by 1, 2`,
    sequences: await sql`select sequence_name from information_schema.sequences where sequence_schema = 'public'
      order by 1`,
    migrations: (await sql<{ name: string }[]>`select name from schema_migrations order by name`).map((r) => r.name),
  };
}

test("a data directory started from the template equals one from initdb and the migrations", async () => {
  const cache = join(root, "equal");
  const started = new Date();
  const fromTemplate = await createDb({ dataDir: join(root, "equal-a"), templateDir: cache });
  const fromInitdb = await createDb({ dataDir: join(root, "equal-b"), templateDir: false });
  try {
    expect(readdirSync(cache)).toEqual([templateFile(cache).slice(cache.length + 1)]);
    expect(await migrate(fromTemplate.sql)).toEqual([]);
    expect(await migrate(fromInitdb.sql)).toEqual(listMigrations().map((m) => m.name));
    const schema = await schemaOf(fromTemplate.sql);
    expect(schema).toEqual(await schemaOf(fromInitdb.sql));
    expect((schema as { migrations: string[] }).migrations).toHaveLength(listMigrations().length);
    // Recorded as applied when this database was created, not when the template was built.
    const [first] = await fromTemplate.sql<{ at: Date }[]>`select min(applied_at) as at from schema_migrations`;
    expect(first!.at.getTime()).toBeGreaterThanOrEqual(started.getTime() - 1_000);
    // The template is not used for a directory that already holds a cluster: its rows survive a reopen.
    await fromTemplate.sql`insert into chains (chain_id, processor, start_block) values (1, '0xabc', 0)`;
    await fromTemplate.close();
    const reopened = await createDb({ dataDir: join(root, "equal-a"), templateDir: cache });
    try {
      expect((await reopened.sql`select chain_id from chains`).map((r) => r.chain_id)).toEqual(["1"]);
    } finally {
      await reopened.close();
    }
  } finally {
    await fromTemplate.close().catch(() => {});
    await fromInitdb.close();
  }
}, 90_000);

test("a start killed while unpacking the template unpacks it again: the directory is not taken for a cluster", async () => {
  const cache = join(root, "equal"); // built by the first test
  const dir = join(root, "torn-db");
  await extractTemplate(readTemplate(templateFile(cache))!, dir);
  // What a kill part-way leaves: some files written, PG_VERSION (written last) not yet.
  rmSync(join(dir, "PG_VERSION"));
  rmSync(join(dir, "global"), { recursive: true });
  const db = await createDb({ dataDir: dir, templateDir: cache });
  try {
    expect(await migrate(db.sql)).toEqual([]);
    expect((await db.sql`select count(*)::int as n from pg_database`)[0]!.n).toBeGreaterThan(0);
  } finally {
    await db.close();
  }
}, 60_000);

test("a corrupt template is ignored and rebuilt", async () => {
  const cache = join(root, "corrupt");
  const file = templateFile(cache);
  await loadTemplate(cache);
  const stored = readFileSync(file);
  // A torn write (the first half) and one flipped byte both fail the check.
  writeFileSync(file, stored.subarray(0, stored.length >> 1));
  expect(readTemplate(file)).toBeUndefined();
  writeFileSync(file, Buffer.from(stored).fill(0x55, 1000, 1001));
  expect(readTemplate(file)).toBeUndefined();
  await loadTemplate(cache);
  expect(readTemplate(file)).toBeDefined();
  // The rebuilt template opens: a new data directory from it has every migration.
  const db = await createDb({ dataDir: join(root, "corrupt-db"), templateDir: cache });
  try {
    expect(await migrate(db.sql)).toEqual([]);
  } finally {
    await db.close();
  }
}, 90_000);

test("a template of other migrations is not used: another set of migrations gets its own, with its schema", async () => {
  const cache = join(root, "mismatch");
  const migrations = join(root, "migrations");
  mkdirSync(migrations);
  writeFileSync(join(migrations, "0001_create_probe.sql"), "create table probe (id int primary key);");
  const probeFile = templateFile(cache, migrations);
  expect(probeFile).not.toBe(templateFile(cache));
  await loadTemplate(cache, undefined, migrations);
  // Adding a migration changes the file: the stale one is not picked up.
  writeFileSync(join(migrations, "0002_add_probe_row.sql"), "insert into probe values (7);");
  const grown = templateFile(cache, migrations);
  expect(grown).not.toBe(probeFile);
  expect(existsSync(grown)).toBe(false);
  const archive = await loadTemplate(cache, undefined, migrations);
  expect(existsSync(grown)).toBe(true);
  const dir = join(root, "mismatch-db");
  await extractTemplate(archive, dir);
  const pg = await PGlite.create(dir);
  try {
    expect((await pg.query<{ id: number }>("select id from probe")).rows).toEqual([{ id: 7 }]);
    expect((await pg.query<{ name: string }>("select name from schema_migrations order by name")).rows).toEqual([
      { name: "0001_create_probe.sql" },
      { name: "0002_add_probe_row.sql" },
    ]);
  } finally {
    await pg.close();
  }
}, 90_000);

test("concurrent first starts each get a working database and leave one valid template", async () => {
  const cache = join(root, "concurrent");
  const client = join(import.meta.dir, "../../src/db/client.ts");
  const children = [1, 2].map((i) =>
    Bun.spawn(
      [
        process.execPath,
        "-e",
        `import { createDb } from ${JSON.stringify(client)};
         const db = await createDb({ dataDir: ${JSON.stringify(join(root, `concurrent-${i}`))},
           templateDir: ${JSON.stringify(cache)} });
         const [r] = await db.sql\`select count(*)::int as n from schema_migrations\`;
         console.log(r.n); await db.close();`,
      ],
      { stdout: "pipe", stderr: "pipe" },
    ),
  );
  const outputs = await Promise.all(
    children.map(async (c) => ({ code: await c.exited, out: (await new Response(c.stdout).text()).trim() })),
  );
  expect(outputs).toEqual(children.map(() => ({ code: 0, out: String(listMigrations().length) })));
  // Every writer renamed a complete file into place: one template, no temporary files, and it checks out.
  expect(readdirSync(cache)).toEqual([templateFile(cache).slice(cache.length + 1)]);
  expect(readTemplate(templateFile(cache))).toBeDefined();
}, 120_000);
