/**
 * The SQL text builders of src/db/render.ts: concatSql joins its parts as a balanced `||` tree with adjacent literals
 * merged (a left-to-right chain copies the growing text at every step), and jsonObjectSql leaves `coalesce` out for
 * the fields that are never null; both render what they must.
 */
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import type { Db } from "../../src/db/client";
import { concatSql, jsonObjectSql, type ConcatPart } from "../../src/db/render";
import type { SqlField, SqlFragment } from "../../src/domain/records";
import { formatUnits, formatUnitsSql } from "../../src/http/csv";
import { createTestDb } from "../../testkit/db";

let db: Db;
beforeAll(async () => {
  db = await createTestDb();
}, 60_000);
afterAll(async () => {
  await db?.close();
}, 60_000);

/** Runs `select <expr> as v`, returning the value and the SQL text the server was sent. */
async function run(expr: SqlFragment): Promise<{ value: string | null; text: string }> {
  let text = "";
  const options = db.sql.options as { debug?: unknown };
  options.debug = (_id: number, query: string) => {
    if (query.endsWith(" as v")) text = query; // not postgres.js's own queries (its array types on first use)
  };
  try {
    const [row] = await db.sql<{ v: string | null }[]>`select ${expr} as v`;
    return { value: row!.v, text };
  } finally {
    options.debug = undefined;
  }
}

/** Deepest nesting of parentheses in `text` (string literals skipped). */
function depth(text: string): number {
  let max = 0;
  let level = 0;
  let quoted = false;
  for (const c of text) {
    if (c === "'") quoted = !quoted;
    else if (!quoted && c === "(") max = Math.max(max, ++level);
    else if (!quoted && c === ")") level--;
  }
  return max;
}

describe("concatSql", () => {
  test("joins literals and expressions, adjacent literals merged, as a balanced tree", async () => {
    const sql = db.sql;
    const parts: ConcatPart[] = [];
    for (let i = 0; i < 16; i++) parts.push(`<${i}`, "|", sql`${String(i)}::text`);
    parts.push("end");
    const { value, text } = await run(concatSql(sql, parts));
    expect(value).toBe(Array.from({ length: 16 }, (_, i) => `<${i}|${i}`).join("") + "end");
    // 33 parts after merging ("<i" and "|" are one literal): a chain nests 1 deep, a balanced tree ~log2(33) + 1.
    expect(text).not.toContain("'|'");
    expect(depth(text)).toBeGreaterThanOrEqual(6);
    expect(depth(text)).toBeLessThanOrEqual(8);
  });

  test("null when an expression part is null; literals only; nothing", async () => {
    const sql = db.sql;
    expect((await run(concatSql(sql, ["a", sql`null::text`, "b"]))).value).toBeNull();
    expect((await run(concatSql(sql, ["a", "b'c"]))).value).toBe("ab'c");
    expect((await run(concatSql(sql, []))).value).toBe("");
  });
});

describe("jsonObjectSql", () => {
  test("JSON.stringify of the fields; no coalesce around a field that is never null", async () => {
    const sql = db.sql;
    const fields: SqlField[] = [
      { name: "id", kind: "plain", notNull: true, sql: sql`'0xab'::text` },
      { name: "maybe", kind: "plain", sql: sql`null::text` },
      { name: "n", kind: "number", sql: sql`7` },
      { name: "s", kind: "string", sql: sql`E'a"b\\n'::text` },
    ];
    const { value, text } = await run(jsonObjectSql(sql, fields));
    expect(value).toBe(JSON.stringify({ id: "0xab", maybe: null, n: 7, s: 'a"b\n' }));
    expect(text.match(/coalesce/g)?.length).toBe(3);
    expect(text).toContain(`'{"id":"'`);
  });
});

describe("formatUnitsSql", () => {
  test("equals formatUnits for decimals 0–100 (the constant units and beyond them) and null", async () => {
    const sql = db.sql;
    const amounts = ["0", "1", "1234500", "10000000", (2n ** 256n - 1n).toString()];
    const decimals = [...Array.from({ length: 101 }, (_, d) => d), null];
    const rows = await sql<{ a: string; d: number | null; v: string }[]>`
      select a, d, ${formatUnitsSql(sql, sql`a::numeric`, sql`d`)} as v
      from unnest(${amounts}::text[]) a, unnest(${decimals}::int[]) d`;
    expect(rows.length).toBe(amounts.length * decimals.length);
    for (const r of rows) expect(r.v).toBe(formatUnits(r.a, r.d));
    const [none] = await sql<{ v: string }[]>`select ${formatUnitsSql(sql, sql`null::numeric`, sql`6`)} as v`;
    expect(none!.v).toBe("");
  });
});
