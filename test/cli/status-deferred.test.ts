/**
 * `bun run status` during an initial backfill: the secondary indexes left out are reported by name (expected, so not
 * a matter of attention), and the line goes once they are built.
 */
import { afterAll, beforeAll, expect, test } from "bun:test";
import { formatStatus } from "../../src/cli/status";
import { loadConfig } from "../../src/common/config";
import type { Db } from "../../src/db/client";
import { buildDeferredIndexes, deferIndexes, DEFERRABLE_INDEXES } from "../../src/db/deferred-indexes";
import { gatherStatus } from "../../src/http/features/control/status";
import { createTestDb, testDbKind } from "../../testkit/db";

let db: Db;

beforeAll(async () => {
  db = await createTestDb();
});

afterAll(async () => {
  await db?.close();
});

test(`the indexes an initial backfill left out show until they are built (${testDbKind})`, async () => {
  const config = loadConfig({});
  await deferIndexes(db.sql);
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
  expect(formatStatus(after)).not.toContain("left out until");
});
