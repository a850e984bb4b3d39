/**
 * A streamed export is one snapshot: a rollback of the index below the stream's indexed block (X-Indexed-Block)
 * while it is read stops it with an error trailer; a rollback that keeps that block does not.
 */
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { CHAIN_A, INDEXED_BLOCK_A } from "../../testkit/seed";
import { BIG, seedBigMerchant } from "../../testkit/bulk";
import { admin, startSeededApp, type SeededApp } from "../../testkit/app";

const RECORDS = 50_000;

let s: SeededApp;
beforeAll(async () => {
  s = await startSeededApp();
  await seedBigMerchant(s.db.sql, { activity: RECORDS, subscriptions: 10 });
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
async function exportWith(format: "json" | "csv", between: () => Promise<void>) {
  const res = await s.app.handle(
    new Request(`http://localhost/v0/activity/${BIG}?format=${format}`, { headers: admin }),
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
});
