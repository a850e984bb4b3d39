/**
 * A burst of deliveries refreshes the table's planner statistics (a drain of the outbox, a replay): with statistics
 * from before the burst the claim read an endpoint's whole backlog through the wrong index. A small drain does not.
 */
import { afterAll, beforeAll, expect, test } from "bun:test";
import type { Db } from "../../src/db/client";
import { drainFanOut, enqueueFanOut } from "../../src/webhooks/fanout";
import { DELIVERY_BURST } from "../../src/webhooks/burst-statistics";
import { replayToEndpoint } from "../../src/webhooks/resend";
import { createTestDb, testDbKind } from "../../testkit/db";
import { endpointForAll } from "../../testkit/webhooks";

const MERCHANT = "0x00000000000000000000000000000000000000b1";
let db: Db;

beforeAll(async () => {
  db = await createTestDb();
});
afterAll(async () => {
  await db?.close();
});

/** The planner's row count of `webhook_deliveries` (what the last ANALYZE saw; -1 or 0 before any). */
const plannerRows = async () =>
  (await db.sql<{ n: number }[]>`select reltuples::float8 as n from pg_class where relname = 'webhook_deliveries'`)[0]!
    .n;

/** Writes `n` events of the merchant in one transaction with their outbox row, as a batch does. */
async function writeEvents(n: number, from: number): Promise<void> {
  await db.sql.begin(async (tx) => {
    const rows = await tx<{ seq: string }[]>`
      insert into merchant_events (id, chain_id, merchant, type, block_number, log_index, ts, data)
      select 'evt_' || lpad(to_hex(g), 40, '0'), 1, ${MERCHANT}, 'charge.succeeded', g, 0, now(), '{"object":{}}'::jsonb
      from generate_series(${from}::int, ${from + n - 1}::int) g
      returning seq::text`;
    const seqs = rows.map((r) => BigInt(r.seq));
    await enqueueFanOut(tx, { chainId: 1, fromSeq: seqs[0]!, toSeq: seqs.at(-1)!, withdrawals: false });
  });
}

test(`a drain or a replay of a burst refreshes the deliveries' statistics; a small drain leaves them (${testDbKind})`, async () => {
  const endpoint = await endpointForAll(db.sql, MERCHANT, "https://example.com/hook");
  await writeEvents(10, 1);
  await db.sql`analyze webhook_deliveries`;
  await drainFanOut(db.sql);
  // Ten new rows: the statistics still count none.
  expect(await plannerRows()).toBeLessThanOrEqual(0);

  await writeEvents(DELIVERY_BURST, 100);
  await drainFanOut(db.sql);
  expect(await plannerRows()).toBe(DELIVERY_BURST + 10);

  // A replay re-enqueues what is no longer pending: mark everything sent, then replay it all.
  await db.sql`update webhook_deliveries set status = 'succeeded'`;
  const replayed = await replayToEndpoint(db.sql, MERCHANT, endpoint, { since: new Date("2000-01-01T00:00:00Z") });
  expect(replayed.enqueued).toBe(DELIVERY_BURST + 10);
  expect(await plannerRows()).toBe(2 * (DELIVERY_BURST + 10));
});
