/**
 * The fan-out outbox as the service runs it: the indexer's batches queue their ranges, and drains create the
 * deliveries in transactions of their own, each event once per endpoint, only to endpoints that existed when the
 * range was queued, nothing lost when a drain fails, and a chain's ranges held while it catches up.
 */
import { afterAll, beforeAll, expect, test } from "bun:test";
import type { Db } from "../../src/db/client";
import { CATCH_UP_HOLD_S } from "../../src/db/catch-up";
import { drainFanOut, enqueueFanOut } from "../../src/webhooks/fanout";
import { createTestChain, type TestChain } from "../../testkit/chain";
import { createTestDb, testDbKind } from "../../testkit/db";
import { indexEventLog } from "../../testkit/indexer";
import { moduleCall, oneChargedSubscription } from "../../testkit/scenario";
import { endpointForAll } from "../../testkit/webhooks";

const MERCHANT = "0x70997970c51812dc3a010c7d01b50e0d17dc79c8";

let chain: TestChain;
let db: Db;
let scenario: Awaited<ReturnType<typeof oneChargedSubscription>>;

beforeAll(async () => {
  chain = await createTestChain();
  db = await createTestDb();
}, 60_000);
afterAll(async () => {
  await db?.close();
  await chain?.stop();
});

const index = () => indexEventLog(db, chain, enqueueFanOut);

const queued = async () => (await db.sql<{ n: number }[]>`select count(*)::int as n from webhook_fanout_queue`)[0]!.n;

const deliveredTo = async (endpointId: string) =>
  (
    await db.sql<{ event_id: string }[]>`
      select event_id from webhook_deliveries where endpoint_id = ${endpointId} order by event_id`
  ).map((r) => r.event_id);

const merchantEvents = async () =>
  (
    await db.sql<{ id: string }[]>`
      select id from event_log where merchant = ${MERCHANT} and type not in ('event.reverted', 'webhook.test')
      order by id`
  ).map((r) => r.id);

/** Drains until the outbox is empty, `n` drainers at once, one range a transaction. */
async function drainAll(n: number): Promise<void> {
  const drainer = async () => {
    while (await drainFanOut(db.sql, 1));
  };
  await Promise.all(Array.from({ length: n }, drainer));
}

test(`batches queue their ranges; drains at once give each endpoint every event once, none to an endpoint made after (${testDbKind})`, async () => {
  const before = await endpointForAll(db.sql, MERCHANT, "https://example.com/before");
  scenario = await oneChargedSubscription(chain);
  await index();
  // The batches wrote their events and one outbox row each, and no delivery.
  expect(await queued()).toBeGreaterThan(0);
  expect(await deliveredTo(before.id)).toEqual([]);
  const after = await endpointForAll(db.sql, MERCHANT, "https://example.com/after");

  await drainAll(3);
  expect(await queued()).toBe(0);
  const events = await merchantEvents();
  expect(events.length).toBeGreaterThan(2);
  expect(await deliveredTo(before.id)).toEqual(events);
  expect(await deliveredTo(after.id)).toEqual([]);

  // Later batches go to both.
  await chain.charge(scenario.module, await chain.subscribe("bob", scenario.module, 1));
  await index();
  await drainAll(2);
  const later = (await merchantEvents()).filter((id) => !events.includes(id));
  expect(later.length).toBeGreaterThan(0);
  expect(await deliveredTo(before.id)).toEqual(await merchantEvents());
  expect(await deliveredTo(after.id)).toEqual(later.sort());
}, 60_000);

test(`a drain that fails leaves its ranges queued and creates nothing; the next one creates them (${testDbKind})`, async () => {
  const endpoint = await endpointForAll(db.sql, MERCHANT, "https://example.com/failing");
  await moduleCall(chain, "alice", scenario.module, "pause", [scenario.a]);
  await index();
  const waiting = await queued();
  expect(waiting).toBeGreaterThan(0);
  await db.sql.unsafe(`
    create function refuse_delivery() returns trigger language plpgsql as $$
    begin raise exception 'refused for the test'; end $$;
    create trigger refuse_delivery before insert on webhook_deliveries for each row execute function refuse_delivery();`);
  try {
    await expect(drainFanOut(db.sql)).rejects.toThrow("refused for the test");
    expect(await queued()).toBe(waiting);
    expect(await deliveredTo(endpoint.id)).toEqual([]);
  } finally {
    await db.sql.unsafe(`drop trigger refuse_delivery on webhook_deliveries; drop function refuse_delivery();`);
  }
  await drainAll(1);
  expect(await queued()).toBe(0);
  expect((await deliveredTo(endpoint.id)).length).toBeGreaterThan(0);
}, 60_000);

test(`a chain catching up keeps its ranges queued until it reaches the head or its cursor stops for a minute (${testDbKind})`, async () => {
  const endpoint = await endpointForAll(db.sql, MERCHANT, "https://example.com/held");
  const catchUp = (moved: string) =>
    db.sql`update chains set catching_up = true, updated_at = now() - ${moved}::interval where chain_id = ${chain.chainId}`;
  const step = async (action: "pause" | "resume") => {
    await moduleCall(chain, "alice", scenario.module, action, [scenario.a]);
    await index();
  };

  // The cursor moved a moment ago: held.
  await step("resume");
  await catchUp("1 second");
  const waiting = await queued();
  expect(waiting).toBeGreaterThan(0);
  expect(await drainFanOut(db.sql)).toBe(false);
  expect(await queued()).toBe(waiting);
  expect(await deliveredTo(endpoint.id)).toEqual([]);
  // The cursor has not moved for over a minute (the indexer died mid-way): drained.
  await catchUp(`${CATCH_UP_HOLD_S + 1} seconds`);
  await drainAll(1);
  expect(await queued()).toBe(0);
  const first = await deliveredTo(endpoint.id);
  expect(first.length).toBeGreaterThan(0);

  // Held again, then the batch that reaches the head clears the flag.
  await step("pause");
  await catchUp("0 seconds");
  expect(await drainFanOut(db.sql)).toBe(false);
  expect(await deliveredTo(endpoint.id)).toEqual(first);
  await db.sql`update chains set catching_up = false where chain_id = ${chain.chainId}`;
  await drainAll(1);
  expect(await queued()).toBe(0);
  expect((await deliveredTo(endpoint.id)).length).toBeGreaterThan(first.length);
}, 60_000);
