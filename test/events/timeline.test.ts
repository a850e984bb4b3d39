import { describe, expect, test } from "bun:test";
import { activitySeqs, numberEvents, type NewEvent } from "../../src/events/timeline";

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
