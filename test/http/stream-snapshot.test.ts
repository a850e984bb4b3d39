/**
 * A streamed export is one snapshot: a rollback of the index below the stream's indexed block (X-Indexed-Block)
 * while it is read stops it with an error trailer; a rollback that keeps that block does not.
 */
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { CHAIN_A, INDEXED_BLOCK_A } from "../../testkit/seed";
import { BIG, seedBigMerchant } from "../../testkit/bulk";
import { admin, startSeededApp, type SeededApp } from "../../testkit/app";
import { testDbKind } from "../../testkit/db";

const RECORDS = 50_000;
const ALLOCATIONS = 3_000;

let s: SeededApp;
beforeAll(async () => {
  s = await startSeededApp();
  await seedBigMerchant(s.db.sql, { activity: RECORDS, subscriptions: ALLOCATIONS });
}, 60_000);
afterAll(async () => {
  await s?.close();
});

const decoder = new TextDecoder();

/** The body read to its end or its failure: the text and whether it failed. */
async function drain(reader: ReadableStreamDefaultReader<Uint8Array>, text = "") {
  try {
    for (;;) {
      const { value, done } = await reader.read();
      if (done) return { text: text + decoder.decode(), failed: false };
      text += decoder.decode(value, { stream: true });
    }
  } catch {
    return { text, failed: true };
  }
}

/** Starts the streamed export of `format`, reads its first chunk, runs `between`, then reads the rest. */
async function exportWith(format: "json" | "csv", between: () => Promise<void>, list = "activity") {
  const res = await s.app.handle(
    new Request(`http://localhost/v0/${list}/${BIG}?format=${format}`, { headers: admin }),
  );
  expect(res.status).toBe(200);
  expect(res.headers.get("x-indexed-block")).toBe(String(INDEXED_BLOCK_A));
  const reader = res.body!.getReader();
  const first = await reader.read();
  await between();
  return drain(reader, decoder.decode(first.value, { stream: true }));
}

const setCursor = (block: number) =>
  s.db.sql`update chains set indexed_block = ${block}, updated_at = now() where chain_id = ${CHAIN_A}`;

describe("streamed exports are one snapshot", () => {
  for (const format of ["json", "csv"] as const) {
    test(`${format}: a rollback below the indexed block mid-way ends the body with an error trailer, aborted`, async () => {
      try {
        const out = await exportWith(format, async () => void (await setCursor(3000)));
        expect(out.failed).toBe(true);
        expect(out.text).toContain("reorg_during_export");
        expect(out.text).toContain(`below block ${INDEXED_BLOCK_A}`);
        if (format === "json") expect(() => JSON.parse(out.text)).toThrow();
      } finally {
        await setCursor(INDEXED_BLOCK_A);
      }
    });
  }

  test("a rollback that keeps the indexed block does not stop it: every record, complete", async () => {
    try {
      const out = await exportWith("json", async () => {
        await setCursor(INDEXED_BLOCK_A + 100);
        await setCursor(INDEXED_BLOCK_A + 50); // a reorg of the tip, above the export's block
      });
      expect(out.failed).toBe(false);
      expect((JSON.parse(out.text) as unknown[]).length).toBe(RECORDS);
    } finally {
      await setCursor(INDEXED_BLOCK_A);
    }
  });

  test("the subscriptions export reads one REPEATABLE READ snapshot over a pool (PGlite's one session: current rows)", async () => {
    const last = `${1_000_000 + ALLOCATIONS - 1}`;
    const spent = async () =>
      (
        await s.db.sql<{ total_spent: string }[]>`
          select total_spent::text from subscriptions where chain_id = ${CHAIN_A} and subscription_id = ${last}`
      )[0]!.total_spent;
    const before = await spent();
    try {
      const out = await exportWith(
        "json",
        async () => {
          // A batch charges the last allocation after the export started (its headers name the block before).
          await s.db.sql.begin(async (tx) => {
            await tx`update subscriptions set total_spent = total_spent + 777
              where chain_id = ${CHAIN_A} and subscription_id = ${last}`;
            await tx`update chains set indexed_block = ${INDEXED_BLOCK_A + 1} where chain_id = ${CHAIN_A}`;
          });
        },
        "subscriptions",
      );
      expect(out.failed).toBe(false);
      const rows = JSON.parse(out.text) as { on_chain_id: string; total_spent: string }[];
      expect(rows.length).toBe(ALLOCATIONS);
      const row = rows.find((r) => r.on_chain_id === last)!;
      const after = await spent();
      expect(after).not.toBe(before);
      // As of X-Indexed-Block over a pool; PGlite reads the current row (a transaction would hold its one session).
      expect(row.total_spent).toBe(testDbKind === "postgres" ? before : after);
    } finally {
      await s.db.sql`update subscriptions set total_spent = ${before}::numeric
        where chain_id = ${CHAIN_A} and subscription_id = ${last}`;
      await setCursor(INDEXED_BLOCK_A);
    }
  });
});
