/**
 * The activity record rendered by Postgres (src/domain/records.ts activityRecordSql, src/db/render.ts, the CSV SQL of
 * src/http/csv.ts) equals its TypeScript twin byte for byte: `JSON.stringify(toActivityRecord(row))` and the CSV
 * line of ACTIVITY_CSV_COLUMNS, over random rows of every type (amounts up to 2^256 - 1, any token decimals or none,
 * symbols and reasons of arbitrary text with quotes, commas, line breaks, control characters and formula starts).
 */
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import fc from "fast-check";
import type { Db } from "../../../src/db/client";
import {
  selectActivity,
  selectChunkEnds,
  selectRenderedActivity,
  selectRenderedChunk,
  toActivityRecord,
  type ActivityQuery,
} from "../../../src/http/features/activity/service";
import { ACTIVITY_CSV_COLUMNS } from "../../../src/http/features/activity/model";
import { csvLines } from "../../../src/http/csv";
import { RENDERED_PIECE_ROWS } from "../../../src/http/stream";
import { createTestDb } from "../../../testkit/db";
import { insertActivity, insertToken, type ActivitySeed } from "../../../testkit/seed";

const CHAIN = 7;
const MERCHANT = "0x" + "ab".repeat(20);
const ROWS = 600;

let db: Db;
beforeAll(async () => {
  db = await createTestDb();
}, 60_000);
afterAll(async () => {
  await db?.close();
}, 60_000);

const hex = (bytes: number) =>
  fc.uint8Array({ minLength: bytes, maxLength: bytes }).map((b) => "0x" + Buffer.from(b).toString("hex"));
/** Text Postgres can hold (no NUL), biased to what JSON and CSV must escape. */
const text = fc.oneof(
  fc.string({
    unit: fc.constantFrom('"', ",", "\r", "\n", "\t", "\\", "=", "+", "-", "@", "'", "\u0001", "\u001f", "a"),
  }),
  fc.string({ unit: "grapheme" }),
  fc.string({ unit: "binary" }).map((s) => s.replaceAll("\u0000", "").toWellFormed()),
);
const uint = (max: bigint) => fc.bigInt({ min: 0n, max }).map(String);
const UINT256 = 2n ** 256n - 1n;

/** Tokens: random symbols and decimals (0–80, or none), some without metadata; one address stays unknown. */
const tokenArb = fc.record({
  symbol: fc.option(text, { nil: null }),
  decimals: fc.option(fc.integer({ min: 0, max: 80 }), { nil: null }),
});

describe("Postgres renders the activity record as TypeScript does", () => {
  test("JSON and CSV, row by row and as keyset chunks, over random rows", async () => {
    const tokens = fc.sample(tokenArb, { numRuns: 12, seed: 19 });
    const addresses = tokens.map((_, i) => "0x" + String(i + 1).padStart(40, "0"));
    for (const [i, t] of tokens.entries()) await insertToken(db.sql, { chain_id: CHAIN, address: addresses[i]!, ...t });
    const row = fc.record({
      tx_hash: hex(32),
      block_time: fc.date({
        min: new Date("1970-01-01T00:00:00Z"),
        max: new Date("9999-12-31T23:59:59.999Z"),
        noInvalidDate: true,
      }),
      module: hex(20),
      subscription_id: uint(UINT256),
      type: fc.constantFrom("CHARGE" as const, "FAIL" as const, "REFILL" as const),
      token: fc.option(fc.constantFrom(...addresses, "0x" + "9".repeat(40)), { nil: null }),
      amount: fc.oneof(uint(UINT256), uint(10n ** 30n), fc.constant("0")),
      fee: fc.option(uint(UINT256), { nil: null }),
      reason: fc.option(text, { nil: null }),
      keeper: fc.option(hex(20), { nil: null }),
      permission_hash: fc.option(hex(32), { nil: null }),
    });
    const rows: ActivitySeed[] = fc.sample(row, { numRuns: ROWS, seed: 5 }).map((r, i) => ({
      ...r,
      chain_id: CHAIN,
      block_number: 100 + Math.floor(i / 3),
      log_index: i % 3,
      merchant: MERCHANT,
    }));
    await insertActivity(db.sql, rows);

    for (const order of ["asc", "desc"] as const) {
      const q: ActivityQuery = { merchant: MERCHANT, chainId: CHAIN, order };
      const records = (await selectActivity(db.sql, q, undefined)).map(toActivityRecord);
      expect(records.length).toBe(ROWS);
      const decode = (b: Uint8Array) => new TextDecoder().decode(b);
      const json = await selectRenderedActivity(db.sql, q, undefined, "json");
      const csv = await selectRenderedActivity(db.sql, q, undefined, "csv");
      for (const [i, record] of records.entries()) {
        expect(decode(json[i]![3])).toBe(JSON.stringify(record));
        expect(decode(csv[i]![3])).toBe(csvLines(ACTIVITY_CSV_COLUMNS, [record]));
      }
      // A chunk is the rows' texts in chain order, in pieces each led by the separator (JSON: a comma); the last
      // position is its last row's.
      const chunk = await selectRenderedChunk(db.sql, { ...q, after: undefined }, 250, "json");
      expect(chunk.rows).toBe(250);
      expect(chunk.texts.length).toBe(Math.ceil(250 / RENDERED_PIECE_ROWS));
      expect(chunk.texts.map(decode).join("")).toBe(
        "," +
          records
            .slice(0, 250)
            .map((r) => JSON.stringify(r))
            .join(","),
      );
      expect(chunk.last).toEqual({
        blockNumber: records[249]!.block_number,
        logIndex: Number(records[249]!.event_id.split(":")[2]),
      });
      const csvChunk = await selectRenderedChunk(db.sql, { ...q, after: chunk.last }, 1000, "csv");
      expect(csvChunk.rows).toBe(ROWS - 250);
      expect(csvChunk.texts.map(decode).join("")).toBe(csvLines(ACTIVITY_CSV_COLUMNS, records.slice(250)));
      const empty = await selectRenderedChunk(db.sql, { ...q, after: csvChunk.last }, 1000, "json");
      expect(empty).toEqual({ texts: [], rows: 0, last: undefined });

      // Chunk ends: every 50th record's position after `after`, at most `count`, fewer where the list ends (with a
      // type filter too: the ends of the filtered list).
      const position = (r: (typeof records)[number]) => ({
        blockNumber: r.block_number,
        logIndex: Number(r.event_id.split(":")[2]),
      });
      expect(await selectChunkEnds(db.sql, { ...q, after: position(records[9]!) }, 50, 4)).toEqual(
        [59, 109, 159, 209].map((i) => position(records[i]!)),
      );
      expect(await selectChunkEnds(db.sql, { ...q, after: position(records[480]!) }, 50, 4)).toEqual(
        [530, 580].map((i) => position(records[i]!)),
      );
      const charges = records.filter((r) => r.type === "CHARGE");
      expect(await selectChunkEnds(db.sql, { ...q, type: "CHARGE", after: position(charges[0]!) }, 30, 3)).toEqual(
        [30, 60, 90].map((i) => position(charges[i]!)),
      );
    }
  }, 120_000);
});
