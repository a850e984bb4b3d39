/**
 * The backfill log of one chain: while the index is more than a few blocks behind its target, a progress line every
 * interval (and at each 10 %) — blocks done of total, percent, blocks and events per second over the last interval,
 * ETA — and one line when it catches up. The rate it measures is also stored with each batch for /readyz.
 */
import type { Logger } from "../common/log";
import {
  formatEta,
  pruneSamples,
  SYNC_LAG_BLOCKS,
  syncProgress,
  windowRate,
  type SyncRate,
  type SyncSample,
} from "../domain/progress";

/** Options of {@link createSyncLog}. */
export type SyncLogOptions = {
  chainId: number;
  startBlock: bigint;
  confirmations: bigint;
  log: Logger;
  /** Between progress lines, and the window the rate is measured over (default 10 s). */
  intervalMs?: number;
  /** Behind the target by more than this counts as a backfill (default {@link SYNC_LAG_BLOCKS}). */
  lagBlocks?: bigint;
  now?: () => number;
};

/** A backfill under way: where and when it began, events so far, the samples of the rate window, the last line. */
type Backfill = { from: SyncSample; events: number; samples: SyncSample[]; reportedAt: number; decile: number };

const round = (n: number, digits: number) => Math.round(n * 10 ** digits) / 10 ** digits;

/** Creates the backfill log of one chain. */
export function createSyncLog(opts: SyncLogOptions) {
  const { chainId, startBlock, confirmations, log } = opts;
  const intervalMs = opts.intervalMs ?? 10_000;
  const lagBlocks = opts.lagBlocks ?? SYNC_LAG_BLOCKS;
  const now = opts.now ?? Date.now;
  let run: Backfill | null = null;

  function line(msg: string, indexed: bigint, head: bigint, rate: SyncRate | null) {
    const p = syncProgress(startBlock, indexed, head - confirmations, rate?.blocksPerSec ?? null);
    const percent = round(p.fraction * 100, 1);
    const eta = p.etaS === null ? "unknown" : formatEta(p.etaS);
    log("info", `${msg}: ${percent} % (${p.done} of ${p.total} blocks), ETA ${eta}`, {
      chainId,
      indexedBlock: indexed,
      head,
      blocksDone: p.done,
      blocksTotal: p.total,
      percent,
      blocksPerSec: rate ? round(rate.blocksPerSec, 1) : null,
      eventsPerSec: rate ? round(rate.eventsPerSec, 1) : null,
      etaS: p.etaS === null ? null : round(p.etaS, 1),
    });
    return p;
  }

  return {
    /** A poll saw `head` with the index at `indexed`: a backfill starts when it is far enough behind. */
    observe(indexed: bigint | null, head: bigint): void {
      const at = indexed ?? startBlock - 1n;
      if (run || head - confirmations - at <= lagBlocks) return;
      const from = { at: now(), block: at, events: 0 };
      run = { from, events: 0, samples: [from], reportedAt: from.at, decile: 0 };
      run.decile = Math.floor(line("indexer backfill started", at, head, null).fraction * 10);
    },

    /** A batch up to `block` with `events` events committed while the head was `head`. */
    committed(block: bigint, events: number, head: bigint): void {
      if (!run) return;
      const t = now();
      if (block < run.samples.at(-1)!.block) run.samples = []; // a rollback: the window starts again
      run.events += events;
      run.samples = pruneSamples([...run.samples, { at: t, block, events: run.events }], intervalMs);
      const target = head - confirmations;
      if (target - block <= lagBlocks) {
        const tookS = round((t - run.from.at) / 1000, 1);
        const blocks = block - run.from.block;
        log("info", `indexer caught up: ${blocks} blocks, ${run.events} events in ${formatEta(tookS)}`, {
          chainId,
          indexedBlock: block,
          head,
          blocks,
          events: run.events,
          tookS,
        });
        run = null;
        return;
      }
      const fraction = syncProgress(startBlock, block, target, null).fraction;
      const decile = Math.floor(fraction * 10);
      if (t - run.reportedAt < intervalMs && decile <= run.decile) return;
      line("indexer backfill", block, head, windowRate(run.samples, intervalMs));
      run.reportedAt = t;
      run.decile = Math.max(run.decile, decile);
    },

    /** Blocks per second over the last interval while a backfill runs; null otherwise (stored for /readyz). */
    blocksPerSec(): number | null {
      return run ? (windowRate(run.samples, intervalMs)?.blocksPerSec ?? null) : null;
    },

    /** Forgets a backfill in progress (leadership lost: another process carries on). */
    reset(): void {
      run = null;
    },
  };
}

/** The backfill log of one chain. */
export type SyncLog = ReturnType<typeof createSyncLog>;
