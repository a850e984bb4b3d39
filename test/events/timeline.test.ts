import { describe, expect, test } from "bun:test";
import { activitySeqs, numberEvents, subscriptionEvents, type NewEvent } from "../../src/events/timeline";
import type { SubState } from "../../src/domain/subscription";
import type { BatchEvent } from "../../src/indexer/fetch";

const SIZE = 1n << 28n;
const exact = (base: bigint, n: number) =>
  Array.from({ length: n }, (_, k) => (base + (SIZE / BigInt(n + 1)) * BigInt(k + 1)).toString());

describe("a batch's block of seqs", () => {
  test("activity seqs are exact, in float arithmetic below 2^53 and in bigint above it", () => {
    for (const base of [
      1n,
      268435457n,
      (1n << 53n) - SIZE - 1n,
      (1n << 53n) - SIZE,
      1n << 60n,
      (1n << 63n) - SIZE - 1n,
    ]) {
      for (const n of [0, 1, 7, 5000]) expect(activitySeqs(base, SIZE, n)).toEqual(exact(base, n));
    }
  });

  test("subscription events fall between the activity events around them, in chain order", () => {
    const base = 1n + 5n * SIZE;
    const activity = [
      { blockNumber: 10n, logIndex: 1 },
      { blockNumber: 10n, logIndex: 4 },
      { blockNumber: 12n, logIndex: 0 },
    ];
    const ev = (blockNumber: bigint, logIndex: number, subIndex: number) =>
      ({ blockNumber, logIndex, subIndex }) as NewEvent;
    // Before everything, the status change caused by the second log, one after it, and an expiry of block 12.
    const events = [ev(9n, 3, 0), ev(10n, 4, 1), ev(11n, 0, 0), ev(12n, -1, 0)];
    numberEvents(base, SIZE, activity, events);
    const acts = activitySeqs(base, SIZE, activity.length).map(BigInt);
    const all = [
      { at: [10n, 1, 0], seq: acts[0]! },
      { at: [10n, 4, 0], seq: acts[1]! },
      { at: [12n, 0, 0], seq: acts[2]! },
      ...events.map((e) => ({ at: [e.blockNumber, e.logIndex, e.subIndex] as const, seq: e.seq! })),
    ];
    const chainOrder = [...all].sort((a, b) =>
      a.at[0] !== b.at[0]
        ? a.at[0] < b.at[0]
          ? -1
          : 1
        : Number(a.at[1]) - Number(b.at[1]) || Number(a.at[2]) - Number(b.at[2]),
    );
    const seqOrder = [...all].sort((a, b) => (a.seq < b.seq ? -1 : 1));
    expect(seqOrder).toEqual(chainOrder);
    for (const x of all) expect(x.seq >= base && x.seq < base + SIZE).toBe(true);
  });
});

describe("the fold of a batch (subscriptionEvents)", () => {
  const MODULE = "0x00000000000000000000000000000000000000aa";
  const MERCHANT = "0x00000000000000000000000000000000000000bb";
  const ALICE = "0x00000000000000000000000000000000000000cc";
  const HOUR = 3600;
  let logIndex = 0;
  const log = (blockNumber: bigint, blockTime: number, name: string, subscriptionId: string | null, args = {}) =>
    ({
      blockNumber,
      logIndex: logIndex++,
      txHash: `0x${"1".repeat(63)}${logIndex % 10}`,
      blockHash: `0x${blockNumber.toString(16).padStart(64, "0")}`,
      blockTime,
      address: MODULE,
      name,
      subscriptionId,
      args,
    }) as BatchEvent;
  /** A paid allocation of alice on plan `planId`, charged at `lastPaidAt`. */
  const paid = (id: string, planId: string, lastPaidAt: number): SubState => ({
    subscriptionId: id,
    module: MODULE,
    merchant: MERCHANT,
    subscriber: ALICE,
    planId,
    maxExecutions: "0",
    timesExecuted: 1,
    totalSpent: 10n,
    createdAt: lastPaidAt,
    lastPaidAt,
    nextChargeAt: lastPaidAt + HOUR,
    allowanceExpiry: "0",
    paused: false,
    cancelled: false,
    blockNumber: 1n,
    logIndex: 0,
    txHash: "0x",
  });
  const fold = (events: BatchEvent[], before: SubState[], blocked: [string, boolean][] = []) =>
    subscriptionEvents(
      {
        chainId: 31337,
        events,
        before: new Map(before.map((s) => [s.subscriptionId, s])),
        blocked: new Map(blocked),
        plans: new Map([
          [`${MODULE}:1`, { interval: HOUR, grace: 0, token: "0x" }],
          [`${MODULE}:2`, { interval: HOUR, grace: 0, token: "0x" }],
        ]),
        announced: new Set(),
        prevTime: 1000,
        toBlock: events.at(-1)!.blockNumber,
        toHash: events.at(-1)!.blockHash,
        toTime: events.at(-1)!.blockTime,
      },
      new Map([[MODULE, MERCHANT]]),
    );
  const changes = (out: NewEvent[]) =>
    out
      .filter((e) => e.type === "subscription.status_changed")
      .map((e) => {
        const d = e.data as { object: { on_chain_id: string; status: string }; previous_status: string };
        return [d.object.on_chain_id, e.blockNumber, d.previous_status, d.object.status];
      })
      .sort((a, b) => Number(a[1]) - Number(b[1]) || String(a[0]).localeCompare(String(b[0])));

  test("a block, and an unblock in a later batch, change every allocation of the pair from its own status", () => {
    // Alice holds two ACTIVE allocations (plans 1 and 2) and a cancelled one; the merchant blocks her.
    const subs = [paid("1", "1", 900), paid("2", "2", 950), { ...paid("3", "1", 500), cancelled: true }];
    const blocked = fold([log(10n, 1100, "SubscriberBlocked", null, { subscriber: ALICE })], subs);
    expect(changes(blocked)).toEqual([
      ["1", 10n, "ACTIVE", "BLOCKED"],
      ["2", 10n, "ACTIVE", "BLOCKED"],
      ["3", 10n, "CANCELLED", "BLOCKED"],
    ]);
    const unblocked = fold([log(11n, 1200, "SubscriberUnblocked", null, { subscriber: ALICE })], subs, [
      [`${MODULE}:${ALICE}`, true],
    ]);
    expect(changes(unblocked)).toEqual([
      ["1", 11n, "BLOCKED", "ACTIVE"],
      ["2", 11n, "BLOCKED", "ACTIVE"],
      ["3", 11n, "BLOCKED", "CANCELLED"],
    ]);
  });

  test("an unblock then a re-subscription in one batch: each allocation sees the flag as of its own logs", () => {
    // Blocked before the batch: alice's paid allocation ran out meanwhile, the other is paused; the merchant unblocks
    // her and she subscribes again. The allocation walked first must not hide the unblock from the others.
    const out = fold(
      [
        log(20n, 5000, "SubscriberUnblocked", null, { subscriber: ALICE }),
        log(21n, 5100, "SubscriptionCreated", "7", {
          subscriptionId: "7",
          subscriber: ALICE,
          planId: "2",
          maxExecutions: "0",
          allowanceExpiry: "0",
        }),
      ],
      [paid("1", "1", 900), { ...paid("2", "2", 900), paused: true }],
      [[`${MODULE}:${ALICE}`, true]],
    );
    expect(changes(out)).toEqual([
      ["1", 20n, "BLOCKED", "EXPIRED"],
      ["2", 20n, "BLOCKED", "PAUSED"],
    ]);
    const created = out.filter((e) => e.type === "subscription.created");
    expect(created.map((e) => (e.data.object as { status: string }).status)).toEqual(["PENDING"]);
  });
});
