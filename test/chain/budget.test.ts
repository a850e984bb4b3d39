import { describe, expect, test } from "bun:test";
import { CuBudget, parseWeights, retryAfterSeconds } from "../../src/chain/budget";

const budget = (cuPerSecond: number, weights: Record<string, number> = {}) =>
  new CuBudget({ cuPerSecond, weights, maxBatch: 100 });

async function spend(b: CuBudget, method: string, calls: number): Promise<number> {
  const t0 = performance.now();
  for (let i = 0; i < calls; i++) await b.acquire(b.cost(method));
  return (performance.now() - t0) / 1000;
}

describe("compute-unit budget", () => {
  test("spends at the configured rate once its two-second burst is gone", async () => {
    const b = budget(1000);
    // 100 eth_call at 26 CU = 2,600 CU: 2,000 from the bucket, 600 at 1,000 CU/s.
    const s = await spend(b, "eth_call", 100);
    expect(s).toBeGreaterThan(0.5);
    expect(s).toBeLessThan(2);
    // The bucket is empty: 500 CU more take half a second.
    const more = await spend(b, "eth_getLogs", 7);
    expect(more).toBeGreaterThan(0.4);
    expect(more).toBeLessThan(1.5);
  });

  test("a 429 halves the rate and pauses for Retry-After; answered time adds a tenth back per second", async () => {
    const b = budget(1000);
    b.throttled(0.3);
    expect(b.rate).toBe(500);
    expect(b.throttles).toBe(1);
    const t0 = performance.now();
    await b.acquire(10);
    const waited = (performance.now() - t0) / 1000;
    expect(waited).toBeGreaterThan(0.28);
    // After the pause the rate climbs back by 100 CU/s each second, never past the configured rate.
    expect(b.rate).toBeGreaterThan(520);
    expect(b.rate).toBeLessThan(700);
    b.throttled(0.01);
    b.throttled(0.01);
    expect(b.rate).toBeLessThan(150);
    await Bun.sleep(250);
    await b.acquire(1);
    expect(b.rate).toBeGreaterThan(140);
  });

  test("without a rate it never waits, but a 429 still pauses", async () => {
    const b = budget(0);
    expect(await spend(b, "eth_getLogs", 1000)).toBeLessThan(0.2);
    b.throttled(0.2);
    expect(await spend(b, "eth_getLogs", 1)).toBeGreaterThan(0.18);
  });

  test("weights: Alchemy's by default, RPC_CU_WEIGHTS over them, '*' for the unlisted", () => {
    expect(budget(1).cost("eth_getLogs")).toBe(75);
    expect(budget(1).cost("eth_getBlockByNumber")).toBe(16);
    expect(budget(1).cost("debug_traceBlock")).toBe(26);
    const w = parseWeights("eth_getLogs=60, *=20");
    expect(budget(1, w).cost("eth_getLogs")).toBe(60);
    expect(budget(1, w).cost("eth_call")).toBe(26);
    expect(budget(1, w).cost("debug_traceBlock")).toBe(20);
    expect(() => parseWeights("eth_getLogs")).toThrow(/method=units/);
  });

  test("a batch never costs more than the bucket holds, and halves on a refusal", () => {
    const b = budget(330);
    expect(b.batchFor(16)).toBe(40); // 660 CU less a 3 % margin
    expect(budget(0).batchFor(16)).toBe(100);
    b.batchRefused();
    b.batchRefused();
    expect(b.maxBatch).toBe(25);
    expect(b.batchFor(16)).toBe(25);
  });

  test("compute units an hour: none before a minute of data, then the last hour's rate", () => {
    const b = budget(0);
    const t0 = 1_000_000;
    expect(b.perHour(t0)).toBeNull();
    b.answered("eth_getBlockByNumber");
    b.answered("eth_getLogs");
    expect(b.perHour(t0 + 30_000)).toBeNull();
    // 91 CU in 2 minutes: 2,730 an hour.
    expect(b.perHour(t0 + 120_000)).toBe(2730);
    expect(b.spent.get("eth_getLogs")).toBe(75);
  });

  test("Retry-After in seconds or as a date", () => {
    expect(retryAfterSeconds("2")).toBe(2);
    expect(retryAfterSeconds(null)).toBeUndefined();
    const s = retryAfterSeconds(new Date(Date.now() + 3000).toUTCString())!;
    expect(s).toBeGreaterThan(1);
    expect(s).toBeLessThanOrEqual(3);
  });
});
