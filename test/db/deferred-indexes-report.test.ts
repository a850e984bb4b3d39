/**
 * What an operator sees during an initial backfill: `bun run status` names the secondary indexes left out (expected,
 * so not a matter of attention) and `indexer_deferred_indexes` counts them; both clear once they are built.
 */
import { afterAll, beforeAll, expect, test } from "bun:test";
import { formatStatus } from "../../src/cli/status";
import { loadConfig } from "../../src/common/config";
import type { Db } from "../../src/db/client";
import { buildDeferredIndexes, deferIndexes, DEFERRABLE_INDEXES } from "../../src/db/deferred-indexes";
import { gatherStatus } from "../../src/http/features/control/status";
import { createMetrics } from "../../src/metrics";
import { createTestDb, testDbKind } from "../../testkit/db";

let db: Db;

beforeAll(async () => {
  db = await createTestDb();
});

afterAll(async () => {
  await db?.close();
});

/** The gauge's value in a scrape of a fresh registry. */
async function gauge(): Promise<number> {
  const text = await createMetrics({ sql: db.sql, poolMax: null }).registry.metrics();
  return Number(/^indexer_deferred_indexes (\d+)$/m.exec(text)![1]);
}

test(`the indexes an initial backfill left out show until they are built (${testDbKind})`, async () => {
  const config = loadConfig({});
  expect(await gauge()).toBe(0);
  await deferIndexes(db.sql);
  expect(await gauge()).toBe(DEFERRABLE_INDEXES.length);
  const during = await gatherStatus(db.sql, config);
  expect(during.deferred_indexes).toEqual([...DEFERRABLE_INDEXES].sort());
  expect(during.attention).toEqual([]);
  const screen = formatStatus(during);
  expect(screen).toContain(
    `indexes  ${DEFERRABLE_INDEXES.length} left out until the initial backfill reaches the head`,
  );
  expect(screen).toContain("activity_merchant_idx");

  await buildDeferredIndexes(db.sql);
  const after = await gatherStatus(db.sql, config);
  expect(after.deferred_indexes).toEqual([]);
  expect(await gauge()).toBe(0);
  expect(formatStatus(after)).not.toContain("left out until");
});
