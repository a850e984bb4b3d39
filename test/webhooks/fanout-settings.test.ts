/**
 * An endpoint's settings decide its events as of their commit, however late the outbox is drained: a change of
 * `enabled` or `event_types` (by the API or by the dispatcher's disabling) first fans the ranges still queued out
 * under the settings before it, and the ranges queued after it follow the new ones.
 */
import { afterAll, beforeAll, beforeEach, expect, test } from "bun:test";
import type { Db } from "../../src/db/client";
import { createEndpoint, updateEndpoint } from "../../src/webhooks/endpoints";
import { drainFanOut, enqueueFanOut } from "../../src/webhooks/fanout";
import { recordOutcomes } from "../../src/webhooks/queries";
import { createTestDb, testDbKind } from "../../testkit/db";
import { endpointForAll } from "../../testkit/webhooks";

const MERCHANT = "0x00000000000000000000000000000000000000d1";
let db: Db;
let block = 0;

beforeAll(async () => {
  db = await createTestDb();
});
afterAll(async () => {
  await db?.close();
});
beforeEach(async () => {
  await db.sql`delete from webhook_endpoints`;
  await db.sql`delete from webhook_fanout_queue`;
});

/** Writes events of the given types in one transaction with their outbox row, as a batch does; returns their ids. */
async function writeEvents(types: string[], tx = db.sql): Promise<string[]> {
  const first = block + 1;
  block += types.length;
  const rows = await tx<{ seq: string; id: string }[]>`
    insert into merchant_events (id, chain_id, merchant, type, block_number, log_index, ts, data)
    select 'evt_' || lpad(to_hex(${first}::int + t.n::int - 1), 40, '0'), 1, ${MERCHANT}, t.type,
      ${first}::int + t.n::int - 1, 0, now(), '{"object":{}}'::jsonb
    from unnest(${types}::text[]) with ordinality as t(type, n)
    returning seq::text, id`;
  const seqs = rows.map((r) => BigInt(r.seq));
  await enqueueFanOut(tx, {
    chainId: 1,
    fromSeq: seqs.reduce((a, b) => (a < b ? a : b)),
    toSeq: seqs.reduce((a, b) => (a > b ? a : b)),
    withdrawals: false,
  });
  return rows.map((r) => r.id).sort();
}

const inTransaction = (types: string[]) => db.sql.begin((tx) => writeEvents(types, tx as unknown as typeof db.sql));

const deliveredTo = async (endpointId: string) =>
  (
    await db.sql<{ event_id: string }[]>`
      select event_id from webhook_deliveries where endpoint_id = ${endpointId} order by event_id`
  ).map((r) => r.event_id);

const drainAll = async () => {
  while (await drainFanOut(db.sql));
};

const succeeded = ["charge.succeeded", "charge.succeeded"];

test(`disabled while ranges are queued: the events before it are its own, those of its disabled period are not (${testDbKind})`, async () => {
  const x = await endpointForAll(db.sql, MERCHANT, "https://example.com/x");
  const y = await endpointForAll(db.sql, MERCHANT, "https://example.com/y");
  const before = await inTransaction(succeeded);

  expect((await updateEndpoint(db.sql, MERCHANT, x.id, { enabled: false }))?.enabled).toBe(false);
  // Fanned out to it by the change itself, not left to the drain.
  expect(await deliveredTo(x.id)).toEqual(before);
  const whileDisabled = await inTransaction(succeeded);
  expect((await updateEndpoint(db.sql, MERCHANT, x.id, { enabled: true }))?.enabled).toBe(true);
  const after = await inTransaction(succeeded);
  await drainAll();

  expect(await deliveredTo(x.id)).toEqual([...before, ...after].sort());
  expect(await deliveredTo(y.id)).toEqual([...before, ...whileDisabled, ...after].sort());
});

test(`event types changed while ranges are queued: each event follows the types of its commit (${testDbKind})`, async () => {
  const x = await endpointForAll(db.sql, MERCHANT, "https://example.com/x");
  const mixed = ["charge.succeeded", "charge.failed", "subscription.created"];
  const before = await inTransaction(mixed);
  await updateEndpoint(db.sql, MERCHANT, x.id, { eventTypes: ["charge.failed"] });
  const after = await inTransaction(mixed);
  // A patch that leaves both settings as they are changes nothing of the fan-out.
  await updateEndpoint(db.sql, MERCHANT, x.id, {
    enabled: true,
    eventTypes: ["charge.failed"],
    url: "https://e.com/x",
  });
  const unchanged = await db.sql`select fanout_since from webhook_endpoints where id = ${x.id}`;
  await drainAll();

  const types = new Map(
    (await db.sql<{ id: string; type: string }[]>`select id, type from merchant_events`).map((r) => [r.id, r.type]),
  );
  expect(await deliveredTo(x.id)).toEqual(
    [...before, ...after.filter((id) => types.get(id) === "charge.failed")].sort(),
  );
  expect(await db.sql`select fanout_since from webhook_endpoints where id = ${x.id}`).toEqual(unchanged);
});

test(`a range queued in the same millisecond as a change, after it, follows the new settings (${testDbKind})`, async () => {
  const x = await endpointForAll(db.sql, MERCHANT, "https://example.com/x");
  await db.sql`update webhook_endpoints set fanout_since = '2030-01-01 00:00:00.000500+00' where id = ${x.id}`;
  const ids = await inTransaction(succeeded);
  // Microseconds apart: a comparison at millisecond precision would put the range before the change.
  await db.sql`update webhook_fanout_queue set queued_at = '2030-01-01 00:00:00.000900+00'`;
  await drainAll();
  expect(await deliveredTo(x.id)).toEqual(ids);
});

test(`an endpoint the dispatcher disables keeps the events queued before, and gets none after (${testDbKind})`, async () => {
  const x = await endpointForAll(db.sql, MERCHANT, "https://example.com/x");
  const first = await inTransaction(["charge.succeeded"]);
  await drainAll();
  const queuedBefore = await inTransaction(succeeded);
  const [delivery] = await db.sql<{ id: string }[]>`
    select id from webhook_deliveries where endpoint_id = ${x.id} and event_id = ${first[0]!}`;
  await db.sql`update webhook_deliveries set attempts = 1 where id = ${delivery!.id}`;

  // A failed attempt with a disabling window of zero: the endpoint has failed for long enough.
  await recordOutcomes(
    db.sql,
    [
      {
        deliveryId: delivery!.id,
        attempt: 1,
        ok: false,
        outcome: "rejected",
        status: 500,
        error: "HTTP 500",
        durationMs: 3,
        retryInS: 5,
      },
    ],
    0,
  );
  const [state] = await db.sql<{ enabled: boolean }[]>`select enabled from webhook_endpoints where id = ${x.id}`;
  expect(state!.enabled).toBe(false);
  expect(await deliveredTo(x.id)).toEqual([...first, ...queuedBefore].sort());

  await inTransaction(succeeded);
  await drainAll();
  expect(await deliveredTo(x.id)).toEqual([...first, ...queuedBefore].sort());
});

test(`a change made while a writer's range is not committed waits for it, and that range follows the settings before (${testDbKind})`, async () => {
  const x = await createEndpoint(
    db.sql,
    { merchant: MERCHANT, url: "https://example.com/x", eventTypes: ["*"], description: null },
    undefined,
  );
  if (testDbKind === "pglite") {
    // One session: no writer can be in progress beside the change; the order of commits is the order of calls.
    const ids = await inTransaction(succeeded);
    await updateEndpoint(db.sql, MERCHANT, x.id, { enabled: false });
    expect(await deliveredTo(x.id)).toEqual(ids);
    return;
  }
  let release!: () => void;
  const held = new Promise<void>((r) => (release = r));
  let written: string[] = [];
  let wrote!: () => void;
  const hasWritten = new Promise<void>((r) => (wrote = r));
  const writer = db.sql.begin(async (tx) => {
    written = await writeEvents(succeeded, tx as unknown as typeof db.sql);
    wrote();
    await held;
  });
  await hasWritten;
  let changed = false;
  const change = updateEndpoint(db.sql, MERCHANT, x.id, { enabled: false }).then(() => (changed = true));
  await Bun.sleep(300);
  expect(changed).toBe(false);
  release();
  await writer;
  await change;
  await drainAll();
  expect(await deliveredTo(x.id)).toEqual(written);
});

test(`changes, batches and drains at once: no deadlock, every range all or nothing, the unchanged endpoint gets every event (${testDbKind})`, async () => {
  const x = await endpointForAll(db.sql, MERCHANT, "https://example.com/x");
  const y = await endpointForAll(db.sql, MERCHANT, "https://example.com/y");
  const ranges: string[][] = [];
  let stop = false;
  const writer = async () => {
    for (let i = 0; i < 40; i++) ranges.push(await inTransaction(succeeded));
    stop = true;
  };
  const drainer = async () => {
    while (!stop) {
      await drainFanOut(db.sql);
      await Bun.sleep(1);
    }
  };
  const toggler = async () => {
    // A change after each new range, so both settings get ranges.
    for (let enabled = false; !stop; enabled = !enabled) {
      const seen = ranges.length;
      await updateEndpoint(db.sql, MERCHANT, x.id, { enabled });
      while (ranges.length === seen && !stop) await Bun.sleep(1);
    }
  };
  await Promise.all([writer(), drainer(), drainer(), toggler()]);
  await drainAll();

  const all = ranges.flat().sort();
  expect(await deliveredTo(y.id)).toEqual(all);
  const toX = new Set(await deliveredTo(x.id));
  for (const r of ranges) expect(r.filter((id) => toX.has(id)).length % r.length).toBe(0);
  // Both settings were seen by some range: the toggles interleaved with the batches.
  expect(toX.size).toBeGreaterThan(0);
  expect(toX.size).toBeLessThan(all.length);
});
