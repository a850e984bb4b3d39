/**
 * The evaluation loop of one chain (renewals.md §3), run by the indexer's leader beside its poll loop (never inside
 * it: a slow or failing read never holds the index back). Each pass pins the indexed block, takes the wallets whose
 * outlooks are missing, stale (`RENEWAL_CHECK_INTERVAL_S`) or touched by a log the index has committed, reads their
 * funds and credits at that block, judges every chargeable charge of theirs due within the horizon, and stores the
 * outlooks. A wallet whose reads failed keeps its previous outlooks and is tried again at the next pass. A pass's
 * wallets go in slices, two at a time: one slice's reads at the node while another's outlooks are written.
 */
import { createPollLoop, eachBounded, type PollLoop } from "../common/async";
import { describeError } from "../common/errors";
import type { Logger } from "../common/log";
import type { Sql } from "../db/client";
import type { Q } from "../db/query";
import { evaluateRenewals, type Outlook } from "./outlook";
import { chargesToEvaluate, indexedBlock, saveOutlooks, type DueRow, type OutlookRow } from "./queries";
import type { RenewalReader } from "./reader";

/**
 * Blocks behind the head past which the index counts as backfilling: no pass runs then. Outlooks judged on a block
 * that old would be stale at once, and a node that keeps recent state only (128 blocks on geth) refuses the reads.
 */
export const BACKFILL_LAG_BLOCKS = 64n;

/**
 * Whether the index is still backfilling: far behind the head the indexer last saw, amid a catch-up of several batches
 * (outlooks judged at its next-to-last batch would be stale a moment later, and its wallets are judged again after
 * the last), or an initial backfill whose secondary indexes are not built yet (a pass would scan `activity` for each
 * wallet's refills, beside the last batches).
 */
export const backfilling = (c: { block: bigint; head: bigint | null; indexesDeferred: boolean; catchingUp: boolean }) =>
  c.indexesDeferred || c.catchingUp || (c.head !== null && c.head - c.block > BACKFILL_LAG_BLOCKS);

/** What one pass did, for metrics. */
export type PassReport = {
  chainId: number;
  evaluated: number;
  failedWallets: number;
  seconds: number;
  /**
   * Milliseconds per stage: charges (the query that picks the wallets and loads their charges), then read, judge and
   * save (outlooks and events) summed over the pass's slices, which overlap.
   */
  stages: Record<string, number>;
  outlooks: Outlook[];
};

/** Options of `createRenewalLoop`. */
export type RenewalLoopOptions = {
  sql: Sql;
  chainId: number;
  reader: RenewalReader;
  /** Whether this process leads the chain's indexer (only the leader evaluates). */
  isLeader: () => boolean;
  horizonS: number;
  intervalS: number;
  /** Pause between passes that found nothing to do. */
  pollMs: number;
  /** Wallets per pass. */
  walletsPerPass?: number;
  /** Charges per slice of a pass (whole wallets; default 10,000). */
  sliceSize?: number;
  log?: Logger;
  /** Wall clock, unix seconds. */
  now?: () => number;
  /** Inside the transaction that stored a pass's outlooks, with the rows stored (the renewal events). */
  onSaved?: (tx: Q, rows: OutlookRow[], checked: { block: bigint; time: number }) => Promise<void>;
  onPass?: (report: PassReport) => void;
};

/** The loop of one chain. */
export type RenewalLoop = {
  start(): void;
  stop(): Promise<void>;
  /** Wallets a log touched at `block`: evaluated at the first pass once the index has committed that block. */
  markDirty(wallets: Iterable<string>, block: bigint): void;
  /** One pass now; resolves true when wallets were left for the next one. */
  runOnce(): Promise<boolean>;
};

/** Creates the evaluation loop of one chain. */
export function createRenewalLoop(opts: RenewalLoopOptions): RenewalLoop {
  const { sql, chainId, reader } = opts;
  const log = opts.log ?? (() => {});
  const clock = opts.now ?? (() => Math.floor(Date.now() / 1000));
  const perPass = opts.walletsPerPass ?? 50_000;
  const sliceSize = opts.sliceSize ?? 10_000;
  // wallet → newest block that touched it (evaluated once the index has committed it).
  const dirty = new Map<string, bigint>();
  const scanMs = Math.max(opts.pollMs, Math.min((opts.intervalS * 1000) / 4, 30_000));
  let lastScan = -Infinity;
  let more = false;
  let loop: PollLoop | null = null;

  const markDirty = (wallets: Iterable<string>, block: bigint) => {
    for (const w of wallets) if ((dirty.get(w) ?? -1n) < block) dirty.set(w, block);
  };

  /** Reads, judges and stores one slice of a pass's wallets (with `others`, wallets without charges now). */
  async function evaluateSlice(
    checked: { block: bigint; time: number },
    charges: DueRow[],
    others: string[],
    stage: (name: string, ms: number) => void,
  ) {
    let mark = performance.now();
    const lap = (name: string) => {
      const now = performance.now();
      stage(name, now - mark);
      mark = now;
    };
    const pairs = new Map(charges.map((c) => [`${c.wallet}:${c.token}`, { wallet: c.wallet, token: c.token }]));
    const credits = charges
      .filter((c) => c.refilled)
      .map((c) => ({ key: c.key, module: c.module, subscriptionId: c.onChainId }));
    const refilled = new Set(credits.map((c) => c.key));
    const read = await reader.read(checked.block, { pairs: [...pairs.values()], credits });
    lap("read");
    const outlooks = evaluateRenewals(charges, {
      blockTime: checked.time,
      funds: (w, t) => read.funds.get(`${w}:${t}`),
      credit: (k) => (refilled.has(k) ? read.credits.get(k) : 0n),
    });
    const failed = new Set<string>();
    for (const c of charges) if (!outlooks.has(c.key)) failed.add(c.wallet);
    const rows: OutlookRow[] = [];
    for (const c of charges) {
      if (!failed.has(c.wallet))
        rows.push({ charge: c, outlook: outlooks.get(c.key)!, checkedBlock: checked.block, checkedAt: checked.time });
    }
    lap("judge");
    await sql.begin(async (tx) => {
      await saveOutlooks(tx, chainId, rows, others);
      await opts.onSaved?.(tx, rows, checked);
    });
    lap("save");
    return { rows, failed, failedCalls: read.failed };
  }

  async function runOnce(): Promise<boolean> {
    if (!opts.isLeader()) return false;
    const checked = await indexedBlock(sql, chainId);
    if (!checked || backfilling(checked)) return false;
    const started = performance.now();
    const stages: Record<string, number> = {};
    const stage = (name: string, ms: number) => (stages[name] = Math.round((stages[name] ?? 0) + ms));
    const now = Math.max(clock(), checked.time);
    const until = now + opts.horizonS;
    const touched = [...dirty].filter(([, b]) => b <= checked.block).map(([w]) => w);
    for (const w of touched) dirty.delete(w);
    // The scan for missing or stale outlooks reads every due allocation: at most every `scanMs` (a quarter of the
    // check interval, 30 s at most), unless the last one left wallets behind; touched wallets go at every pass.
    const scan = Date.now() - lastScan >= scanMs || more;
    if (!scan && touched.length === 0) return false;
    if (scan) lastScan = Date.now();
    const limit = scan ? Math.max(1, perPass - touched.length) : 0;
    let loaded;
    try {
      loaded = await chargesToEvaluate(sql, chainId, { touched, until, staleBefore: clock() - opts.intervalS, limit });
    } catch (err) {
      markDirty(touched, checked.block);
      throw err;
    }
    more = scan && loaded.scanned >= limit;
    stage("charges", performance.now() - started);
    // Slices of whole wallets (a wallet's charges in every token are judged together).
    const byWallet = new Map<string, DueRow[]>();
    for (const c of loaded.charges) (byWallet.get(c.wallet) ?? byWallet.set(c.wallet, []).get(c.wallet)!).push(c);
    const others = touched.filter((w) => !byWallet.has(w));
    if (byWallet.size === 0 && others.length === 0) return false;
    const slices: DueRow[][] = [[]];
    for (const list of byWallet.values()) {
      if (slices.at(-1)!.length >= sliceSize) slices.push([]);
      slices.at(-1)!.push(...list);
    }
    const rows: OutlookRow[] = [];
    const failed = new Set<string>();
    let failedCalls = 0;
    let error: unknown;
    await eachBounded(slices, 2, async (slice) => {
      try {
        const r = await evaluateSlice(checked, slice, slice === slices[0] ? others : [], stage);
        rows.push(...r.rows);
        for (const w of r.failed) failed.add(w);
        failedCalls += r.failedCalls;
      } catch (err) {
        // Its wallets keep their outlooks and go again at the next pass; the other slices stand.
        markDirty(new Set(slice.map((c) => c.wallet)), checked.block);
        if (slice === slices[0]) markDirty(others, checked.block);
        error ??= err;
      }
    });
    if (failed.size > 0) {
      markDirty(failed, checked.block);
      log("warn", "renewal reads failed; previous outlooks kept", {
        chainId,
        wallets: failed.size,
        calls: failedCalls,
      });
    }
    const seconds = (performance.now() - started) / 1000;
    opts.onPass?.({
      chainId,
      evaluated: rows.length,
      failedWallets: failed.size,
      seconds,
      stages,
      outlooks: rows.map((r) => r.outlook),
    });
    if (error) throw error;
    // Failed wallets wait for the next pass (no busy retry); a full pass means more are waiting.
    return more;
  }

  return {
    start() {
      if (loop) return;
      loop = createPollLoop({
        intervalMs: opts.pollMs,
        step: runOnce,
        maxBackoffMs: Math.max(opts.pollMs, opts.intervalS * 1000),
        onError: (err, failures, delayMs) => {
          log(failures > 3 ? "error" : "warn", "renewal evaluation failed", {
            chainId,
            error: describeError(err),
            retryInMs: delayMs,
          });
        },
      });
      loop.start();
    },
    async stop() {
      await loop?.stop();
      loop = null;
    },
    markDirty,
    runOnce,
  };
}
