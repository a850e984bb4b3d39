import { afterAll, beforeAll, expect, test } from "bun:test";
import { PGlite } from "@electric-sql/pglite";
import postgres from "postgres";
import { pgliteSocket } from "../../src/db/pglite-wire";

// The in-process connection to PGlite: it runs whichever database the suite is on.
let pg: PGlite;

beforeAll(async () => {
  pg = await PGlite.create("memory://");
}, 60_000);

afterAll(async () => {
  await pg?.close();
});

const connect = () =>
  postgres("postgres://postgres@pglite/postgres", {
    max: 1,
    onnotice: () => {},
    socket: pgliteSocket(pg),
  } as postgres.Options<{}>);

test("a message larger than any one write, and many pipelined queries, come back whole and in order", async () => {
  const sql = connect();
  try {
    const big = "x".repeat(3_000_000) + "é";
    const [r] = await sql<{ n: number; tail: string }[]>`select length(${big}) as n, right(${big}, 2) as tail`;
    expect(r).toEqual({ n: 3_000_001, tail: "xé" });
    const answers = await Promise.all(
      Array.from({ length: 200 }, (_, i) => sql<{ v: number }[]>`select ${i}::int * 2 as v`),
    );
    expect(answers.map((a) => a[0]!.v)).toEqual(Array.from({ length: 200 }, (_, i) => i * 2));
    const error = await sql`select 1 / 0`.catch((e) => e);
    expect((error as { code?: string }).code).toBe("22012");
    expect((await sql`select 'after the error' as s`)[0]!.s).toBe("after the error");
  } finally {
    await sql.end();
  }
});

test("a connection that ends inside a transaction leaves no transaction to the next one", async () => {
  const first = connect();
  await first.unsafe("begin");
  await first.unsafe("create table wire_probe (x int)");
  expect(pg.isInTransaction()).toBe(true);
  await first.end();
  expect(pg.isInTransaction()).toBe(false);
  const next = connect();
  try {
    expect((await next`select to_regclass('wire_probe')::text as t`)[0]!.t).toBeNull();
  } finally {
    await next.end();
  }
});
