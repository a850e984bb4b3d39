import { describe, expect, test } from "bun:test";
import { createHeadPacer } from "../../src/indexer/poll";

const head = (n: number, t: number) => ({ number: BigInt(n), timestamp: t });

describe("head pacer", () => {
  test("with blocks every 2 s and 1 s polls, the poll between two blocks is skipped, the one after the next is not", () => {
    const p = createHeadPacer(1000);
    for (let i = 0; i < 5; i++) p.observe(head(100 + i, 1_000 + 2 * i), 10_000 + 2000 * i + 300);
    expect(p.intervalMs()).toBe(2000);
    const seen = 10_000 + 8000 + 300;
    expect(p.early(seen + 1000)).toBe(true);
    expect(p.early(seen + 1500)).toBe(false);
    expect(p.early(seen + 2000)).toBe(false);
  });

  test("never skips before four blocks, when blocks come faster than 1.5 polls, nor longer than 15 s", () => {
    const p = createHeadPacer(1000);
    p.observe(head(1, 100), 0);
    p.observe(head(2, 102), 2000);
    expect(p.early(2500)).toBe(false);
    const fast = createHeadPacer(1000);
    for (let i = 0; i < 6; i++) fast.observe(head(i, 100 + i), 1000 * i);
    expect(fast.early(5100)).toBe(false);
    const slow = createHeadPacer(1000);
    for (let i = 0; i < 6; i++) slow.observe(head(i, 100 + 60 * i), 60_000 * i);
    expect(slow.early(300_000 + 14_000)).toBe(true);
    expect(slow.early(300_000 + 15_000)).toBe(false);
  });

  test("an old or repeated head does not reset the wait", () => {
    const p = createHeadPacer(1000);
    for (let i = 0; i < 5; i++) p.observe(head(i, 100 + 2 * i), 2000 * i);
    p.observe(head(4, 108), 9000);
    expect(p.early(8000 + 1600)).toBe(false);
  });

  test("a chain whose time moves faster than the clock here (a test moving time, a node catching up) is never skipped", () => {
    const p = createHeadPacer(1000);
    for (let i = 0; i < 6; i++) p.observe(head(i, 100 + 120 * i), 50 * i);
    expect(p.intervalMs()).toBeNull();
    expect(p.early(300)).toBe(false);
  });
});
