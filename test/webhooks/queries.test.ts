/**
 * The claim after a burst has been sent: the planner's statistics still see every delivery pending (taken when the
 * burst was created), and the claim must still find each endpoint's due work through its index, not by scanning the
 * deliveries already sent.
 */
import { afterAll, beforeAll, expect, test } from "bun:test";
import type { Db } from "../../src/db/client";
import { drainFanOut, enqueueFanOut } from "../../src/webhooks/fanout";
import { claimDue } from "../../src/webhooks/queries";
import { createTestDb, testDbKind } from "../../testkit/db";
import { endpointForAll } from "../../testkit/webhooks";

const MERCHANT = "0x00000000000000000000000000000000000000c1";
const ENDPOINTS = 16;
const EVENTS = 1_000;
let db: Db;

beforeAll(async () => {
  db = await createTestDb();
});
afterAll(async () => {
  await db?.close();
});

test(`a claim after a sent burst reads the due index, not the sent deliveries (${testDbKind})`, async () => {
  for (let i = 0; i < ENDPOINTS; i++) await endpointForAll(db.sql, MERCHANT, `https://example.com/hook/${i}`);
  await db.sql.begin(async (tx) => {
    const rows = await tx<{ seq: string }[]>`
      insert into merchant_events (id, chain_id, merchant, type, block_number, log_index, ts, data)
      select 'evt_' || lpad(to_hex(g), 40, '0'), 1, ${MERCHANT}, 'charge.succeeded', g, 0, now(), '{"object":{}}'::jsonb
      from generate_series(1, ${EVENTS}::int) g
      returning seq::text`;
    await enqueueFanOut(tx, {
      chainId: 1,
      fromSeq: BigInt(rows[0]!.seq),
      toSeq: BigInt(rows.at(-1)!.seq),
      withdrawals: false,
    });
  });
  // The drain analyzes the burst: the statistics now say every delivery is pending.
  while (await drainFanOut(db.sql));
  expect((await db.sql`select count(*)::int as n from webhook_deliveries`)[0]!.n).toBe(ENDPOINTS * EVENTS);
  // All sent but each endpoint's last one, which sits at the far end of the table.
  const [last] = await db.sql<{ seq: string }[]>`select max(event_seq)::text as seq from webhook_deliveries`;
  await db.sql`update webhook_deliveries set status = 'succeeded' where event_seq < ${last!.seq}`;

  // The connection's counts not yet flushed to the shared statistics (earlier transactions' included): read around it.
  const { claimed, seqScans } = await db.sql.begin(async (tx) => {
    const seqScans = async () =>
      (
        await tx<{ n: number }[]>`
          select seq_scan::int as n from pg_stat_xact_user_tables where relname = 'webhook_deliveries'`
      )[0]!.n;
    const before = await seqScans();
    const claimed = await claimDue(tx as unknown as typeof db.sql, { limit: 64, perEndpoint: 4, leaseMs: 60_000 });
    return { claimed, seqScans: (await seqScans()) - before };
  });
  expect(claimed.length).toBe(ENDPOINTS);
  expect(new Set(claimed.map((c) => c.endpoint_id)).size).toBe(ENDPOINTS);
  expect(seqScans).toBe(0);
});
