/**
 * `mayNotice`, the filter in front of the renewal_upcoming fold: over random allocations, logs and batch windows,
 * every allocation whose fold (`noticesOf`) finds a notice must pass it. It may pass allocations the fold then
 * rejects, but on a backfill's typical batch it must let most allocations skip the fold.
 */
import { describe, expect, test } from "bun:test";
import { mayNotice, noticesOf } from "../../src/renewals/upcoming";
import { planKey, type PlanInfo, type SubState } from "../../src/domain/subscription";
import type { BatchEvent } from "../../src/indexer/fetch";

const MODULE = "0x00000000000000000000000000000000000000aa";
const SUBSCRIBER = "0x00000000000000000000000000000000000000bb";
const MERCHANT = "0x00000000000000000000000000000000000000cc";
const ID = "7";

/** A deterministic generator (mulberry32), so a failure names a seed that reproduces it. */
function random(seed: number) {
  let a = seed;
  const next = () => {
    a = (a + 0x6d2b79f5) | 0;
    let t = Math.imul(a ^ (a >>> 15), 1 | a);
    t = (t + Math.imul(t ^ (t >>> 7), 61 | t)) ^ t;
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
  return { next, int: (lo: number, hi: number) => lo + Math.floor(next() * (hi - lo + 1)) };
}

function event(name: string, blockTime: number, i: number, args: Record<string, string | number | boolean> = {}) {
  const processor = name === "ChargeSucceeded" || name === "ChargeFailed";
  return {
    blockNumber: BigInt(blockTime),
    logIndex: i,
    txHash: `0x${i.toString(16).padStart(64, "0")}`,
    blockHash: `0x${blockTime.toString(16).padStart(64, "0")}`,
    blockTime,
    address: processor ? "0x00000000000000000000000000000000000000dd" : MODULE,
    name,
    subscriptionId: name.startsWith("Subscriber") ? null : ID,
    args: { subscriptionId: ID, subscriber: SUBSCRIBER, module: MODULE, planId: "1", ...args },
  } as BatchEvent;
}

const NAMES = [
  "ChargeSucceeded",
  "ChargeSucceeded",
  "ChargeFailed",
  "SubscriptionPaused",
  "SubscriptionResumed",
  "SubscriptionCancelled",
  "SubscriberBlocked",
  "SubscriberUnblocked",
  "AllowanceExpiryUpdated",
];

/** One random case: a state before the batch (or a creation in it), the batch's logs, its window and the plan. */
function randomCase(seed: number) {
  const r = random(seed);
  const noticeS = r.int(0, 4) * 3600;
  const interval = [600, 3600, 7200, 14_400, 86_400][r.int(0, 4)]!;
  const fromTime = 100_000 + r.int(0, 20_000);
  const toTime = fromTime + r.int(0, 4) * 1800;
  const created = r.next() < 0.25;
  // Schedules near the window's notice instants, so that many folds find one.
  const lastPaidAt = r.next() < 0.2 ? 0 : fromTime + noticeS - interval + r.int(-3600, 7200);
  const createdAt = Math.min(fromTime - r.int(0, 50_000), lastPaidAt || fromTime);
  const start: SubState | null = created
    ? null
    : {
        subscriptionId: ID,
        module: MODULE,
        merchant: MERCHANT,
        subscriber: SUBSCRIBER,
        planId: "1",
        maxExecutions: r.next() < 0.7 ? "0" : String(r.int(1, 3)),
        timesExecuted: r.int(0, 3),
        totalSpent: 0n,
        createdAt,
        lastPaidAt,
        nextChargeAt: (lastPaidAt || createdAt) + (r.next() < 0.8 ? interval : r.int(0, 2 * interval)),
        allowanceExpiry: "0",
        paused: r.next() < 0.2,
        cancelled: r.next() < 0.05,
        blockNumber: 1n,
        logIndex: 0,
        txHash: `0x${"0".repeat(64)}`,
      };
  const times = Array.from({ length: r.int(0, 6) }, () => r.int(fromTime, toTime)).sort((a, b) => a - b);
  const logs: BatchEvent[] = times.map((t, i) =>
    event(NAMES[r.int(0, NAMES.length - 1)]!, t, i, { amount: "10", allowanceExpiry: String(t + 99) }),
  );
  if (created) {
    const at = times[0] ?? fromTime + 1;
    logs.unshift(event("SubscriptionCreated", at, -1, { maxExecutions: "0", allowanceExpiry: "0" }));
  }
  const plans = new Map<string, PlanInfo>([[planKey(MODULE, "1"), { token: "0x", interval, grace: 0 }]]);
  return { start, logs, window: { fromTime, toTime, noticeS }, interval, plans, blocked: r.next() < 0.1 };
}

describe("mayNotice", () => {
  test("passes every allocation whose fold finds a notice (20,000 random cases)", () => {
    let found = 0;
    let skipped = 0;
    for (let seed = 1; seed <= 20_000; seed++) {
      const c = randomCase(seed);
      const charges = c.logs.filter((e) => e.name === "ChargeSucceeded").map((e) => e.blockTime);
      const notices = noticesOf(c.start, c.blocked, c.logs, { ...c.window, merchant: MERCHANT, plans: c.plans });
      const may = mayNotice(c.start, charges, c.interval, c.window);
      if (notices.length > 0) {
        found++;
        expect({ seed, may }).toEqual({ seed, may: true });
      } else if (!may) skipped++;
    }
    // The cases exercise both sides: folds that find a notice, and allocations the filter lets skip the fold.
    expect(found).toBeGreaterThan(500);
    expect(skipped).toBeGreaterThan(10_000);
  });

  test("a monthly plan with a 3-day notice: only the batch that holds next_charge_at − 3 days folds", () => {
    const month = 30 * 86_400;
    const notice = 3 * 86_400;
    const paid = 1_700_000_000;
    const s = {
      createdAt: paid - month,
      lastPaidAt: paid,
      nextChargeAt: paid + month,
    } as SubState;
    const at = (fromTime: number, toTime: number) => mayNotice(s, [], month, { fromTime, toTime, noticeS: notice });
    expect(at(paid + month - notice - 12, paid + month - notice)).toBe(true);
    expect(at(paid + month - notice, paid + month - notice + 12)).toBe(false);
    expect(at(paid + 12, paid + 24)).toBe(false);
    // A charge in the batch sets the next instant a month later: far from this batch.
    expect(mayNotice(s, [paid + 100], month, { fromTime: paid + 90, toTime: paid + 110, noticeS: notice })).toBe(false);
    // A plan shorter than the notice: the instant a charge sets is before the charge itself.
    expect(mayNotice(s, [paid + 100], 3600, { fromTime: paid + 90, toTime: paid + 110, noticeS: notice })).toBe(false);
    // A notice period of zero: the instant is the due instant itself, in range when it falls in the batch.
    expect(mayNotice(s, [paid + 100], 5, { fromTime: paid + 90, toTime: paid + 110, noticeS: 0 })).toBe(true);
  });
});
