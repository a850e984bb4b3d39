/**
 * What an operator sees of the fan-out outbox: `bun run status` counts its ranges and flags one that waited long with
 * no catch-up holding it (no process drains it), and `webhook_fanout_backlog` counts them; a drain clears both.
 */
import { afterAll, beforeAll, expect, test } from "bun:test";
import { formatStatus } from "../../src/cli/status";
import { loadConfig } from "../../src/common/config";
import type { Db } from "../../src/db/client";
import { gatherStatus } from "../../src/http/features/control/status";
import { createMetrics } from "../../src/metrics";
import { drainFanOut } from "../../src/webhooks/fanout";
import { createTestDb, testDbKind } from "../../testkit/db";

const CHAIN = 7;
let db: Db;

beforeAll(async () => {
  db = await createTestDb();
  await db.sql`insert into chains (chain_id, processor, start_block) values (${CHAIN}, '0x00', 0)`;
});
afterAll(async () => {
  await db?.close();
});

/** The attention lines about the outbox (the bare chain row brings its own). */
const outbox = (attention: string[]) => attention.filter((a) => a.includes("outbox"));

async function gauge(): Promise<number> {
  const text = await createMetrics({ sql: db.sql, poolMax: null }).registry.metrics();
  return Number(/^webhook_fanout_backlog (\d+)$/m.exec(text)![1]);
}

test(`the outbox's backlog shows, and a range no catch-up holds is flagged once it waited 5 min (${testDbKind})`, async () => {
  const config = loadConfig({});
  const empty = await gatherStatus(db.sql, config);
  expect(empty.webhooks).toMatchObject({ queued_ranges: 0, oldest_ready_range_age_s: null });
  expect(formatStatus(empty)).not.toContain("waiting for their deliveries");
  expect(await gauge()).toBe(0);

  // A range queued 10 minutes ago, its chain catching up (the cursor moved just now): held, not a matter of attention.
  await db.sql`insert into webhook_fanout_queue (chain_id, from_seq, to_seq, withdrawals, queued_at)
    values (${CHAIN}, 1, 2, false, now() - interval '10 minutes')`;
  await db.sql`update chains set catching_up = true, updated_at = now() where chain_id = ${CHAIN}`;
  const held = await gatherStatus(db.sql, config);
  expect(held.webhooks).toMatchObject({ queued_ranges: 1, oldest_ready_range_age_s: null });
  expect(outbox(held.attention)).toEqual([]);
  expect(formatStatus(held)).toContain(
    "1 ranges of events waiting for their deliveries (held while a chain catches up)",
  );
  expect(await gauge()).toBe(1);

  // The chain reached the head and nothing drained the range.
  await db.sql`update chains set catching_up = false where chain_id = ${CHAIN}`;
  const stale = await gatherStatus(db.sql, config);
  expect(stale.webhooks.queued_ranges).toBe(1);
  expect(stale.webhooks.oldest_ready_range_age_s).toBeGreaterThanOrEqual(600);
  expect(outbox(stale.attention)).toEqual([
    "the webhook fan-out outbox has waited 10 min: is a process with the webhooks role running?",
  ]);

  expect(await drainFanOut(db.sql)).toBe(false);
  const drained = await gatherStatus(db.sql, config);
  expect(drained.webhooks).toMatchObject({ queued_ranges: 0, oldest_ready_range_age_s: null });
  expect(outbox(drained.attention)).toEqual([]);
  expect(await gauge()).toBe(0);
});
