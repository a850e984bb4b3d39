import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import type { Db } from "../../src/db/client";
import type { SubState } from "../../src/domain/subscription";
import { EVENT_COLUMNS, eventData, type EventRow } from "../../src/events/envelope";
import { insertEvents } from "../../src/events/queries";
import { expiryEvent, type NewEvent } from "../../src/events/timeline";
import { createTestDb, testDbKind } from "../../testkit/db";

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
      select seq::text, id, ts, data, log_index from merchant_events where id like 'evt_%' order by merchant_events.seq`;
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

describe("a subscription event stored as its snapshot reads back as the record it replaced, from its row alone", () => {
  let db: Db;
  const M = "0x00000000000000000000000000000000000000ee";
  const state = (id: string, over: Partial<SubState> = {}): SubState => ({
    subscriptionId: id,
    module: "0x00000000000000000000000000000000000000aa",
    merchant: M,
    subscriber: "0x00000000000000000000000000000000000000cc",
    planId: "2",
    maxExecutions: "4",
    timesExecuted: 4,
    totalSpent: 123_456_789_012_345_678_901_234_567_890n,
    createdAt: 1_699_000_000,
    lastPaidAt: 1_699_500_000,
    nextChargeAt: 1_699_586_400,
    allowanceExpiry: "0",
    paused: false,
    cancelled: false,
    blockNumber: 5n,
    logIndex: 0,
    txHash: "0x01",
    ...over,
  });
  beforeAll(async () => {
    db = await createTestDb();
  });
  afterAll(async () => {
    await db.close();
  });

  test("a row with neither data nor a snapshot is refused (the check of migration 0035)", async () => {
    let err: unknown;
    try {
      await db.sql`insert into merchant_events (id, chain_id, merchant, type, block_number, log_index, ts)
        values ('evt_nodata', 31337, ${M}, 'subscription.created', 1, 0, now())`;
    } catch (e) {
      err = e;
    }
    expect((err as { code?: string })?.code).toBe("23514");
  });

  const paths = ["insert", false, ...(testDbKind === "postgres" ? (["copy"] as const) : [])] as const;
  for (const [i, bulk] of paths.entries()) {
    test(`written by ${bulk || "a plain insert"}: data null, the record built from the snapshot, byte for byte`, async () => {
      const id = String(71 + i);
      const events = [
        expiryEvent(31337, state(id), false, 1_700_000_000 + i, { number: 12n, hash: `0x0${i}` }, -1),
        expiryEvent(
          31337,
          state(id, { paused: true, allowanceExpiry: "18446744073709551615" }),
          true,
          1_700_100_000 + i,
          {
            number: 13n,
            hash: `0x1${i}`,
          },
          -1,
        ),
      ].map((e, k) => Object.assign(e, bulk ? { seq: S + 1000n * BigInt(i + 1) + BigInt(k) } : {}));
      await db.sql.begin((tx) => insertEvents(tx, 31337, events, bulk));
      const rows = await db.sql<(EventRow & { stored_data: unknown })[]>`
        select ${db.sql.unsafe(EVENT_COLUMNS)}, (select m.data from merchant_events m where m.id = e.id) as stored_data
        from event_log e where e.id = any(${events.map((e) => e.id)}) order by e.seq`;
      expect(rows.map((r) => r.stored_data)).toEqual([null, null]);
      // What the same data stored as jsonb read back as: the same JSON text, keys in the same order.
      for (const [k, r] of rows.entries()) {
        const [asJsonb] = await db.sql<
          { data: unknown }[]
        >`select ${JSON.stringify(events[k]!.data)}::text::jsonb as data`;
        expect(JSON.stringify(eventData(r))).toBe(JSON.stringify(asJsonb!.data));
      }
      expect(eventData(rows[1]!)).toMatchObject({
        object: { status: "EXPIRED", is_blocked: true, expires_at: "18446744073709551615", next_charge_date: null },
        previous_status: "ACTIVE",
      });
    });
  }
});
