/**
 * The fan-out of `event.reverted` after a real reorg (webhooks.md §1): it goes to every enabled endpoint subscribed to
 * the withdrawn event's type, whether it received the event (answered 2xx), may have (timed out) or not (answered
 * 500); not to a disabled one; and names the withdrawn event's block, chain, allocation and subscriber.
 */
import { afterAll, beforeAll, expect, test } from "bun:test";
import { createLogger } from "../../src/common/log";
import type { Db } from "../../src/db/client";
import { createDispatcher } from "../../src/webhooks/dispatcher";
import { createEndpoint, updateEndpoint } from "../../src/webhooks/endpoints";
import { fanOut } from "../../src/webhooks/fanout";
import { createTestChain, type TestChain } from "../../testkit/chain";
import { until } from "../../testkit/cli";
import { createTestDb } from "../../testkit/db";
import { indexEventLog } from "../../testkit/indexer";
import { oneChargedSubscription } from "../../testkit/scenario";
import { endpointForAll, startReceiver, type Receiver } from "../../testkit/webhooks";

const MERCHANT = "0x70997970c51812dc3a010c7d01b50e0d17dc79c8";

let chain: TestChain;
let db: Db;
const receivers: Record<"ok" | "fails" | "slow" | "idle" | "charges", Receiver> = {} as never;

beforeAll(async () => {
  chain = await createTestChain();
  db = await createTestDb();
  for (const name of ["ok", "fails", "slow", "idle", "charges"] as const) receivers[name] = startReceiver();
  receivers.fails.respond(() => ({ status: 500 }));
  receivers.slow.respond(() => ({ status: 200, delayMs: 1500 }));
}, 60_000);
afterAll(async () => {
  for (const r of Object.values(receivers)) await r?.stop();
  await db?.close();
  await chain?.stop();
});

const index = () => indexEventLog(db, chain, fanOut);

// One attempt each (no retries), timing out well before the slow receiver answers.
const dispatcher = () =>
  createDispatcher({
    sql: db.sql,
    log: createLogger("error"),
    config: {
      timeoutMs: 400,
      retrySchedule: [],
      disableAfterS: 3600,
      perEndpoint: 4,
      concurrency: 16,
      pollIntervalMs: 50,
      allowPrivate: true,
    },
  });

const pendingOf = async (endpoints: string[]) =>
  (
    await db.sql<{ n: number }[]>`
      select count(*)::int as n from webhook_deliveries where status = 'pending' and endpoint_id = any(${endpoints})`
  )[0]!.n;

type Reverted = {
  type: string;
  data: {
    object: {
      id: string;
      type: string;
      block_number: string;
      chain_id: number | null;
      allocation_id: string | null;
      user_address: string | null;
    };
  };
};

/** The `data.object` of each `event.reverted` received by `r`. */
const revertsOf = (r: Receiver) =>
  r.received
    .map((x) => JSON.parse(x.body) as Reverted)
    .filter((e) => e.type === "event.reverted")
    .map((e) => e.data.object);

/** The event ids an `event.reverted` received by `r` withdraws. */
const revertsReceived = (r: Receiver) => revertsOf(r).map((o) => o.id);

test("event.reverted goes to every enabled endpoint subscribed to the withdrawn type, received or not, naming its subscriber", async () => {
  const ep = {
    ok: await endpointForAll(db.sql, MERCHANT, receivers.ok.url),
    fails: await endpointForAll(db.sql, MERCHANT, receivers.fails.url),
    slow: await endpointForAll(db.sql, MERCHANT, receivers.slow.url),
    idle: await endpointForAll(db.sql, MERCHANT, receivers.idle.url),
    charges: await createEndpoint(
      db.sql,
      { merchant: MERCHANT, url: receivers.charges.url, eventTypes: ["charge.succeeded"], description: null },
      undefined,
    ),
  };
  const snap = await chain.snapshot();
  const { module, a } = await oneChargedSubscription(chain);
  await index();
  // `idle` is disabled before any attempt: its deliveries stay pending, never sent.
  await updateEndpoint(db.sql, MERCHANT, ep.idle.id, { enabled: false });
  const d = dispatcher();
  await d.start();
  const tried = [ep.ok.id, ep.fails.id, ep.slow.id, ep.charges.id];
  await until("the first attempts", async () => (await pendingOf(tried)) === 0, 30_000);
  await d.stop();
  const sent = [...receivers.ok.delivered()];
  expect(sent.length).toBeGreaterThan(1);
  expect(new Set(receivers.fails.received.map((r) => r.id))).toEqual(new Set(sent));
  expect(new Set(receivers.slow.received.map((r) => r.id))).toEqual(new Set(sent));
  expect(receivers.slow.delivered().size).toBe(0); // it answered after the timeout
  const receipts = await db.sql<{ endpoint_id: string; receipt: string }[]>`
    select distinct endpoint_id, receipt from webhook_attempts`;
  expect(new Map(receipts.map((r) => [r.endpoint_id, r.receipt]))).toEqual(
    new Map([
      [ep.ok.id, "delivered"],
      [ep.fails.id, "rejected"],
      [ep.slow.id, "unknown"],
      [ep.charges.id, "delivered"],
    ]),
  );

  // The reorg removes every block of the scenario.
  const head = await chain.publicClient.getBlockNumber();
  await chain.revert(snap);
  while ((await chain.publicClient.getBlockNumber()) <= head) await chain.mineAt(Number(await chain.now()) + 12);
  await index();
  const withdrawnRows = await db.sql<{ id: string; type: string; block_number: string }[]>`
    select id, type, block_number::text from merchant_events where reverted_by is not null and merchant = ${MERCHANT}`;
  const withdrawn = withdrawnRows.map((r) => r.id);
  expect(withdrawn.sort()).toEqual([...sent].sort());
  const charges = withdrawnRows.filter((r) => r.type === "charge.succeeded").map((r) => r.id);
  expect(charges.length).toBe(1);
  const reverts = await db.sql<{ endpoint_id: string; n: number }[]>`
    select endpoint_id, count(*)::int as n from webhook_deliveries where event_type = 'event.reverted'
    group by endpoint_id`;
  // `fails` never received the events, `charges` received only the charge: both learn what was withdrawn of their
  // types; the disabled `idle` gets nothing.
  expect(new Map(reverts.map((r) => [r.endpoint_id, r.n]))).toEqual(
    new Map([
      [ep.ok.id, withdrawn.length],
      [ep.fails.id, withdrawn.length],
      [ep.slow.id, withdrawn.length],
      [ep.charges.id, 1],
    ]),
  );

  // Re-enabled, `idle` gets nothing: its pending deliveries of the withdrawn events were cancelled.
  await updateEndpoint(db.sql, MERCHANT, ep.idle.id, { enabled: true });
  receivers.fails.respond(() => ({ status: 200 }));
  const d2 = dispatcher();
  await d2.start();
  await until("the reverts", async () => (await pendingOf(Object.values(ep).map((e) => e.id))) === 0, 30_000);
  await d2.stop();
  expect(revertsReceived(receivers.ok).sort()).toEqual(withdrawn.sort());
  expect(revertsReceived(receivers.slow).sort()).toEqual(withdrawn.sort());
  expect(revertsReceived(receivers.fails).sort()).toEqual(withdrawn.sort());
  expect(revertsReceived(receivers.charges)).toEqual(charges);
  expect(receivers.idle.received).toEqual([]);

  // Each names the withdrawn event's block and its subscription: alice's allocation on the chain.
  const blocks = new Map(withdrawnRows.map((r) => [r.id, r]));
  const allocation = `31337:${module.toLowerCase()}:${a}`;
  const alice = chain.address("alice").toLowerCase();
  for (const o of revertsOf(receivers.ok)) {
    expect(o.type).toBe(blocks.get(o.id)!.type);
    expect(o.block_number).toBe(blocks.get(o.id)!.block_number);
    expect({ chain_id: o.chain_id, allocation_id: o.allocation_id, user_address: o.user_address }).toEqual({
      chain_id: 31337,
      allocation_id: allocation,
      user_address: alice,
    });
  }
}, 120_000);
