import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import type { Address } from "viem";
import type { Db } from "../../src/db/client";
import { eventsHook } from "../../src/events/hook";
import { EVENT_COLUMNS, eventData, type EventRow } from "../../src/events/envelope";
import { paidUntil, subscriptionStatus } from "../../src/domain/status";
import { selectActivity, toActivityRecord } from "../../src/http/features/activity/service";
import { createTestChain, type TestChain } from "../../testkit/chain";
import { createTestDb } from "../../testkit/db";
import { indexOnce } from "../../testkit/indexer";
import {
  BLOCK_SCENARIO_PLANS,
  moduleCall,
  oneChargedSubscription,
  randomBlockScenario,
  runScenario,
  type BlockScenarioAction,
} from "../../testkit/scenario";
import { Webhook } from "standardwebhooks";
import { createLogger } from "../../src/common/log";
import { fanOut } from "../../src/webhooks/fanout";
import { createDispatcher } from "../../src/webhooks/dispatcher";
import { endpointForAll, startReceiver, type Receiver } from "../../testkit/webhooks";
import { until } from "../../testkit/cli";

type Ev = {
  seq: string;
  id: string;
  type: string;
  merchant: string;
  block_number: string;
  log_index: number;
  sub_index: number;
  ts: Date;
  data: any;
  reverted_by: string | null;
};

/** The whole log in order, activity events with their record built as the API builds it. */
const events = async (db: Db): Promise<Ev[]> => {
  const rows = await db.sql<(EventRow & { sub_index: number; reverted_by: string | null })[]>`
    select ${db.sql.unsafe(EVENT_COLUMNS)}, e.sub_index, e.reverted_by from event_log e order by e.seq`;
  return rows.map((r) => ({ ...r, data: eventData(r) }));
};
const allocationOf = (e: Ev): string | undefined => e.data.object?.allocation_id;

/** Final status of every allocation by the one status rule, at unix second `at`. */
async function statusesAt(db: Db, chainId: number, at: number): Promise<Map<string, string>> {
  const rows = await db.sql<any[]>`
    select s.module, s.subscription_id, s.cancelled, s.paused, s.times_executed, s.last_paid_at,
      p.interval_s, p.grace_s, coalesce(b.blocked, false) as blocked
    from subscriptions s join plans p on p.chain_id = s.chain_id and p.module = s.module and p.plan_id = s.plan_id
    left join blocked_subscribers b on b.chain_id = s.chain_id and b.module = s.module and b.subscriber = s.subscriber`;
  return new Map(
    rows.map((r) => [
      `${chainId}:${r.module}:${r.subscription_id}`,
      subscriptionStatus(
        {
          blocked: r.blocked,
          cancelled: r.cancelled,
          paused: r.paused,
          timesExecuted: Number(r.times_executed),
          lastPaidAt: Number(r.last_paid_at),
          interval: Number(r.interval_s),
          grace: Number(r.grace_s),
        },
        at,
      ),
    ]),
  );
}

describe("the event log of a scenario that emits every protocol event", () => {
  let chain: TestChain;
  let db: Db;
  let log: Ev[];
  let idleAt: number;

  beforeAll(async () => {
    chain = await createTestChain();
    await runScenario(chain);
    db = await createTestDb();
    idleAt = Number(await chain.now()) + 10 * 86400; // later than every paid-until of the scenario's short plans
    const hook = eventsHook({ now: () => idleAt });
    await indexOnce(db.sql, chain.rpcUrl, chain.processor, { db, startBlock: chain.startBlock, hooks: [hook] });
    const [c] = await db.sql<{ block: string; t: string }[]>`
      select indexed_block::text as block, floor(extract(epoch from indexed_time))::text as t from chains`;
    const idle = {
      chainId: chain.chainId,
      indexedBlock: BigInt(c!.block),
      indexedTime: Number(c!.t),
      head: BigInt(c!.block),
    };
    await hook.onIdle!(db.sql, idle);
    log = await events(db);
  }, 120_000);

  afterAll(async () => {
    await db?.close();
    await chain?.stop();
  });

  test("one event per activity record, its data.object exactly the activity API's record", async () => {
    const merchants = await db.sql<{ merchant: string }[]>`select distinct merchant from activity`;
    let records: any[] = [];
    for (const { merchant } of merchants) {
      const rows = await selectActivity(db.sql, { merchant, chainId: chain.chainId, order: "asc" }, undefined);
      records = records.concat(rows.map(toActivityRecord));
    }
    const types = { CHARGE: "charge.succeeded", FAIL: "charge.failed", REFILL: "credit.refilled" } as const;
    const fromLog = log.filter((e) => Object.values(types).includes(e.type as never));
    expect(records.length).toBeGreaterThan(5);
    expect(fromLog.length).toBe(records.length);
    const byEventId = new Map(fromLog.map((e) => [e.data.object.event_id, e]));
    for (const r of records) {
      const e = byEventId.get(r.event_id)!;
      expect(e.type).toBe(types[r.type as keyof typeof types]);
      expect(e.data.object).toEqual(r);
      expect(e.ts.toISOString()).toBe(r.timestamp);
    }
    expect(new Set(log.map((e) => e.id)).size).toBe(log.length);
    // An activity event's id names its chain position and block; any other is a hash of the fact.
    for (const e of fromLog) {
      const hex = (n: number | bigint, w: number) => n.toString(16).padStart(w, "0");
      const prefix = `evt_${hex(chain.chainId, 10)}${hex(BigInt(e.block_number), 10)}${hex(e.log_index, 6)}`;
      expect(e.id.startsWith(prefix)).toBe(true);
      expect(e.id).toMatch(/^evt_[0-9a-f]{60}$/);
    }
    for (const e of log.filter((e) => !fromLog.includes(e))) expect(e.id).toMatch(/^evt_[0-9a-f]{40}$/);
  });

  test("the log is in chain order: block, then position in the block (expiries first), then cause before effect", async () => {
    const indexed = log.filter((e) => e.log_index !== 2147483647); // idle expiries come after, at the indexed block
    expect(indexed.length).toBeGreaterThan(20);
    const key = (e: Ev) => [BigInt(e.block_number), e.log_index, e.sub_index] as const;
    for (let i = 1; i < indexed.length; i++) {
      const [a, b] = [key(indexed[i - 1]!), key(indexed[i]!)];
      const ordered = a[0] !== b[0] ? a[0] < b[0] : a[1] !== b[1] ? a[1] < b[1] : a[2] <= b[2];
      if (!ordered) throw new Error(`${indexed[i - 1]!.id} (${a}) before ${indexed[i]!.id} (${b})`);
    }
  });

  test("each allocation starts with subscription.created and its status changes chain up to its final status", async () => {
    const finals = await statusesAt(db, chain.chainId, idleAt);
    const subs = await db.sql<
      { module: string; subscription_id: string }[]
    >`select module, subscription_id from subscriptions`;
    expect(subs.length).toBe(finals.size);
    for (const s of subs) {
      const alloc = `${chain.chainId}:${s.module}:${s.subscription_id}`;
      const mine = log.filter((e) => e.type.startsWith("subscription.") && allocationOf(e) === alloc);
      expect(mine[0]!.type).toBe("subscription.created");
      expect(mine.filter((e) => e.type === "subscription.created").length).toBe(1);
      let status = mine[0]!.data.object.status;
      for (const e of mine.slice(1)) {
        expect(e.data.previous_status).toBe(status);
        expect(e.data.object.status).not.toBe(status);
        status = e.data.object.status;
      }
      expect(status).toBe(finals.get(alloc)!);
    }
    const statuses = new Set(
      log.filter((e) => e.type === "subscription.status_changed").map((e) => e.data.object.status),
    );
    for (const s of ["ACTIVE", "PAUSED", "CANCELLED", "BLOCKED", "EXPIRED"]) expect(statuses).toContain(s);
  });

  test("a first successful charge gives charge.succeeded, then PENDING → ACTIVE, in that order", () => {
    const first = log.findIndex((e) => e.type === "charge.succeeded");
    const alloc = allocationOf(log[first]!)!;
    const next = log.slice(first + 1).find((e) => allocationOf(e) === alloc)!;
    const before = log.slice(0, first).filter((e) => allocationOf(e) === alloc);
    if (before.every((e) => e.type === "subscription.created")) {
      expect(next.type).toBe("subscription.status_changed");
      expect(next.data.previous_status).toBe("PENDING");
      expect(next.data.object.status).toBe("ACTIVE");
      expect(next.block_number).toBe(log[first]!.block_number);
    }
  });

  test("a re-index in small batches, written while earlier ones commit, creates exactly the same log", async () => {
    const other = await createTestDb();
    try {
      const hook = eventsHook({ now: () => idleAt });
      await indexOnce(other.sql, chain.rpcUrl, chain.processor, {
        db: other,
        startBlock: chain.startBlock,
        hooks: [hook],
        tuning: { initialRange: 2, maxRange: 3 },
      });
      const [c] = await other.sql<{ block: string; t: string }[]>`
        select indexed_block::text as block, floor(extract(epoch from indexed_time))::text as t from chains`;
      await hook.onIdle!(other.sql, {
        chainId: chain.chainId,
        indexedBlock: BigInt(c!.block),
        indexedTime: Number(c!.t),
        head: BigInt(c!.block),
      });
      // Batches of 2–3 blocks, two transactions in flight on Postgres: each batch folds while the one before it may
      // not have committed yet. Same events, same order, same data.
      const again = await events(other);
      const content = (es: Ev[]) =>
        es.map((e) => ({ id: e.id, type: e.type, at: [e.block_number, e.log_index, e.sub_index], data: e.data }));
      expect(content(again)).toEqual(content(log));
    } finally {
      await other.close();
    }
  }, 120_000);
});

describe("expiry", () => {
  let chain: TestChain;
  let db: Db;
  let module: Address;
  let token: Address;
  const INTERVAL = 3600;
  const GRACE = 600;

  beforeAll(async () => {
    chain = await createTestChain();
    db = await createTestDb();
    token = await chain.deployToken();
    module = await chain.createModule("merchant");
    await chain.createPlan("merchant", module, {
      planId: 1,
      token,
      amount: 1000n,
      interval: INTERVAL,
      gracePeriod: GRACE,
    });
    await chain.fund("alice", token, 10_000_000n);
    await chain.fund("bob", token, 10_000_000n);
  }, 60_000);

  afterAll(async () => {
    await db?.close();
    await chain?.stop();
  });

  const expiries = async () =>
    (await events(db)).filter((e) => e.type === "subscription.status_changed" && e.data.object.status === "EXPIRED");

  test("announced at the exact instant, once, never early; inside one big batch; a late charge gives EXPIRED then ACTIVE", async () => {
    const a = await chain.subscribe("alice", module, 1);
    const paid = (await chain.charge(module, a)).blockNumber;
    const paidAt = Number((await chain.publicClient.getBlock({ blockNumber: paid })).timestamp);
    const instant = paidUntil({ lastPaidAt: paidAt, interval: INTERVAL, grace: GRACE }) + 1;
    // A block exactly at the last ACTIVE second: nothing yet, even with the idle clock at that second.
    await chain.mineAt(instant - 1);
    const hook = eventsHook({ now: () => instant - 1 });
    await indexOnce(db.sql, chain.rpcUrl, chain.processor, { db, startBlock: chain.startBlock, hooks: [hook] });
    expect(await expiries()).toEqual([]);
    // Blocks far past it, plus another allocation's activity, all indexed in one batch.
    const b = await chain.subscribe("bob", module, 1);
    await chain.mineAt(instant + 5000);
    await chain.charge(module, a); // a late charge: EXPIRED at the instant, then ACTIVE again at this block
    const late = eventsHook({ now: () => instant - 1 });
    await indexOnce(db.sql, chain.rpcUrl, chain.processor, { db, startBlock: chain.startBlock, hooks: [late] });
    const got = await expiries();
    expect(got.length).toBe(1);
    expect(got[0]!.ts.getTime() / 1000).toBe(instant);
    expect(got[0]!.data.previous_status).toBe("ACTIVE");
    expect(got[0]!.data.object.on_chain_id).toBe(a.toString());
    const mine = (await events(db)).filter(
      (e) => e.data.object?.on_chain_id === a.toString() && e.type.startsWith("subscription."),
    );
    expect(mine.map((e) => e.data.object.status)).toEqual(["PENDING", "ACTIVE", "EXPIRED", "ACTIVE"]);
    expect(b).toBeGreaterThan(a);
    // A restart re-reads nothing twice.
    await indexOnce(db.sql, chain.rpcUrl, chain.processor, { db, startBlock: chain.startBlock, hooks: [late] });
    expect((await expiries()).length).toBe(1);
  }, 120_000);

  test("an idle index announces an expiry once the wall clock passes it, with the newest indexed block", async () => {
    await chain.fund("carol", token, 10_000_000n);
    const sub = await chain.subscribe("carol", module, 1);
    const rc = await chain.charge(module, sub);
    const paidAt = Number((await chain.publicClient.getBlock({ blockNumber: rc.blockNumber })).timestamp);
    const instant = paidAt + INTERVAL + GRACE + 1;
    // Carol's only: the idle clock may pass the expiry of the allocation the test above charged late (a second or
    // more before carol's charge, as the wall clock went).
    const carols = async () => (await expiries()).filter((e) => e.data.object.on_chain_id === sub.toString());
    let clock = instant - 1;
    const hook = eventsHook({ now: () => clock });
    await indexOnce(db.sql, chain.rpcUrl, chain.processor, { db, startBlock: chain.startBlock, hooks: [hook] });
    expect(await carols()).toEqual([]);
    clock = instant;
    const [{ block }] = await db.sql<{ block: string }[]>`select indexed_block::text as block from chains`;
    await hook.onIdle!(db.sql, {
      chainId: chain.chainId,
      indexedBlock: BigInt(block),
      indexedTime: paidAt,
      head: BigInt(block),
    });
    await hook.onIdle!(db.sql, {
      chainId: chain.chainId,
      indexedBlock: BigInt(block),
      indexedTime: paidAt,
      head: BigInt(block),
    });
    const got = await carols();
    expect(got.length).toBe(1);
    expect(got[0]!.ts.getTime() / 1000).toBe(instant);
    expect(got[0]!.block_number).toBe(block);
  }, 120_000);
  test("an expiry lies in the first block at or after its instant, empty or not: same block and id in one batch or many", async () => {
    await chain.fund("dave", token, 10_000_000n);
    const sub = await chain.subscribe("dave", module, 1);
    const rc = await chain.charge(module, sub);
    const paidAt = Number((await chain.publicClient.getBlock({ blockNumber: rc.blockNumber })).timestamp);
    const instant = paidAt + INTERVAL + GRACE + 1;
    // Empty blocks around the instant, then more than the reorg window of empty blocks: the batch that reaches the
    // instant holds no log near it, and (in one big batch) no header either.
    await chain.mineAt(instant - 30);
    const expected = await chain.mineAt(instant + 7);
    await chain.mineAt(instant + 20);
    await chain.testClient.mine({ blocks: 100 });
    const expiriesOf = async (tuning: { initialRange: number; maxRange: number }) => {
      const other = await createTestDb();
      try {
        const hook = eventsHook({ now: () => instant - 1 });
        await indexOnce(other.sql, chain.rpcUrl, chain.processor, {
          db: other,
          startBlock: chain.startBlock,
          hooks: [hook],
          tuning,
        });
        return (await events(other))
          .filter((e) => e.type === "subscription.status_changed" && e.data.object.status === "EXPIRED")
          .map((e) => ({ id: e.id, block: e.block_number, sub: e.data.object.on_chain_id, ts: e.ts.getTime() / 1000 }));
      } finally {
        await other.close();
      }
    };
    const whole = await expiriesOf({ initialRange: 100_000, maxRange: 100_000 });
    const small = await expiriesOf({ initialRange: 2, maxRange: 3 });
    expect(small).toEqual(whole);
    const dave = whole.filter((e) => e.sub === sub.toString());
    expect(dave).toEqual([{ id: dave[0]!.id, block: expected.toString(), sub: sub.toString(), ts: instant }]);
  }, 180_000);
});

describe("reorgs", () => {
  test("withdrawn events are followed by event.reverted; applying them leaves exactly a fresh index of the new chain", async () => {
    const chain = await createTestChain();
    const db = await createTestDb();
    const fresh = await createTestDb();
    try {
      const { module, a } = await oneChargedSubscription(chain);
      const hooks = () => [eventsHook({ now: () => 0 })];
      await indexOnce(db.sql, chain.rpcUrl, chain.processor, { db, startBlock: chain.startBlock, hooks: hooks() });
      const snap = await chain.snapshot();
      const b = await chain.subscribe("bob", module, 1);
      await chain.charge(module, b);
      await moduleCall(chain, "alice", module, "pause", [a]);
      await indexOnce(db.sql, chain.rpcUrl, chain.processor, { db, startBlock: chain.startBlock, hooks: hooks() });
      const removed = (await events(db)).filter((e) => e.data.object?.on_chain_id === b.toString());
      const withdrawnIds = removed.map((e) => e.id);
      expect(withdrawnIds.length).toBeGreaterThan(1);
      expect(removed.map((e) => e.type)).toContain("subscription.created");
      await chain.revert(snap);
      await moduleCall(chain, "alice", module, "cancel", [a]);
      await chain.mineAt(Number(await chain.now()) + 20);
      await chain.mineAt(Number(await chain.now()) + 20);
      await chain.mineAt(Number(await chain.now()) + 20);
      await indexOnce(db.sql, chain.rpcUrl, chain.processor, { db, startBlock: chain.startBlock, hooks: hooks() });
      const after = await events(db);
      const reverted = after.filter((e) => e.type === "event.reverted");
      for (const id of withdrawnIds) {
        const r = reverted.find((e) => e.data.object.id === id)!;
        expect(r).toBeDefined();
        const orig = after.find((e) => e.id === id)!;
        expect(orig.reverted_by).toBe(r.id);
        // Its data as before, byte for byte, though the rollback deleted the allocation its record is built from.
        expect(JSON.stringify(orig.data)).toBe(JSON.stringify(removed.find((e) => e.id === id)!.data));
        expect(BigInt(r.seq)).toBeGreaterThan(BigInt(orig.seq));
        // It names the removed block, and a receiver ordering by time puts it after the event it withdraws.
        expect(r.block_number).toBe(orig.block_number);
        expect(r.ts.getTime()).toBeGreaterThanOrEqual(orig.ts.getTime());
      }
      const withdrawn = new Set(reverted.map((e) => e.data.object.id));
      const applied = after.filter((e) => e.type !== "event.reverted" && !withdrawn.has(e.id));
      await indexOnce(fresh.sql, chain.rpcUrl, chain.processor, {
        db: fresh,
        startBlock: chain.startBlock,
        hooks: hooks(),
      });
      const expected = await events(fresh);
      expect(applied.map((e) => [e.id, e.type, e.data])).toEqual(expected.map((e) => [e.id, e.type, e.data]));
    } finally {
      await db.close();
      await fresh.close();
      await chain.stop();
    }
  }, 120_000);
});

/** Statuses from which the random scenarios below blocked an allocation: together they must reach every one. */
const blockedFrom = new Set<string>();

/** A status change as the merchant sees it: its type, instant (unix s), previous status, status and block flag. */
type Change = { type: string; at: number; previous: string | null; status: string; blocked: boolean };

/**
 * The status changes of every allocation of a {@link randomBlockScenario}, from its actions alone: service.md's rule
 * (first match wins: BLOCKED, CANCELLED, PAUSED, PENDING, EXPIRED once past last paid + interval + grace, ACTIVE)
 * written again here, a block flag per wallet that every allocation of the wallet on the module shares, and an
 * expiry at its own instant (before a log of the same second), up to `until`.
 */
function modelChanges(actions: BlockScenarioAction[], until: number): Map<bigint, Change[]> {
  type Alloc = {
    wallet: string;
    planId: number;
    cancelled: boolean;
    paused: boolean;
    times: number;
    lastPaidAt: number;
  };
  const allocs = new Map<bigint, Alloc>();
  const blocked = new Set<string>();
  const changes = new Map<bigint, Change[]>();
  const plan = (a: Alloc) => BLOCK_SCENARIO_PLANS.find((p) => p.planId === a.planId)!;
  const expiresAt = (a: Alloc) => a.lastPaidAt + plan(a).interval + plan(a).gracePeriod + 1;
  const status = (a: Alloc, at: number) =>
    blocked.has(a.wallet)
      ? "BLOCKED"
      : a.cancelled
        ? "CANCELLED"
        : a.paused
          ? "PAUSED"
          : a.times === 0
            ? "PENDING"
            : at >= expiresAt(a)
              ? "EXPIRED"
              : "ACTIVE";
  const last = (id: bigint) => changes.get(id)!.at(-1)!;
  const record = (id: bigint, at: number) => {
    const a = allocs.get(id)!;
    const now = status(a, at);
    if (now !== last(id).status) {
      changes.get(id)!.push({
        type: "subscription.status_changed",
        at,
        previous: last(id).status,
        status: now,
        blocked: blocked.has(a.wallet),
      });
    }
  };
  const expireBefore = (at: number) => {
    for (const [id, a] of allocs) {
      if (last(id).status === "ACTIVE" && expiresAt(a) <= at) record(id, expiresAt(a));
    }
  };
  for (const act of actions) {
    expireBefore(act.at);
    if (act.kind === "subscribe") {
      const a = { wallet: act.wallet, planId: act.planId, cancelled: false, paused: false, times: 0, lastPaidAt: 0 };
      allocs.set(act.id, a);
      changes.set(act.id, [
        { type: "subscription.created", at: act.at, previous: null, status: status(a, act.at), blocked: false },
      ]);
      continue;
    }
    if (act.kind === "block") blocked.add(act.wallet);
    else if (act.kind === "unblock") blocked.delete(act.wallet);
    else {
      const a = allocs.get(act.id)!;
      if (act.kind === "charge" && act.succeeded) [a.times, a.lastPaidAt] = [a.times + 1, act.at];
      if (act.kind === "pause" || act.kind === "resume") a.paused = act.kind === "pause";
      if (act.kind === "cancel") a.cancelled = true;
    }
    for (const id of allocs.keys()) record(id, act.at);
  }
  expireBefore(until);
  return changes;
}

describe.each([11, 2024, 777_001])(
  "random scenario with several allocations per wallet, blocked and unblocked, seed %d",
  (seed) => {
    let chain: TestChain;
    let db: Db;
    let receiver: Receiver;
    let secret: string;
    let module: Address;
    let actions: BlockScenarioAction[];
    let idleAt: number;
    const merchant = () => chain.address("merchant").toLowerCase();

    beforeAll(async () => {
      chain = await createTestChain();
      db = await createTestDb();
      receiver = startReceiver();
      ({ module, actions } = await randomBlockScenario(chain, seed, { steps: 90 }));
      idleAt = Number(await chain.now()) + 10 * 86400;
      secret = (await endpointForAll(db.sql, merchant(), receiver.url)).secret;
      const hook = eventsHook({ onEvents: fanOut, now: () => idleAt });
      const dispatcher = createDispatcher({
        sql: db.sql,
        log: createLogger("error"),
        config: {
          timeoutMs: 2000,
          retrySchedule: [0.05, 0.1, 0.2],
          disableAfterS: 3600,
          perEndpoint: 8,
          concurrency: 16,
          pollIntervalMs: 50,
          allowPrivate: true,
        },
      });
      await dispatcher.start();
      try {
        // Batches of 1–4 blocks: a block change lands in a batch of its own or with the allocations it changes.
        await indexOnce(db.sql, chain.rpcUrl, chain.processor, {
          db,
          startBlock: chain.startBlock,
          hooks: [hook],
          tuning: { initialRange: 1 + (seed % 4), maxRange: 4 },
        });
        const [c] = await db.sql<{ block: string; t: string }[]>`
        select indexed_block::text as block, floor(extract(epoch from indexed_time))::text as t from chains`;
        await hook.onIdle!(db.sql, {
          chainId: chain.chainId,
          indexedBlock: BigInt(c!.block),
          indexedTime: Number(c!.t),
          head: BigInt(c!.block),
        });
        dispatcher.wake();
        await until(
          "deliveries sent",
          async () =>
            (await db.sql`select 1 from webhook_deliveries where status = 'pending' limit 1`).length === 0 &&
            (await db.sql`select 1 from webhook_deliveries limit 1`).length > 0,
          60_000,
        );
      } finally {
        await dispatcher.stop();
      }
    }, 180_000);

    afterAll(async () => {
      await receiver?.stop();
      await db?.close();
      await chain?.stop();
    });

    const allocation = (id: bigint) => `${chain.chainId}:${module.toLowerCase()}:${id}`;
    const asChange = (e: { type: string; ts: number; data: any }): Change => ({
      type: e.type,
      at: e.ts,
      previous: e.data.previous_status ?? null,
      status: e.data.object.status,
      blocked: e.data.object.is_blocked,
    });

    test("the scenario blocks and unblocks wallets that hold several allocations at once", () => {
      const model = modelChanges(actions, idleAt);
      for (const c of [...model.values()].flat()) if (c.status === "BLOCKED" && c.previous) blockedFrom.add(c.previous);
      // Block changes (at their instant) that changed two allocations or more of one wallet at once.
      const changed = new Map<number, number>();
      for (const changes of model.values()) {
        for (const c of changes) {
          if (c.type === "subscription.created" || (c.status !== "BLOCKED" && c.previous !== "BLOCKED")) continue;
          changed.set(c.at, (changed.get(c.at) ?? 0) + 1);
        }
      }
      expect([...changed.values()].filter((n) => n >= 2).length).toBeGreaterThan(1);
      expect(actions.filter((a) => a.kind === "unblock").length).toBeGreaterThan(1);
    });

    test("the event log holds, for every allocation, exactly the model's status changes in order", async () => {
      const model = modelChanges(actions, idleAt);
      const log = (await events(db)).filter((e) => e.type.startsWith("subscription."));
      expect(log.every((e) => e.reverted_by === null)).toBe(true);
      const got = new Map<bigint, Change[]>();
      for (const e of log) {
        const id = BigInt(e.data.object.on_chain_id);
        (got.get(id) ?? got.set(id, []).get(id)!).push(asChange({ ...e, ts: e.ts.getTime() / 1000 }));
      }
      expect(got).toEqual(model);
    });

    test("a webhook receiver gets, verified, every change of the model once", () => {
      const model = modelChanges(actions, idleAt);
      const wh = new Webhook(secret);
      const received = new Map<string, any>();
      for (const r of receiver.received) received.set(r.id, wh.verify(r.body, r.headers));
      const changes = [...received.values()]
        .filter((e) => e.type.startsWith("subscription."))
        .map((e) => ({ id: e.data.object.allocation_id, ...asChange({ ...e, ts: Date.parse(e.timestamp) / 1000 }) }));
      const expected = [...model].flatMap(([id, cs]) => cs.map((c) => ({ id: allocation(id), ...c })));
      // Delivery order is not guaranteed (webhooks.md §3): compare as sets, each change once.
      const key = (c: object) => JSON.stringify(c);
      expect(changes.map(key).sort()).toEqual(expected.map(key).sort());
    });
  },
);

test("the random scenarios blocked allocations from every status", () => {
  expect([...blockedFrom].sort()).toEqual(["ACTIVE", "CANCELLED", "EXPIRED", "PAUSED", "PENDING"]);
});
