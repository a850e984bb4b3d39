import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import type { Db } from "../../src/db/client";
import { insertEvents } from "../../src/events/queries";
import type { NewEvent } from "../../src/events/timeline";
import { createTestDb } from "../../testkit/db";

// Far above the seqs the log's sequence hands out (a batch's block of seqs comes from it; these are made up).
const S = 1n << 40n;

const event = (seq: bigint | undefined, n: number, data: Record<string, unknown> = { object: { n } }): NewEvent => ({
  id: `evt_${n.toString(16).padStart(40, "0")}`,
  merchant: "0x00000000000000000000000000000000000000bb",
  type: "charge.succeeded",
  blockNumber: 12n,
  logIndex: n,
  subIndex: 0,
  ts: 1_700_000_000 + n,
  data,
  ...(seq === undefined ? {} : { seq }),
  ...(n === 2 ? { expiry: { subscriptionId: "7", instant: 1_700_000_100 } } : {}),
});

describe("a new batch's numbered events written in bulk by plain inserts (PGlite's path; COPY's on a server)", () => {
  let db: Db;
  beforeAll(async () => {
    db = await createTestDb();
  });
  afterAll(async () => {
    await db.close();
  });

  test("each row keeps its seq and fields, the expiries are recorded, the batch's range comes back", async () => {
    const events = [
      event(S + 5n, 1, { object: { id: 'quote " and \\ backslash' }, previous_status: null }),
      event(S + 1n, 2),
      event(S + 14n, 3, { object: {} }),
    ];
    const range = await db.sql.begin((tx) => insertEvents(tx, 31337, events, "insert"));
    expect(range).toEqual({ fromSeq: S + 5n, toSeq: S + 14n });
    const rows = await db.sql<{ seq: string; id: string; ts: Date; data: unknown; log_index: number }[]>`
      select seq::text, id, ts, data, log_index from merchant_events where id like 'evt_%' order by seq`;
    expect(rows.map((r) => [r.seq, r.id, r.ts.getTime() / 1000, r.data, r.log_index])).toEqual(
      [events[1]!, events[0]!, events[2]!].map((e) => [String(e.seq), e.id, e.ts, e.data, e.logIndex]),
    );
    const [x] = await db.sql`select count(*)::int as n from event_expiries where subscription_id = '7'`;
    expect(x!.n).toBe(1);
  });

  test("an id already in the log fails the batch, as COPY does (no `on conflict`: the cursor check guards)", async () => {
    const again = [event(S + 20n, 4), event(S + 21n, 1)];
    let err: unknown;
    try {
      await db.sql.begin((tx) => insertEvents(tx, 31337, again, "insert"));
    } catch (e) {
      err = e;
    }
    expect((err as { code?: string })?.code).toBe("23505");
    const [x] = await db.sql`select count(*)::int as n from merchant_events where id = ${again[0]!.id}`;
    expect(x!.n).toBe(0);
  });

  test("without bulk a repeated id is skipped and a new one takes the next seq", async () => {
    const range = await db.sql.begin((tx) => insertEvents(tx, 31337, [event(undefined, 1), event(undefined, 5)]));
    const [r] = await db.sql<{ seq: string }[]>`select seq::text from merchant_events where id = ${event(0n, 5).id}`;
    expect(range).toEqual({ fromSeq: BigInt(r!.seq), toSeq: BigInt(r!.seq) });
  });
});
