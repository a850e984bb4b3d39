/**
 * Backfill progress as plain arithmetic: how much of [START_BLOCK, head − CONFIRMATIONS] is indexed, the rate over
 * the last interval and the time left at that rate. No clock, no I/O: the indexer, /readyz and `bun run status`
 * feed it what they know.
 */

/** One observation of a chain's index: wall time (ms), the last indexed block, events indexed so far. */
export type SyncSample = { at: number; block: bigint; events: number };

/** Indexing speed over an interval. */
export type SyncRate = { blocksPerSec: number; eventsPerSec: number };

/** Where a chain's index stands: blocks done of the total to the target, the fraction (0–1), and the ETA. */
export type SyncProgress = {
  done: bigint;
  total: bigint;
  /** done / total, 0 to 1 (1 when the index has reached the target). */
  fraction: number;
  /** Seconds to reach the target at `rate`; 0 when there; null when the rate is unknown or zero. */
  etaS: number | null;
};

/** A chain more than this many blocks behind its target counts as backfilling (not just following the head). */
export const SYNC_LAG_BLOCKS = 20n;

/** Blocks of [startBlock, target] that are indexed (`indexed` null: none yet). */
export function syncFraction(
  startBlock: bigint,
  indexed: bigint | null,
  target: bigint,
): Pick<SyncProgress, "done" | "total" | "fraction"> {
  const total = target >= startBlock ? target - startBlock + 1n : 0n;
  let done = indexed === null || indexed < startBlock ? 0n : indexed - startBlock + 1n;
  if (done > total) done = total;
  const fraction = total === 0n ? 1 : Number((done * 1_000_000n) / total) / 1_000_000;
  return { done, total, fraction };
}

/** The rate between two samples; null when no time passed between them or the index went back (a rollback). */
export function syncRate(from: SyncSample, to: SyncSample): SyncRate | null {
  const seconds = (to.at - from.at) / 1000;
  if (seconds <= 0 || to.block < from.block) return null;
  return { blocksPerSec: Number(to.block - from.block) / seconds, eventsPerSec: (to.events - from.events) / seconds };
}

/**
 * The rate over the last `windowMs`: from the newest sample at least `windowMs` old (or the oldest one) to the
 * newest. `samples` in time order.
 */
export function windowRate(samples: readonly SyncSample[], windowMs: number): SyncRate | null {
  const last = samples.at(-1);
  if (!last || samples.length < 2) return null;
  let base = samples[0]!;
  for (const s of samples) if (last.at - s.at >= windowMs) base = s;
  return syncRate(base, last);
}

/** Samples still needed by {@link windowRate}: the newest one at least `windowMs` old, and every later one. */
export function pruneSamples(samples: SyncSample[], windowMs: number): SyncSample[] {
  const last = samples.at(-1);
  if (!last) return samples;
  let keepFrom = 0;
  for (let i = 0; i < samples.length; i++) if (last.at - samples[i]!.at >= windowMs) keepFrom = i;
  return samples.slice(keepFrom);
}

/** Seconds to index `remaining` blocks at `blocksPerSec`: 0 when nothing remains, null when the rate is unknown. */
export function etaSeconds(remaining: bigint, blocksPerSec: number | null): number | null {
  if (remaining <= 0n) return 0;
  if (blocksPerSec === null || !(blocksPerSec > 0)) return null;
  return Number(remaining) / blocksPerSec;
}

/** The progress of an index at `indexed` toward `target`, with the ETA at `blocksPerSec`. */
export function syncProgress(
  startBlock: bigint,
  indexed: bigint | null,
  target: bigint,
  blocksPerSec: number | null,
): SyncProgress {
  const f = syncFraction(startBlock, indexed, target);
  return { ...f, etaS: etaSeconds(f.total - f.done, blocksPerSec) };
}

/** A duration for people: "45 s", "3 min", "2 h 5 min", "3 d 4 h". */
export function formatEta(seconds: number): string {
  const s = Math.max(0, Math.round(seconds));
  if (s < 60) return `${s} s`;
  const m = Math.round(s / 60);
  if (m < 60) return `${m} min`;
  const h = Math.floor(m / 60);
  if (h < 48) return m % 60 ? `${h} h ${m % 60} min` : `${h} h`;
  const d = Math.floor(h / 24);
  return h % 24 ? `${d} d ${h % 24} h` : `${d} d`;
}
