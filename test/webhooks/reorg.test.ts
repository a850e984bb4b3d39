/**
 * Reorgs through the webhooks: every event a reorg withdraws is followed by its `event.reverted` to the endpoint
 * subscribed to its type; a withdrawn event that had not gone out is never sent, though its `event.reverted` is. Applying the
 * received `event.reverted`s to the received stream leaves exactly a fresh index of the new chain. Run with the
 * fan-out in the writing transaction and through the outbox the service uses (where the unsent events' ranges and
 * the rollback's withdrawals wait in the outbox together, and are drained in one pass).
 */
import { afterEach, beforeEach, expect, test } from "bun:test";
import type { Address } from "viem";
import { createLogger } from "../../src/common/log";
import type { Db } from "../../src/db/client";
import type { OnEvents } from "../../src/events/hook";
import { createDispatcher, type Dispatcher } from "../../src/webhooks/dispatcher";
import { enqueueFanOut, fanOut } from "../../src/webhooks/fanout";
import { createTestChain, type TestChain, type WalletName } from "../../testkit/chain";
import { until } from "../../testkit/cli";
import { createTestDb } from "../../testkit/db";
import { moduleCall, oneChargedSubscription } from "../../testkit/scenario";
import { indexEventLog } from "../../testkit/indexer";
import { endpointForAll, startReceiver, undelivered, type Receiver } from "../../testkit/webhooks";

const MERCHANT = "0x70997970c51812dc3a010c7d01b50e0d17dc79c8";

let chain: TestChain;
let db: Db;
let fresh: Db;
let receiver: Receiver;

beforeEach(async () => {
  chain = await createTestChain();
  db = await createTestDb();
  fresh = await createTestDb();
  receiver = startReceiver();
}, 60_000);
afterEach(async () => {
  await receiver?.stop();
  await db?.close();
  await fresh?.close();
  await chain?.stop();
});

const call = (who: WalletName, module: Address, functionName: string, args: unknown[]) =>
  moduleCall(chain, who, module, functionName, args);

const index = (target: Db, onEvents?: OnEvents) => indexEventLog(target, chain, onEvents);

const dispatcher = (): Dispatcher =>
  createDispatcher({
    sql: db.sql,
    log: createLogger("error"),
    config: {
      timeoutMs: 2000,
      retrySchedule: [0.1],
      disableAfterS: 3600,
      perEndpoint: 4,
      concurrency: 8,
      pollIntervalMs: 50,
      allowPrivate: true,
    },
  });

const pending = () => undelivered(db.sql);

const lastSeq = async () =>
  (await db.sql<{ s: string }[]>`select coalesce(max(seq), 0)::text as s from event_log`)[0]!.s;

test.each([
  ["in the writing transaction", fanOut],
  ["through the outbox", enqueueFanOut],
] as const)(
  "fan-out %s: received, after applying event.reverted, equals the new chain's events; unsent withdrawn events never go out, their reverts do",
  async (mode, onEvents) => {
    await endpointForAll(db.sql, MERCHANT, receiver.url);
    const { module, a } = await oneChargedSubscription(chain);
    const d = dispatcher();
    await d.start();
    await index(db, onEvents);
    await until("the first events delivered", async () => (await pending()) === 0, 30_000);
    const snap = await chain.snapshot();

    // Branch 1, delivered: bob subscribes and is charged, alice pauses.
    const b = await chain.subscribe("bob", module, 1);
    await chain.charge(module, b);
    await call("alice", module, "pause", [a]);
    await index(db, onEvents);
    await until("branch 1 delivered", async () => (await pending()) === 0, 30_000);
    const sentBeforeReorg = new Set(receiver.delivered());
    // Branch 1, not delivered: with the dispatcher stopped, alice resumes.
    await d.stop();
    const before = await lastSeq();
    await call("alice", module, "resume", [a]);
    await index(db, onEvents);
    const unsent = (
      await db.sql<{ id: string }[]>`select id from event_log where merchant = ${MERCHANT} and seq > ${before}`
    ).map((r) => r.id);
    expect(unsent.length).toBeGreaterThan(0);
    const waiting = await db.sql<
      { event_id: string }[]
    >`select event_id from webhook_deliveries where status = 'pending'`;
    const [queued] = await db.sql<{ n: number }[]>`select count(*)::int as n from webhook_fanout_queue`;
    if (mode === "through the outbox") {
      expect(waiting.length).toBe(0);
      expect(queued!.n).toBeGreaterThan(0);
    } else {
      expect(waiting.map((r) => r.event_id).sort()).toEqual([...unsent].sort());
      expect(queued!.n).toBe(0);
    }

    // The reorg: branch 2 cancels alice instead.
    await chain.revert(snap);
    await call("alice", module, "cancel", [a]);
    for (let i = 0; i < 4; i++) await chain.mineAt(Number(await chain.now()) + 20);
    await index(db, onEvents);
    const d2 = dispatcher();
    await d2.start();
    await until("branch 2 delivered", async () => (await pending()) === 0, 30_000);
    await d2.stop();

    const received = new Map<string, { id: string; type: string; data: { object: { id?: string } } }>();
    for (const r of receiver.received) received.set(r.id, JSON.parse(r.body));
    const reverted = [...received.values()].filter((e) => e.type === "event.reverted").map((e) => e.data.object.id!);
    // Every withdrawn event is reverted to the endpoint (subscribed to every type), received or not.
    const withdrawn = await db.sql<{ id: string }[]>`select id from merchant_events where reverted_by is not null`;
    const withdrawnSent = withdrawn.map((w) => w.id).filter((id) => sentBeforeReorg.has(id));
    expect(withdrawnSent.length).toBeGreaterThan(1);
    expect(reverted.sort()).toEqual(withdrawn.map((w) => w.id).sort());
    // The unsent, withdrawn events never went out; their event.reverted did (a consumer ignores an unknown id).
    for (const id of unsent) {
      expect(withdrawn.map((w) => w.id)).toContain(id);
      expect(received.has(id)).toBe(false);
      expect(reverted).toContain(id);
    }
    const applied = [...received.keys()].filter(
      (id) => received.get(id)!.type !== "event.reverted" && !reverted.includes(id),
    );
    await index(fresh);
    const expected = await fresh.sql<{ id: string }[]>`select id from event_log where merchant = ${MERCHANT}`;
    expect(applied.sort()).toEqual(expected.map((e) => e.id).sort());
  },
  120_000,
);
