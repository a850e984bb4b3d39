import { describe, expect, test } from "bun:test";
import { createPollLoop } from "../../src/common/async";

describe("createPollLoop", () => {
  test("a wake during a pass starts the next pass right after it, not an interval later", async () => {
    const passes: number[] = [];
    let release: () => void = () => {};
    const loop = createPollLoop({
      intervalMs: 60_000,
      step: async () => {
        passes.push(performance.now());
        if (passes.length === 1) await new Promise<void>((r) => (release = r));
        return false;
      },
    });
    loop.start();
    await Bun.sleep(5);
    loop.wake(); // while the first pass is still running
    release();
    await Bun.sleep(50);
    await loop.stop();
    expect(passes.length).toBe(2);
  });

  /** A started loop with a one-minute interval whose passes leave no work, and its pass count. */
  const countingLoop = () => {
    const counted = { passes: 0 };
    const loop = createPollLoop({
      intervalMs: 60_000,
      step: async () => {
        counted.passes++;
        return false;
      },
    });
    loop.start();
    return { loop, counted };
  };

  test("without a wake it sleeps the interval after a pass that left no work", async () => {
    const { loop, counted } = countingLoop();
    await Bun.sleep(50);
    await loop.stop();
    expect(counted.passes).toBe(1);
  });

  test("wake() ends the sleep at once", async () => {
    const { loop, counted } = countingLoop();
    await Bun.sleep(20);
    loop.wake();
    await Bun.sleep(20);
    await loop.stop();
    expect(counted.passes).toBe(2);
  });
});
