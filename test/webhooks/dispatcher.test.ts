import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { Webhook } from "standardwebhooks";
import type { Db } from "../../src/db/client";
import { createLogger } from "../../src/common/log";
import { eventsHook } from "../../src/events/hook";
import { fanOut } from "../../src/webhooks/fanout";
import { createDispatcher, type DispatcherConfig } from "../../src/webhooks/dispatcher";
import { createEndpoint, deleteEndpoint, enqueue, rotateSecret } from "../../src/webhooks/endpoints";
import { createTestChain, type TestChain } from "../../testkit/chain";
import { createTestDb } from "../../testkit/db";
import { indexOnce } from "../../testkit/indexer";
import { runScenario } from "../../testkit/scenario";
import { endpointForAll, startReceiver, type Receiver } from "../../testkit/webhooks";
import { until } from "../../testkit/cli";

const MERCHANT = "0x70997970c51812dc3a010c7d01b50e0d17dc79c8";
const log = createLogger("error");

const fast = (over: Partial<DispatcherConfig> = {}): DispatcherConfig => ({
  timeoutMs: 300,
  retrySchedule: [0.05, 0.1, 0.1, 0.2, 0.2, 0.3, 0.3, 0.5, 0.5, 1, 1],
  disableAfterS: 3600,
  perEndpoint: 4,
  concurrency: 32,
  pollIntervalMs: 50,
  allowPrivate: true,
  ...over,
});

const pending = async (db: Db) =>
  (await db.sql<{ n: number }[]>`select count(*)::int as n from webhook_deliveries where status = 'pending'`)[0]!.n;

const hooks = (idleAt: number) => [eventsHook({ onEvents: fanOut, now: () => idleAt })];

describe("a random scenario delivered through failures, timeouts and an outage", () => {
  let chain: TestChain;
  let db: Db;
  let receiver: Receiver;
  let secret: string;

  beforeAll(async () => {
    chain = await createTestChain();
    db = await createTestDb();
    receiver = startReceiver();
    secret = (await endpointForAll(db.sql, MERCHANT, receiver.url)).secret;
  }, 60_000);
  afterAll(async () => {
    await receiver?.stop();
    await db?.close();
    await chain?.stop();
  });

  test("after the retries, what arrived (deduplicated by webhook-id) is exactly the merchant's event log, every delivery verified", async () => {
    await runScenario(chain);
    const idleAt = Number(await chain.now()) + 10 * 86400;
    // Fails the first attempt of every event, times out the second of every third, and is down for a while.
    const tries = new Map<string, number>();
    const downUntil = Date.now() + 1500;
    receiver.respond((r) => {
      const n = (tries.get(r.id) ?? 0) + 1;
      tries.set(r.id, n);
      if (Date.now() < downUntil) return { status: 503 };
      if (n === 1) return { status: 500 };
      if (n === 2 && r.id.charCodeAt(10) % 3 === 0) return { status: 200, delayMs: 600 };
      return { status: 200 };
    });
    const dispatcher = createDispatcher({ sql: db.sql, log, config: fast() });
    await dispatcher.start();
    try {
      await indexOnce(db.sql, chain.rpcUrl, chain.processor, {
        db,
        startBlock: chain.startBlock,
        hooks: hooks(idleAt),
      });
      const [c] = await db.sql<{ block: string; t: string }[]>`
        select indexed_block::text as block, floor(extract(epoch from indexed_time))::text as t from chains`;
      await hooks(idleAt)[0]!.onIdle!(db.sql, {
        chainId: chain.chainId,
        indexedBlock: BigInt(c!.block),
        indexedTime: Number(c!.t),
        head: BigInt(c!.block),
      });
      dispatcher.wake();
      await until("deliveries pending", async () => (await pending(db)) === 0, 60_000);
    } finally {
      await dispatcher.stop();
    }
    const expected = await db.sql<
      { id: string; type: string }[]
    >`select id, type from event_log where merchant = ${MERCHANT} order by seq`;
    expect(expected.length).toBeGreaterThan(20);
    expect([...receiver.delivered()].sort()).toEqual(expected.map((e) => e.id).sort());
    const wh = new Webhook(secret);
    const byId = new Map<string, any>();
    for (const r of receiver.received) {
      const payload = wh.verify(r.body, r.headers) as any;
      expect(payload.id).toBe(r.id);
      byId.set(r.id, payload);
    }
    expect([...tries.values()].every((n) => n >= 2)).toBe(true); // every event was retried at least once
    // The statuses each allocation went through, as received and ordered by the receiver, equal the log's.
    const received = [...byId.values()]
      .filter((e) => e.type.startsWith("subscription."))
      .sort(
        (a, b) => a.timestamp.localeCompare(b.timestamp) || Number(BigInt(a.block_number) - BigInt(b.block_number)),
      );
    const logged = await db.sql<{ data: any }[]>`
      select data from merchant_events where merchant = ${MERCHANT} and type like 'subscription.%' order by seq`;
    const seq = (list: any[]) => {
      const m = new Map<string, string[]>();
      for (const o of list)
        (m.get(o.object.allocation_id) ?? m.set(o.object.allocation_id, []).get(o.object.allocation_id)!).push(
          o.object.status,
        );
      return m;
    };
    expect(seq(received.map((e) => e.data))).toEqual(seq(logged.map((e) => e.data)));
  }, 120_000);

  test("a tampered body or an old timestamp fails verification", () => {
    const r = receiver.received.find((x) => x.body.includes("charge.succeeded"))!;
    const wh = new Webhook(secret);
    expect(() => wh.verify(r.body.replace(/"amount_charged":"\d/, '"amount_charged":"9'), r.headers)).toThrow();
    expect(() =>
      wh.verify(r.body, { ...r.headers, "webhook-timestamp": String(Math.floor(Date.now() / 1000) - 3600) }),
    ).toThrow();
  });
});

describe("dispatching rules", () => {
  let db: Db;
  let receiver: Receiver;
  let seq = 0;

  /** Writes `n` events for the merchant and fans them out, as the indexer's transaction does. */
  async function emit(n: number, type = "charge.succeeded"): Promise<string[]> {
    const ids: string[] = [];
    await db.sql.begin(async (tx) => {
      const first = seq + 1;
      for (let i = 0; i < n; i++) {
        const id = `evt_${(++seq).toString(16).padStart(40, "0")}`;
        ids.push(id);
        await tx`insert into merchant_events (id, chain_id, merchant, type, block_number, log_index, ts, data)
          values (${id}, 31337, ${MERCHANT}, ${type}, ${seq}, 0, now(), ${tx.json({ object: { n: seq } })})`;
      }
      const [r] = await tx<
        { lo: string; hi: string }[]
      >`select min(seq)::text as lo, max(seq)::text as hi from merchant_events where id = any(${ids})`;
      await fanOut(tx, { chainId: 31337, fromSeq: BigInt(r!.lo), toSeq: BigInt(r!.hi), withdrawals: false });
      void first;
    });
    return ids;
  }

  beforeAll(async () => {
    db = await createTestDb();
    receiver = startReceiver();
  });
  afterAll(async () => {
    await receiver?.stop();
    await db?.close();
  });

  test("at most WEBHOOK_CONCURRENCY_PER_ENDPOINT requests in flight to one endpoint", async () => {
    const ep = await endpointForAll(db.sql, MERCHANT, receiver.url);
    receiver.respond(() => ({ status: 200, delayMs: 100 }));
    const ids = await emit(16);
    const d = createDispatcher({ sql: db.sql, log, config: fast({ perEndpoint: 2, timeoutMs: 2000 }) });
    await d.start();
    await until("pending", async () => (await pending(db)) === 0, 30_000);
    await d.stop();
    for (const id of ids) expect(receiver.delivered().has(id)).toBe(true);
    expect(receiver.maxInflight()).toBe(2);
    await deleteEndpoint(db.sql, null, ep.id);
  }, 60_000);

  test("a pending delivery of an event a reorg withdrew meanwhile is cancelled, never sent", async () => {
    const ep = await endpointForAll(db.sql, MERCHANT, receiver.url);
    receiver.respond(() => ({ status: 200 }));
    const [gone, kept] = await emit(2);
    // As if a replay had raced the rollback: the event is withdrawn, its delivery still pending.
    await db.sql`update merchant_events set reverted_by = 'evt_ffff' where id = ${gone!}`;
    const d = createDispatcher({ sql: db.sql, log, config: fast() });
    await d.start();
    await until("pending", async () => (await pending(db)) === 0, 30_000);
    await d.stop();
    expect(receiver.delivered().has(kept!)).toBe(true);
    expect(receiver.delivered().has(gone!)).toBe(false);
    const [row] = await db.sql<{ status: string; attempts: number }[]>`
      select status, attempts from webhook_deliveries where event_id = ${gone!}`;
    expect(row).toEqual({ status: "cancelled", attempts: 0 });
    await deleteEndpoint(db.sql, null, ep.id);
  }, 60_000);

  test("two dispatchers share the work and never send one delivery twice", async () => {
    const ep = await endpointForAll(db.sql, MERCHANT, receiver.url);
    receiver.respond(() => ({ status: 200 }));
    const start = receiver.received.length;
    const ids = await emit(300);
    const a = createDispatcher({ sql: db.sql, log, config: fast() });
    const b = createDispatcher({ sql: db.sql, log, config: fast() });
    await Promise.all([a.start(), b.start()]);
    await until("pending", async () => (await pending(db)) === 0, 30_000);
    await Promise.all([a.stop(), b.stop()]);
    const got = receiver.received.slice(start).map((r) => r.id);
    expect(got.sort()).toEqual([...ids].sort());
    await deleteEndpoint(db.sql, null, ep.id);
  }, 60_000);

  test("event_types filter; rotation signs with both secrets for 24 h; redeliver and replay send again", async () => {
    const ep = await createEndpoint(
      db.sql,
      { merchant: MERCHANT, url: receiver.url, eventTypes: ["charge.failed"], description: null },
      undefined,
    );
    receiver.respond(() => ({ status: 200 }));
    const start = receiver.received.length;
    await emit(2, "charge.succeeded");
    const rotated = await rotateSecret(db.sql, MERCHANT, ep.id, undefined);
    const [failed] = await emit(1, "charge.failed");
    const d = createDispatcher({ sql: db.sql, log, config: fast() });
    await d.start();
    await until("pending", async () => (await pending(db)) === 0, 30_000);
    const got = receiver.received.slice(start);
    expect(got.map((r) => r.id)).toEqual([failed!]);
    expect(got[0]!.signature.split(" ").length).toBe(2);
    expect(new Webhook(ep.secret).verify(got[0]!.body, got[0]!.headers)).toBeTruthy();
    expect(new Webhook(rotated!.secret).verify(got[0]!.body, got[0]!.headers)).toBeTruthy();
    expect(await enqueue(db.sql, "redeliver", { endpointId: ep.id, where: db.sql`e.id = ${failed!}` })).toBe(1);
    expect(
      await enqueue(db.sql, "replay", {
        endpointId: ep.id,
        where: db.sql`e.merchant = ${MERCHANT} and e.type = 'charge.failed'`,
      }),
    ).toBe(1);
    d.wake();
    await until("redeliveries", async () => receiver.received.length - start === 3, 30_000);
    await d.stop();
    expect(receiver.received.slice(start).map((r) => r.id)).toEqual([failed!, failed!, failed!]);
    await deleteEndpoint(db.sql, null, ep.id);
  }, 60_000);

  test("an endpoint failing for WEBHOOK_DISABLE_AFTER_S is disabled and gets nothing new; deletion cancels pending ones", async () => {
    const ep = await endpointForAll(db.sql, MERCHANT, receiver.url);
    receiver.respond(() => ({ status: 500 }));
    await emit(3);
    const d = createDispatcher({ sql: db.sql, log, config: fast({ disableAfterS: 1 }) });
    await d.start();
    await until(
      "disabled",
      async () => !(await db.sql`select enabled from webhook_endpoints where id = ${ep.id}`)[0]!.enabled,
      30_000,
    );
    const [row] = await db.sql`select disabled_reason from webhook_endpoints where id = ${ep.id}`;
    expect(row!.disabled_reason).toContain("failed");
    const before = receiver.received.length;
    await emit(2);
    await Bun.sleep(400);
    expect(receiver.received.length).toBe(before);
    await d.stop();
    expect(
      (
        await db.sql`select count(*)::int as n from webhook_deliveries where endpoint_id = ${ep.id} and status = 'pending'`
      )[0]!.n,
    ).toBeGreaterThan(0);
    await deleteEndpoint(db.sql, MERCHANT, ep.id);
    expect((await db.sql`select count(*)::int as n from webhook_deliveries where endpoint_id = ${ep.id}`)[0]!.n).toBe(
      0,
    );
  }, 60_000);

  test("a destination that resolves to a private address is refused at attempt time", async () => {
    const ep = await endpointForAll(db.sql, MERCHANT, receiver.url.replace("127.0.0.1", "localhost"));
    const before = receiver.received.length;
    await emit(1);
    const d = createDispatcher({ sql: db.sql, log, config: fast({ allowPrivate: false, retrySchedule: [] }) });
    await d.start();
    await until("pending", async () => (await pending(db)) === 0, 30_000);
    await d.stop();
    expect(receiver.received.length).toBe(before);
    const [row] = await db.sql<
      { status: string; error: string }[]
    >`select status, error from webhook_deliveries where endpoint_id = ${ep.id}`;
    expect(row!.status).toBe("failed");
    expect(row!.error).toMatch(/https|private/);
  }, 60_000);
});
