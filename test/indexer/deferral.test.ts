/**
 * An initial backfill goes without the secondary indexes and builds them before the batch that reaches the head: the
 * cursor never shows the head while one is missing, a run that stopped half-way leaves the deferral to the next
 * leader, and a short catch-up, a database that holds rows, or `deferIndexes: false` never defers.
 */
import { afterAll, beforeAll, expect, test } from "bun:test";
import type { Db } from "../../src/db/client";
import { indexesDeferred } from "../../src/db/deferred-indexes";
import { EVENT_COLUMNS, toEnvelope, type EventRow } from "../../src/events/envelope";
import type { IndexerHook } from "../../src/indexer/hooks";
import { createTestChain, type TestChain } from "../../testkit/chain";
import { createTestDb, testDbKind } from "../../testkit/db";
import { indexTo, testIndexer } from "../../testkit/indexer";
import { runScenario } from "../../testkit/scenario";

let chain: TestChain;
let head: bigint;
const dbs: Db[] = [];

beforeAll(async () => {
  chain = await createTestChain();
  await runScenario(chain);
  await chain.testClient.mine({ blocks: 300 });
  await runScenario(chain);
  head = await chain.publicClient.getBlockNumber({ cacheTime: 0 });
}, 120_000);

afterAll(async () => {
  await Promise.all(dbs.map((d) => d.close()));
  await chain?.stop();
});

async function freshDb() {
  const db = await createTestDb();
  dbs.push(db);
  return db;
}

/** Every index of the schema with its definition. */
async function indexes(db: Db) {
  const rows = await db.sql<{ indexname: string; indexdef: string }[]>`
    select indexname, indexdef from pg_indexes where schemaname = current_schema() order by indexname`;
  return rows.map((r) => `${r.indexname}: ${r.indexdef}`);
}

/** Whether the planner has statistics of `table`'s columns (an ANALYZE ran on it). */
async function statistics(db: Db, table: string) {
  const [row] = await db.sql<{ n: number }[]>`select count(*)::int as n from pg_stats where tablename = ${table}`;
  return row!.n > 0;
}

/** Records, per batch, its last block and whether indexes were deferred inside its transaction. */
function probe() {
  const seen: { to: bigint; head: bigint; deferred: boolean }[] = [];
  const hook: IndexerHook = {
    name: "probe",
    async onBatch(tx, ctx) {
      seen.push({ to: ctx.toBlock, head: ctx.head, deferred: await indexesDeferred(tx) });
    },
  };
  return { seen, hook };
}

/** The activity, subscriptions and event log of a database, for comparing two indexes of the same chain. */
async function content(db: Db) {
  return {
    activity: await db.sql`select * from activity order by chain_id, block_number, log_index`,
    subscriptions: await db.sql`select * from subscriptions order by chain_id, subscription_id`,
    events: (
      await db.sql<
        EventRow[]
      >`select ${db.sql.unsafe(EVENT_COLUMNS)} from event_log e where seq is not null order by seq`
    ).map((r) => ({ seq: r.seq, ...toEnvelope(r) })),
  };
}

test(`a fresh backfill defers the secondary indexes and builds them before reaching the head (${testDbKind})`, async () => {
  const reference = await freshDb();
  const expected = await indexes(reference);
  const db = await freshDb();
  const { seen, hook } = probe();
  const indexer = testIndexer(db, chain, { hooks: [hook], tuning: { initialRange: 8, maxRange: 16 } });
  try {
    await indexer.start();
    await indexer.waitForBlock(head, 60_000);
    // Until the first idle poll at the head has taken the statistics.
    for (let i = 0; i < 200 && !(await statistics(db, "subscriptions")); i++) await Bun.sleep(50);
  } finally {
    await indexer.stop();
  }
  const deep = seen.filter((b) => b.to + 64n < b.head);
  expect(deep.length).toBeGreaterThan(0);
  expect(deep.every((b) => b.deferred)).toBe(true);
  // From the batch that reaches the reorg window on, every index exists.
  const near = seen.filter((b) => b.to + 64n >= b.head);
  expect(near.length).toBeGreaterThan(0);
  expect(near.every((b) => !b.deferred)).toBe(true);
  expect(await indexes(db)).toEqual(expected);
  // The filled tables' statistics were taken at the first idle poll at the head (this run writes no event log, and an
  // empty table gets none); a fresh database has none.
  for (const table of ["activity", "events", "subscriptions"])
    expect(`${table}: ${await statistics(db, table)}`).toBe(`${table}: true`);
  expect(await statistics(reference, "activity")).toBe(false);

  // The same chain indexed without the deferral gives the same rows and events.
  const plain = await freshDb();
  const other = probe();
  await indexTo(plain, chain, head, { hooks: [other.hook], tuning: { deferIndexes: false, maxRange: 64 } });
  expect(other.seen.some((b) => b.deferred)).toBe(false);
  expect(await content(db)).toEqual(await content(plain));
}, 120_000);

test(`a backfill stopped half-way leaves the deferral to the next leader, which builds it (${testDbKind})`, async () => {
  const expected = await indexes(dbs[0]!);
  const db = await freshDb();
  const first = await indexTo(db, chain, chain.startBlock + 40n, { tuning: { initialRange: 8, maxRange: 8 } });
  expect(BigInt(first.status().indexedBlock!)).toBeLessThan(head - 64n);
  expect(await indexesDeferred(db.sql)).toBe(true);

  const { seen, hook } = probe();
  await indexTo(db, chain, head, { hooks: [hook], tuning: { initialRange: 8, maxRange: 16 } });
  expect(seen.filter((b) => b.to + 64n < b.head).every((b) => b.deferred)).toBe(true);
  expect(seen.filter((b) => b.to + 64n >= b.head).some((b) => b.deferred)).toBe(false);
  expect(await indexes(db)).toEqual(expected);
}, 120_000);

test(`a catch-up within the reorg window never defers (${testDbKind})`, async () => {
  const db = await freshDb();
  const { seen, hook } = probe();
  // Starting 40 blocks below the head: everything to index is within the window.
  const near = { ...chain, startBlock: head - 40n };
  await indexTo(db, near, head, { hooks: [hook] });
  expect(seen.length).toBeGreaterThan(0);
  expect(seen.some((b) => b.deferred)).toBe(false);
}, 60_000);
