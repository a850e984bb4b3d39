/** A sleep that `wake()` cuts short: poll loops sleep on it so that stop and notifications take effect at once. */
export type Waker = { sleep: (ms: number) => Promise<void>; wake: () => void };

/** Creates a {@link Waker}; `wake()` ends every sleep in progress. */
export function createWaker(): Waker {
  const sleepers = new Set<() => void>();
  return {
    sleep: (ms) =>
      new Promise<void>((resolve) => {
        const done = () => {
          clearTimeout(timer);
          sleepers.delete(done);
          resolve();
        };
        const timer = setTimeout(done, ms);
        sleepers.add(done);
      }),
    wake: () => {
      for (const done of [...sleepers]) done();
    },
  };
}

/** Options of {@link createPollLoop}. */
export type PollLoopOptions = {
  /** Pause after a pass that left no work behind. */
  intervalMs: number;
  /** One pass; resolves true when work is left, so the next pass starts at once. */
  step: () => Promise<boolean>;
  /** Longest pause after failed passes (the pause doubles per consecutive failure from `intervalMs`). */
  maxBackoffMs?: number;
  /** Told of each failure with the pause before the next pass; return a number to override that pause. */
  onError?: (err: unknown, failures: number, delayMs: number) => number | void;
  /** Told of each pause as it begins (tests wait on this instead of sleeping). */
  onPause?: (delayMs: number) => void;
};

/** A running poll loop. */
export type PollLoop = {
  start: () => void;
  stop: () => Promise<void>;
  wake: () => void;
  running: () => boolean;
  /** Passes finished so far, failed ones included (tests wait for N more instead of sleeping). */
  passes: () => number;
};

/**
 * Runs `step` until stopped, backing off exponentially while it fails; `wake()` starts the next pass now, or right
 * after the pass in progress (whose reads may predate what the wake announces).
 */
export function createPollLoop(opts: PollLoopOptions): PollLoop {
  const waker = createWaker();
  const maxBackoff = opts.maxBackoffMs ?? 30_000;
  let running = false;
  let woken = false;
  let done: Promise<void> = Promise.resolve();
  let passes = 0;

  async function run() {
    let failures = 0;
    while (running) {
      let delay = opts.intervalMs;
      woken = false;
      try {
        const more = await opts.step();
        failures = 0;
        if (more || woken) continue;
      } catch (err) {
        if (!running) break;
        failures++;
        delay = Math.min(maxBackoff, Math.max(opts.intervalMs, 100) * 2 ** Math.min(failures - 1, 10));
        delay = opts.onError?.(err, failures, delay) ?? delay;
      } finally {
        passes++;
      }
      if (!running) break;
      opts.onPause?.(delay);
      await waker.sleep(delay);
    }
  }

  return {
    start() {
      if (running) return;
      running = true;
      done = run();
    },
    async stop() {
      running = false;
      waker.wake();
      await done;
    },
    wake() {
      woken = true;
      waker.wake();
    },
    running: () => running,
    passes: () => passes,
  };
}

/** Calls `fn` on every item with at most `limit` calls in flight; rejects with the first failure. */
export async function eachBounded<T>(
  items: readonly T[],
  limit: number,
  fn: (item: T) => Promise<void>,
): Promise<void> {
  let next = 0;
  const worker = async () => {
    while (next < items.length) await fn(items[next++]!);
  };
  await Promise.all(Array.from({ length: Math.max(1, Math.min(limit, items.length)) }, worker));
}

/** A bound shared by many callers: `run(fn)` starts `fn` once fewer than `limit` runs are in flight (first come). */
export function createLimiter(limit: number): <R>(fn: () => Promise<R>) => Promise<R> {
  let active = 0;
  const waiting: (() => void)[] = [];
  return async (fn) => {
    if (active >= Math.max(1, limit)) await new Promise<void>((resolve) => waiting.push(resolve));
    else active++;
    try {
      return await fn();
    } finally {
      const next = waiting.shift();
      if (next) next();
      else active--;
    }
  };
}
