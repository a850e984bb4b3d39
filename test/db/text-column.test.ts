import { afterAll, beforeAll, expect, test } from "bun:test";
import type { Db } from "../../src/db/client";
import { textColumn } from "../../src/db/query";
import { createTestDb, testDbKind } from "../../testkit/db";

let db: Db;
beforeAll(async () => {
  db = await createTestDb();
});
afterAll(async () => {
  await db.close();
});

/** The column back from the database, and the statement text that carried it. */
async function roundTrip(values: (string | null)[]) {
  const q = db.sql`select x from unnest(${textColumn(db.sql, values)}) with ordinality as u(x, n) order by n`;
  const rows = await q;
  return {
    back: rows.map((r) => r.x as string | null),
    statement: (rows as unknown as { statement: { string: string } }).statement.string,
  };
}

test(`a bulk column goes as one text split in SQL, nulls, empty values, quotes and JSON intact (${testDbKind})`, async () => {
  const values = ["0xab", null, "", '{"a":"b, c","d":"\\u001f"}', 'quote " and \\ backslash', "NULL", " spaced "];
  const { back, statement } = await roundTrip(values);
  expect(back).toEqual(values);
  expect(statement).toContain("string_to_array(");
});

test("a value holding a separator, or a single value, goes as an array parameter instead", async () => {
  for (const values of [["a\x1fb", "c"], ["a", "\x1e"], [""], [null]]) {
    const { back, statement } = await roundTrip(values);
    expect(back).toEqual(values);
    expect(statement).not.toContain("string_to_array(");
  }
});
