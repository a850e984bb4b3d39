import { describe, expect, test } from "bun:test";
import fc from "fast-check";
import {
  etaSeconds,
  formatEta,
  pruneSamples,
  syncFraction,
  syncProgress,
  syncRate,
  windowRate,
  type SyncSample,
} from "../../src/domain/progress";
import { createSyncLog } from "../../src/indexer/sync-log";

describe("progress arithmetic", () => {
  test("fraction of [start, target] indexed, clamped to 0..1", () => {
    expect(syncFraction(100n, null, 199n)).toEqual({ done: 0n, total: 100n, fraction: 0 });
    expect(syncFraction(100n, 99n, 199n)).toEqual({ done: 0n, total: 100n, fraction: 0 });
    expect(syncFraction(100n, 141n, 199n)).toEqual({ done: 42n, total: 100n, fraction: 0.42 });
    expect(syncFraction(100n, 250n, 199n)).toEqual({ done: 100n, total: 100n, fraction: 1 });
    expect(syncFraction(100n, null, 50n).fraction).toBe(1); // nothing to index yet
  });

  test("the fraction only grows with the indexed block, for any start and target", () => {
    fc.assert(
      fc.property(
        fc.bigInt(0n, 10n ** 9n),
        fc.bigInt(0n, 10n ** 9n),
        fc.array(fc.bigInt(-1n, 10n ** 9n), { maxLength: 50 }),
        (start, span, blocks) => {
          const target = start + span;
          let last = -1;
          for (const b of [...blocks].sort((x, y) => (x < y ? -1 : x > y ? 1 : 0))) {
            const f = syncFraction(start, b, target).fraction;
            expect(f).toBeGreaterThanOrEqual(last);
            expect(f).toBeLessThanOrEqual(1);
            last = f;
          }
        },
      ),
      { numRuns: 200 },
    );
  });

  test("rate between samples; none when no time passed or the index went back", () => {
    const a: SyncSample = { at: 1_000, block: 100n, events: 10 };
    expect(syncRate(a, { at: 3_000, block: 300n, events: 50 })).toEqual({ blocksPerSec: 100, eventsPerSec: 20 });
    expect(syncRate(a, { at: 1_000, block: 300n, events: 50 })).toBeNull();
    expect(syncRate(a, { at: 2_000, block: 50n, events: 50 })).toBeNull();
  });

  test("the rate is over the last window only: a slow start does not drag it down", () => {
    const samples: SyncSample[] = [
      { at: 0, block: 0n, events: 0 },
      { at: 20_000, block: 100n, events: 0 }, // 5 blocks/s for 20 s
      { at: 25_000, block: 600n, events: 50 },
      { at: 30_000, block: 1_100n, events: 100 }, // then 100 blocks/s
    ];
    expect(windowRate(samples, 10_000)).toEqual({ blocksPerSec: 100, eventsPerSec: 10 });
    expect(windowRate(samples.slice(0, 1), 10_000)).toBeNull();
    // Pruning keeps exactly what the window needs.
    const kept = pruneSamples(samples, 10_000);
    expect(kept.map((s) => s.at)).toEqual([20_000, 25_000, 30_000]);
    expect(windowRate(kept, 10_000)).toEqual(windowRate(samples, 10_000));
  });

  test("ETA: remaining blocks at the rate; 0 when there; unknown without a rate", () => {
    expect(etaSeconds(1_000n, 50)).toBe(20);
    expect(etaSeconds(0n, null)).toBe(0);
    expect(etaSeconds(10n, null)).toBeNull();
    expect(etaSeconds(10n, 0)).toBeNull();
    expect(syncProgress(0n, 499n, 999n, 25)).toEqual({ done: 500n, total: 1000n, fraction: 0.5, etaS: 20 });
  });

  test("durations for people", () => {
    expect([
      formatEta(0.4),
      formatEta(45),
      formatEta(170),
      formatEta(7_500),
      formatEta(3 * 86_400 + 4 * 3_600),
    ]).toEqual(["0 s", "45 s", "3 min", "2 h 5 min", "3 d 4 h"]);
  });
});

describe("backfill log (a clock of its own)", () => {
  function harness() {
    let t = 0;
    const lines: { msg: string; fields: Record<string, unknown> }[] = [];
    const sync = createSyncLog({
      chainId: 8453,
      startBlock: 1_000n,
      confirmations: 10n,
      intervalMs: 10_000,
      log: (_level, msg, fields = {}) => lines.push({ msg, fields }),
      now: () => t,
    });
    return { sync, lines, advance: (ms: number) => (t += ms) };
  }

  test("a line every interval and at each 10 %, then one when caught up", () => {
    const { sync, lines, advance } = harness();
    sync.observe(null, 11_009n); // target 10_999: 10_000 blocks to index
    expect(lines[0]!.msg).toBe("indexer backfill started: 0 % (0 of 10000 blocks), ETA unknown");
    // 100 blocks/s, a batch a second: a line at each 10 % (every 10 s here: both rules agree)
    let block = 999n;
    for (let i = 0; i < 99; i++) {
      advance(1_000);
      block += 100n;
      sync.committed(block, 5, 11_009n);
    }
    const progress = lines.filter((l) => l.msg.startsWith("indexer backfill:"));
    expect(progress.map((l) => l.fields.percent)).toEqual([10, 20, 30, 40, 50, 60, 70, 80, 90]);
    expect(progress[4]!.fields).toMatchObject({ blocksDone: 5_000n, blocksPerSec: 100, eventsPerSec: 5, etaS: 50 });
    expect(progress[4]!.msg).toBe("indexer backfill: 50 % (5000 of 10000 blocks), ETA 50 s");
    expect(sync.blocksPerSec()).toBe(100);
    advance(1_000);
    sync.committed(10_999n, 5, 11_009n);
    expect(lines.at(-1)!.msg).toBe("indexer caught up: 10000 blocks, 500 events in 2 min");
    expect(lines.at(-1)!.fields).toMatchObject({ blocks: 10_000n, events: 500, tookS: 100 });
    expect(sync.blocksPerSec()).toBeNull();
    // Following the head afterwards logs nothing.
    sync.observe(10_999n, 11_015n);
    advance(20_000);
    sync.committed(11_005n, 1, 11_015n);
    expect(lines.at(-1)!.msg).toStartWith("indexer caught up");
  });

  test("slow progress still gets a line every interval", () => {
    const { sync, lines, advance } = harness();
    sync.observe(999n, 11_009n);
    for (let i = 0; i < 30; i++) {
      advance(1_000);
      sync.committed(1_000n + BigInt(i), 0, 11_009n); // 1 block/s: no 10 % crossing
    }
    const progress = lines.filter((l) => l.msg.startsWith("indexer backfill:"));
    expect(progress.length).toBe(3);
    expect(progress[0]!.fields.etaS).toBeGreaterThan(9_000);
  });

  test("a chain only a few blocks behind is not a backfill", () => {
    const { sync, lines } = harness();
    sync.observe(10_990n, 11_009n); // target 10_999: 9 behind
    sync.committed(10_999n, 3, 11_009n);
    expect(lines).toEqual([]);
  });
});
