import { describe, expect, test } from "bun:test";
import { createLimiter, createPollLoop } from "../../src/common/async";

/**
 * A loop with a one-minute interval whose passes leave no work, recording what it does in order: "pass" when a pass
 * starts, "pause" when a pause begins. Tests wait for the Nth record instead of sleeping.
 */
function recordedLoop(firstPass: () => Promise<void> = async () => {}) {
  const log: string[] = [];
  const waiters: { n: number; resolve: () => void }[] = [];
  const record = (what: string) => {
    log.push(what);
    for (const w of waiters.filter((w) => log.length >= w.n)) w.resolve();
  };
  const loop = createPollLoop({
    intervalMs: 60_000,
    step: async () => {
      record("pass");
      if (log.filter((l) => l === "pass").length === 1) await firstPass();
      return false;
    },
    onPause: (ms) => record(`pause ${ms}`),
  });
  /** Resolves once `n` things have been recorded. */
  const recorded = (n: number) =>
    log.length >= n ? Promise.resolve() : new Promise<void>((resolve) => waiters.push({ n, resolve }));
  loop.start();
  return { loop, log, recorded };
}

describe("createPollLoop", () => {
  test("a wake during a pass starts the next pass right after it, not an interval later", async () => {
    let inPass: () => void = () => {};
    let release: () => void = () => {};
    const passStarted = new Promise<void>((r) => (inPass = r));
    const { loop, log, recorded } = recordedLoop(async () => {
      inPass();
      await new Promise<void>((r) => (release = r));
    });
    await passStarted;
    loop.wake(); // while the first pass is still running
    release();
    await recorded(2);
    expect(log[1]).toBe("pass"); // not "pause 60000"
    await recorded(3);
    await loop.stop();
    expect(log.slice(0, 3)).toEqual(["pass", "pass", "pause 60000"]);
    expect(loop.passes()).toBe(2);
  });

  test("without a wake it sleeps the interval after a pass that left no work", async () => {
    const { loop, log, recorded } = recordedLoop();
    await recorded(2);
    expect(log).toEqual(["pass", "pause 60000"]);
    expect(loop.passes()).toBe(1);
    await loop.stop();
    expect(log).toEqual(["pass", "pause 60000"]);
  });

  test("wake() ends the sleep at once", async () => {
    const { loop, log, recorded } = recordedLoop();
    await recorded(2);
    loop.wake();
    await recorded(4); // a wake that did not end the sleep fails here, by the test's timeout
    await loop.stop();
    expect(log).toEqual(["pass", "pause 60000", "pass", "pause 60000"]);
    expect(loop.passes()).toBe(2);
  }, 10_000);

  test("a failed pass counts as a pass and pauses with the back-off", async () => {
    const pauses: number[] = [];
    let paused: () => void = () => {};
    const firstPause = new Promise<void>((r) => (paused = r));
    const loop = createPollLoop({
      intervalMs: 1_000,
      step: async () => {
        throw new Error("node down");
      },
      onPause: (ms) => {
        pauses.push(ms);
        paused();
      },
    });
    loop.start();
    await firstPause;
    await loop.stop();
    expect(loop.passes()).toBe(1);
    expect(pauses).toEqual([1_000]);
  });
});

describe("createLimiter", () => {
  test("many callers at once: at most `limit` runs in flight, every result returned, a failure frees its slot", async () => {
    const limit = createLimiter(3);
    let now = 0;
    let most = 0;
    const gates: (() => void)[] = [];
    const runs = Array.from({ length: 10 }, (_, i) =>
      limit(async () => {
        most = Math.max(most, ++now);
        await new Promise<void>((resolve) => gates.push(resolve));
        now--;
        if (i === 4) throw new Error("run 4 failed");
        return i;
      }),
    );
    const settled = Promise.allSettled(runs);
    // Open the gates one by one as runs start (each opened gate lets a waiting run in).
    while (gates.length > 0 || now > 0) {
      await Bun.sleep(0);
      gates.shift()?.();
    }
    expect(most).toBe(3);
    expect((await settled).map((r) => (r.status === "fulfilled" ? r.value : "failed"))).toEqual([
      0,
      1,
      2,
      3,
      "failed",
      5,
      6,
      7,
      8,
      9,
    ]);
  });
});
