import { afterAll, afterEach, beforeAll, describe, expect, test } from "bun:test";
import { Webhook } from "standardwebhooks";
import type { Db } from "../../src/db/client";
import { createLogger } from "../../src/common/log";
import { eventsHook } from "../../src/events/hook";
import { EVENT_COLUMNS, eventData, type EventRow } from "../../src/events/envelope";
import { fanOut } from "../../src/webhooks/fanout";
import { createDispatcher, dispatcherConfig, retryDelay, type DispatcherConfig } from "../../src/webhooks/dispatcher";
import { createEndpoint, deleteEndpoint, enqueue, rotateSecret } from "../../src/webhooks/endpoints";
import { createTestChain, type TestChain } from "../../testkit/chain";
import { createTestDb, testDbKind } from "../../testkit/db";
import { testConfig } from "../../testkit/app";
import { indexOnce } from "../../testkit/indexer";
import { runScenario } from "../../testkit/scenario";
import { endpointForAll, startReceiver, type Receiver } from "../../testkit/webhooks";
import { freePort, spawnBun, until, type Child } from "../../testkit/cli";

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
    const logged = (
      await db.sql<EventRow[]>`
        select ${db.sql.unsafe(EVENT_COLUMNS)} from event_log e
        where e.merchant = ${MERCHANT} and e.type like 'subscription.%' and e.stored order by e.seq`
    ).map((r) => ({ data: eventData(r) as any }));
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

let seq = 0;

/** Writes `n` events for the merchant into `db` and fans them out, as the indexer's transaction does. */
async function emit(db: Db, n: number, type = "charge.succeeded"): Promise<string[]> {
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

describe("dispatching rules", () => {
  let db: Db;
  let receiver: Receiver;

  // A test that fails midway leaves neither its dispatchers running nor its endpoint receiving the next one's events.
  const dispatchers: ReturnType<typeof createDispatcher>[] = [];
  const dispatcher = (config: DispatcherConfig) => {
    const d = createDispatcher({ sql: db.sql, log, config });
    dispatchers.push(d);
    return d;
  };
  // The exactly-once tests: an answer the loaded test process reads after 300 ms would be a timeout, then a retry
  // (at least once, as designed), and the receiver would count it twice.
  const patient = () => fast({ timeoutMs: 10_000 });

  beforeAll(async () => {
    db = await createTestDb();
    receiver = startReceiver();
  });
  afterEach(async () => {
    for (const d of dispatchers.splice(0)) await d.stop();
    const left = await db.sql<{ id: string }[]>`select id from webhook_endpoints`;
    for (const e of left) await deleteEndpoint(db.sql, null, e.id);
  });
  afterAll(async () => {
    await receiver?.stop();
    await db?.close();
  });

  test("at most WEBHOOK_CONCURRENCY_PER_ENDPOINT requests in flight to one endpoint", async () => {
    const ep = await endpointForAll(db.sql, MERCHANT, receiver.url);
    receiver.respond(() => ({ status: 200, delayMs: 100 }));
    const ids = await emit(db, 16);
    const d = dispatcher(fast({ perEndpoint: 2, timeoutMs: 2000 }));
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
    const [gone, kept] = await emit(db, 2);
    // As if a replay had raced the rollback: the event is withdrawn, its delivery still pending.
    await db.sql`update merchant_events set reverted_by = 'evt_ffff' where id = ${gone!}`;
    const d = dispatcher(fast());
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
    const ids = await emit(db, 300);
    const a = dispatcher(patient());
    const b = dispatcher(patient());
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
    await emit(db, 2, "charge.succeeded");
    const rotated = await rotateSecret(db.sql, MERCHANT, ep.id, undefined);
    const [failed] = await emit(db, 1, "charge.failed");
    const d = dispatcher(patient());
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
    await emit(db, 3);
    const d = dispatcher(fast({ disableAfterS: 1 }));
    await d.start();
    await until(
      "disabled",
      async () => !(await db.sql`select enabled from webhook_endpoints where id = ${ep.id}`)[0]!.enabled,
      30_000,
    );
    const [row] = await db.sql`select disabled_reason from webhook_endpoints where id = ${ep.id}`;
    expect(row!.disabled_reason).toContain("failed");
    const before = receiver.received.length;
    await emit(db, 2);
    // Three passes of the loop after the new deliveries were stored: each would have sent them to an enabled endpoint.
    const passes = d.passes();
    await until("three more passes", async () => (d.wake(), d.passes() >= passes + 3), 30_000);
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
    await emit(db, 1);
    const d = dispatcher(fast({ allowPrivate: false, retrySchedule: [] }));
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

describe("failed attempts: WEBHOOK_TIMEOUT_MS, redirects, WEBHOOK_RETRY_SCHEDULE and its jitter", () => {
  /** How long the slow receiver holds its answer: far longer than the timeout. */
  const HELD_MS = 30_000;
  let db: Db;
  let receiver: Receiver;

  /** The dispatcher's settings as the service reads them from the environment. */
  const fromEnv = (env: Record<string, string>) =>
    dispatcherConfig(testConfig({ WEBHOOK_ALLOW_PRIVATE_URLS: "1", WEBHOOK_POLL_INTERVAL_MS: "20", ...env }));

  const attemptsOf = (endpointId: string) =>
    db.sql<
      {
        attempt: number;
        outcome: string;
        receipt: string;
        response_status: number | null;
        error: string;
        duration_ms: number;
      }[]
    >`
      select a.attempt, a.outcome, a.receipt, a.response_status, a.error, a.duration_ms
      from webhook_attempts a where a.endpoint_id = ${endpointId} order by a.attempt`;

  const deliveryOf = async (endpointId: string) =>
    (
      await db.sql<{ status: string; attempts: number; error: string | null; retry_s: number | null }[]>`
        select status, attempts, error,
          extract(epoch from next_attempt_at - last_attempt_at)::float8 as retry_s
        from webhook_deliveries where endpoint_id = ${endpointId}`
    )[0];

  beforeAll(async () => {
    db = await createTestDb();
    receiver = startReceiver();
  });
  afterAll(async () => {
    await receiver?.stop();
    await db?.close();
  });

  test("a receiver holding its answer far longer than WEBHOOK_TIMEOUT_MS: every attempt ends at the timeout and says so; past WEBHOOK_RETRY_SCHEDULE=0,0 the delivery is failed", async () => {
    const ep = await endpointForAll(db.sql, MERCHANT, receiver.url);
    receiver.respond(() => ({ status: 200, delayMs: HELD_MS }));
    const [id] = await emit(db, 1);
    const config = fromEnv({ WEBHOOK_TIMEOUT_MS: "300", WEBHOOK_RETRY_SCHEDULE: "0,0" });
    expect(config).toMatchObject({ timeoutMs: 300, retrySchedule: [0, 0] });
    const d = createDispatcher({ sql: db.sql, log, config });
    const started = performance.now();
    await d.start();
    try {
      // Three attempts held for HELD_MS each would take 30 s: the timeout alone lets this end in time.
      await until("the delivery to fail", async () => (await deliveryOf(ep.id))?.status === "failed", HELD_MS / 2);
    } finally {
      await d.stop();
    }
    expect(performance.now() - started).toBeLessThan(HELD_MS / 2);
    const attempts = await attemptsOf(ep.id);
    expect(attempts.map(({ duration_ms, ...a }) => a)).toEqual(
      [1, 2, 3].map((attempt) => ({
        attempt,
        outcome: "failed",
        receipt: "unknown",
        response_status: null,
        error: "timeout after 300 ms",
      })),
    );
    for (const a of attempts) {
      expect(a.duration_ms).toBeGreaterThanOrEqual(290);
      expect(a.duration_ms).toBeLessThan(HELD_MS / 5);
    }
    expect(receiver.received.filter((r) => r.id === id)).toHaveLength(3);
    expect(await deliveryOf(ep.id)).toMatchObject({ status: "failed", attempts: 3, error: "timeout after 300 ms" });
    await deleteEndpoint(db.sql, null, ep.id);
  }, 60_000);

  test("a receiver answering 302 to another server (a private address): each attempt fails as a redirect not followed, the target never gets a request, and the delivery ends failed", async () => {
    let targetHits = 0;
    const target = Bun.serve({
      port: 0,
      hostname: "127.0.0.2",
      fetch: () => {
        targetHits++;
        return new Response("followed");
      },
    });
    try {
      expect(await fetch(target.url).then((r) => r.text())).toBe("followed"); // the target does answer
      targetHits = 0;
      const ep = await endpointForAll(db.sql, MERCHANT, receiver.url);
      receiver.respond(() => ({ status: 302, headers: { location: `${target.url.href}internal` } }));
      const [id] = await emit(db, 1);
      const d = createDispatcher({ sql: db.sql, log, config: fromEnv({ WEBHOOK_RETRY_SCHEDULE: "0,0" }) });
      await d.start();
      try {
        await until("the delivery to fail", async () => (await deliveryOf(ep.id))?.status === "failed", 20_000);
      } finally {
        await d.stop();
      }
      expect((await attemptsOf(ep.id)).map(({ duration_ms, ...a }) => a)).toEqual(
        [1, 2, 3].map((attempt) => ({
          attempt,
          outcome: "failed",
          receipt: "rejected",
          response_status: 302,
          error: "redirect (not followed)",
        })),
      );
      expect(receiver.received.filter((r) => r.id === id)).toHaveLength(3);
      expect(targetHits).toBe(0);
      await deleteEndpoint(db.sql, null, ep.id);
    } finally {
      target.stop(true);
    }
  }, 30_000);

  test("retryDelay: the schedule's delay ±10 % from the random source, null past the schedule", () => {
    expect(retryDelay([100, 300], 1, () => 0)).toBe(90);
    expect(retryDelay([100, 300], 1, () => 0.5)).toBe(100);
    expect(retryDelay([100, 300], 2, () => 0.75)).toBeCloseTo(315, 9);
    expect(retryDelay([100, 300], 2, () => 1 - 2 ** -53)).toBeCloseTo(330, 9);
    expect(retryDelay([100, 300], 3, () => 0.5)).toBeNull();
    expect(retryDelay([], 1, () => 0.5)).toBeNull();
    // The default source: every draw inside [90, 110), and the draws reach both ends of it.
    const draws = Array.from({ length: 2000 }, () => retryDelay([100], 1)!);
    expect(Math.min(...draws)).toBeGreaterThanOrEqual(90);
    expect(Math.max(...draws)).toBeLessThanOrEqual(110);
    expect(Math.min(...draws)).toBeLessThan(91);
    expect(Math.max(...draws)).toBeGreaterThan(109);
  });

  test("the dispatcher schedules each retry at the schedule's delay with the jitter of its injected random source", async () => {
    receiver.respond(() => ({ status: 500 }));
    for (const [draw, expected] of [
      [0, 90],
      [0.75, 105],
    ] as const) {
      const ep = await endpointForAll(db.sql, MERCHANT, receiver.url);
      await emit(db, 1);
      const draws: number[] = [];
      const random = () => (draws.push(draw), draw);
      const d = createDispatcher({ sql: db.sql, log, config: fromEnv({ WEBHOOK_RETRY_SCHEDULE: "100,100" }), random });
      await d.start();
      try {
        await until("the first attempt", async () => (await attemptsOf(ep.id)).length === 1, 20_000);
      } finally {
        await d.stop();
      }
      expect(draws).toEqual([draw]);
      const row = await deliveryOf(ep.id);
      expect(row).toMatchObject({ status: "pending", attempts: 1, error: "HTTP 500" });
      expect(row!.retry_s).toBeCloseTo(expected, 2);
      await deleteEndpoint(db.sql, null, ep.id);
    }
  }, 60_000);
});

/** The counter `webhook_attempts_total` of a process, both outcomes summed, from its metrics text. */
const attemptsCounted = (text: string) =>
  [...text.matchAll(/^webhook_attempts_total\{[^}]*\} (\d+)$/gm)].reduce((n, m) => n + Number(m[1]), 0);

describe("two dispatcher processes on one database", () => {
  // PGlite is one process: two processes can only share a Postgres database.
  if (testDbKind !== "postgres") return;

  test("(Postgres only) two `bun start` processes with ROLES=webhooks: never more than WEBHOOK_CONCURRENCY_PER_ENDPOINT requests in flight at the receiver, and both processes delivered", async () => {
    const PER_ENDPOINT = 3;
    const db = await createTestDb();
    const receiver = startReceiver();
    const children: Child[] = [];
    try {
      await endpointForAll(db.sql, MERCHANT, receiver.url);
      // Each answer is held a while, and at random lengths, so the processes' sends overlap in many ways.
      receiver.respond(() => ({ status: 200, delayMs: 40 + Math.floor(Math.random() * 80) }));
      const ports = [await freePort(), await freePort()];
      for (const port of ports) {
        const child = spawnBun(["src/main.ts"], {
          DATABASE_URL: db.url,
          CHAIN_ID: "31337",
          ROLES: "webhooks",
          METRICS_PORT: String(port),
          LOG_LEVEL: "info",
          WEBHOOK_ALLOW_PRIVATE_URLS: "1",
          WEBHOOK_POLL_INTERVAL_MS: "20",
          WEBHOOK_TIMEOUT_MS: "5000",
          // Each process alone could fill the endpoint's limit but not exceed it; together they could.
          WEBHOOK_CONCURRENCY: "2",
          WEBHOOK_CONCURRENCY_PER_ENDPOINT: String(PER_ENDPOINT),
        });
        children.push(child);
      }
      // Both run before there is work, so that neither finds it all done.
      await Promise.all(children.map((c) => c.waitFor(/"msg":"service started"/, 60_000)));
      const ids = await emit(db, 60);
      await until("every delivery", async () => (await pending(db)) === 0, 60_000);
      const counted = await Promise.all(
        ports.map(async (port) => attemptsCounted(await (await fetch(`http://127.0.0.1:${port}/metrics`)).text())),
      );
      expect(receiver.delivered()).toEqual(new Set(ids));
      expect(receiver.maxInflight()).toBe(PER_ENDPOINT);
      expect(counted[0]! + counted[1]!).toBe(receiver.received.length);
      expect(counted[0]).toBeGreaterThan(0);
      expect(counted[1]).toBeGreaterThan(0);
    } finally {
      for (const c of children) c.proc.kill("SIGTERM");
      await Promise.all(children.map((c) => c.exited));
      await receiver.stop();
      await db.close();
    }
  }, 120_000);
});
