/**
 * The evaluation loop of one chain (renewals.md §3), run by the indexer's leader beside its poll loop (never inside
 * it: a slow or failing read never holds the index back). Each pass pins the indexed block, takes the wallets whose
 * outlooks are missing, stale (`RENEWAL_CHECK_INTERVAL_S`) or touched by a log the index has committed, reads their
 * funds and credits at that block, judges every chargeable charge of theirs due within the horizon, and stores the
 * outlooks. Each (wallet, token) group is judged on its own: one whose reads failed keeps its previous outlooks and
 * its wallet is tried again at the next pass, and a token failing pass after pass is quarantined (quarantine.ts). A
 * pass's wallets go in slices, two at a time: one slice's reads at the node while another's outlooks are written.
 */
import { createPollLoop, eachBounded, type PollLoop } from "../common/async";
import { describeError } from "../common/errors";
import type { Logger } from "../common/log";
import type { Sql } from "../db/client";
import type { Q } from "../db/query";
import { evaluateRenewals, type Outlook } from "./outlook";
import { createTokenQuarantine, type TokenQuarantine } from "./quarantine";
import {
  chargesToEvaluate,
  endedPermissionWallets,
  indexedBlock,
  saveOutlooks,
  type DueRow,
  type OutlookRow,
} from "./queries";
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
  /** Tokens left out of the reads (quarantined) after this pass, and those quarantined by it. */
  quarantined: number;
  newlyQuarantined: string[];
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
  /** Passes in a row a token's reads fail before it is quarantined (default 3), and for how long (default 3600 s). */
  quarantineAfterPasses?: number;
  quarantineS?: number;
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

type Checked = { block: bigint; time: number };
type Stage = (name: string, ms: number) => void;
/** What the slices of one pass gathered. */
type PassTotals = {
  rows: OutlookRow[];
  failed: Set<string>;
  failedCalls: number;
  read: Set<string>;
  rejected: Set<string>;
};

const pairOf = (c: { wallet: string; token: string }) => `${c.wallet}:${c.token}`;

/**
 * Reads, judges and stores one slice of a pass's wallets (with `others`, wallets without charges now, and `kept`,
 * (wallet, token) groups left out of the reads, whose outlooks stay). A group whose reads failed keeps its outlooks.
 */
async function evaluateSlice(
  o: RenewalLoopOptions,
  checked: Checked,
  slice: { charges: DueRow[]; others: string[]; kept: string[] },
  stage: Stage,
  totals: PassTotals,
) {
  let mark = performance.now();
  const lap = (name: string) => {
    const now = performance.now();
    stage(name, now - mark);
    mark = now;
  };
  const { charges } = slice;
  // A pair only spend permissions charge needs no allowance to the processor.
  const pairs = new Map<string, { wallet: string; token: string; allowance: boolean }>();
  for (const c of charges) {
    const p = pairs.get(pairOf(c)) ?? { wallet: c.wallet, token: c.token, allowance: false };
    p.allowance ||= c.manager === undefined;
    pairs.set(pairOf(c), p);
  }
  const credits = charges
    .filter((c) => c.refilled)
    .map((c) => ({ key: c.key, module: c.module, subscriptionId: c.onChainId }));
  const refilled = new Set(credits.map((c) => c.key));
  const owners = new Map<string, { wallet: string; manager: string }>();
  for (const c of charges)
    if (c.manager) owners.set(`${c.wallet}:${c.manager}`, { wallet: c.wallet, manager: c.manager });
  const read = await o.reader.read(checked.block, {
    pairs: [...pairs.values()],
    credits,
    owners: [...owners.values()],
  });
  lap("read");
  const outlooks = evaluateRenewals(charges, {
    blockTime: checked.time,
    funds: (w, t) => read.funds.get(`${w}:${t}`),
    credit: (k) => (refilled.has(k) ? read.credits.get(k) : 0n),
    isOwner: (w, m) => read.owners.get(`${w}:${m}`),
  });
  const failedPairs = new Set(charges.filter((c) => !outlooks.has(c.key)).map(pairOf));
  const rows: OutlookRow[] = charges
    .filter((c) => !failedPairs.has(pairOf(c)))
    .map((c) => ({ charge: c, outlook: outlooks.get(c.key)!, checkedBlock: checked.block, checkedAt: checked.time }));
  lap("judge");
  await o.sql.begin(async (tx) => {
    await saveOutlooks(tx, o.chainId, rows, slice.others, [...slice.kept, ...failedPairs]);
    await o.onSaved?.(tx, rows, checked);
  });
  lap("save");
  totals.rows.push(...rows);
  for (const c of charges) if (failedPairs.has(pairOf(c))) totals.failed.add(c.wallet);
  totals.failedCalls += read.failed;
  for (const { token } of pairs.values()) totals.read.add(token);
  for (const t of read.rejected) totals.rejected.add(t);
}

/** A pass's charges in slices of whole wallets (a wallet's charges in every token are judged together). */
function slicesOf(charges: DueRow[], sliceSize: number): DueRow[][] {
  const byWallet = new Map<string, DueRow[]>();
  for (const c of charges) (byWallet.get(c.wallet) ?? byWallet.set(c.wallet, []).get(c.wallet)!).push(c);
  const slices: DueRow[][] = [[]];
  for (const list of byWallet.values()) {
    if (slices.at(-1)!.length >= sliceSize) slices.push([]);
    slices.at(-1)!.push(...list);
  }
  return slices;
}

/** Which wallets a pass takes: the touched ones (committed by `checked`), and whether it scans for stale outlooks. */
function createSchedule(opts: RenewalLoopOptions) {
  const dirty = new Map<string, bigint>(); // wallet → newest block that touched it
  const scanMs = Math.max(opts.pollMs, Math.min((opts.intervalS * 1000) / 4, 30_000));
  let lastScan = -Infinity;
  let more = false;
  return {
    markDirty(wallets: Iterable<string>, block: bigint) {
      for (const w of wallets) if ((dirty.get(w) ?? -1n) < block) dirty.set(w, block);
    },
    /**
     * The touched wallets, and whether to scan: at most every `scanMs` (a quarter of the check interval, 30 s at
     * most), unless the last scan left wallets behind; touched wallets go at every pass.
     */
    take(checked: Checked) {
      const touched = [...dirty].filter(([, b]) => b <= checked.block).map(([w]) => w);
      for (const w of touched) dirty.delete(w);
      const scan = Date.now() - lastScan >= scanMs || more;
      if (scan) lastScan = Date.now();
      return { touched, scan };
    },
    /** Records whether the scan found as many wallets as it could take (more are waiting). */
    full(v: boolean) {
      more = v;
      return v;
    },
  };
}

/** Runs `slices` two at a time; a slice that fails marks its wallets for the next pass, the others stand. */
async function evaluateSlices(
  o: RenewalLoopOptions & { markDirty: (w: Iterable<string>, b: bigint) => void },
  checked: Checked,
  slices: { charges: DueRow[]; others: string[]; kept: string[] }[],
  stage: Stage,
): Promise<PassTotals & { error?: unknown }> {
  const totals: PassTotals & { error?: unknown } = {
    rows: [],
    failed: new Set(),
    failedCalls: 0,
    read: new Set(),
    rejected: new Set(),
  };
  await eachBounded(slices, 2, async (slice) => {
    try {
      await evaluateSlice(o, checked, slice, stage, totals);
    } catch (err) {
      o.markDirty(new Set([...slice.charges.map((c) => c.wallet), ...slice.others]), checked.block);
      totals.error ??= err;
    }
  });
  return totals;
}

/** Logs and reports a pass: failed groups (their wallets marked for the next pass), quarantined tokens. */
function reportPass(
  o: RenewalLoopOptions & { markDirty: (w: Iterable<string>, b: bigint) => void },
  checked: Checked,
  t: PassTotals,
  quarantine: TokenQuarantine,
  started: number,
  stages: Record<string, number>,
) {
  const log = o.log ?? (() => {});
  if (t.failed.size > 0) {
    o.markDirty(t.failed, checked.block);
    log("warn", "renewal reads failed; previous outlooks kept", {
      chainId: o.chainId,
      wallets: t.failed.size,
      calls: t.failedCalls,
    });
  }
  const newly = quarantine.record(t.read, t.rejected);
  if (newly.length > 0) {
    log("warn", "renewal reads of a token failed pass after pass: token quarantined, its outlooks kept", {
      chainId: o.chainId,
      tokens: newly,
      passes: o.quarantineAfterPasses ?? 3,
      forS: o.quarantineS ?? 3600,
    });
  }
  o.onPass?.({
    chainId: o.chainId,
    evaluated: t.rows.length,
    failedWallets: t.failed.size,
    quarantined: quarantine.size(),
    newlyQuarantined: newly,
    seconds: (performance.now() - started) / 1000,
    stages,
    outlooks: t.rows.map((r) => r.outlook),
  });
}

/**
 * The indexed block B and the charges of the pass's wallets as the index stood at B, in one snapshot (the indexer may
 * commit newer blocks meanwhile: the outlook is judged from index rows and chain reads of the same block). Null when
 * there is nothing to do (no index yet, backfilling, no wallet due for a pass).
 */
async function loadPinned(
  sql: Sql,
  chainId: number,
  schedule: ReturnType<typeof createSchedule>,
  o: { perPass: number; until: (blockTime: number) => number; staleBefore: number },
) {
  let touched: string[] = [];
  let checked: Checked | null = null;
  try {
    return await sql.begin("isolation level repeatable read read only", async (tx) => {
      const snap = tx as unknown as Sql; // the helpers are typed for the pool; a transaction runs them alike
      const indexed = await indexedBlock(snap, chainId);
      if (!indexed || backfilling(indexed)) return null;
      checked = indexed;
      const take = schedule.take(indexed);
      touched = take.touched;
      // A scan also takes the wallets whose permission outlooks time alone ended (no log marks them).
      if (take.scan)
        touched = [...new Set([...touched, ...(await endedPermissionWallets(snap, chainId, indexed.time))])];
      if (!take.scan && touched.length === 0) return null;
      const limit = take.scan ? Math.max(1, o.perPass - touched.length) : 0;
      const q = {
        touched,
        until: o.until(indexed.time),
        staleBefore: o.staleBefore,
        limit,
        atBlock: indexed.block,
        atTime: indexed.time,
      };
      const loaded = await chargesToEvaluate(snap, chainId, q);
      return { checked: indexed, loaded, touched, more: schedule.full(take.scan && loaded.scanned >= limit) };
    });
  } catch (err) {
    if (checked) schedule.markDirty(touched, (checked as Checked).block);
    throw err;
  }
}

/** Creates the evaluation loop of one chain. */
export function createRenewalLoop(opts: RenewalLoopOptions): RenewalLoop {
  const { sql, chainId } = opts;
  const clock = opts.now ?? (() => Math.floor(Date.now() / 1000));
  const perPass = opts.walletsPerPass ?? 50_000;
  const schedule = createSchedule(opts);
  const quarantine = createTokenQuarantine({
    afterPasses: opts.quarantineAfterPasses ?? 3,
    forS: opts.quarantineS ?? 3600,
    now: clock,
  });
  const o = { ...opts, markDirty: schedule.markDirty };
  let loop: PollLoop | null = null;

  async function runOnce(): Promise<boolean> {
    if (!opts.isLeader()) return false;
    const started = performance.now();
    const stages: Record<string, number> = {};
    const stage: Stage = (name, ms) => (stages[name] = Math.round((stages[name] ?? 0) + ms));
    const pinned = await loadPinned(sql, chainId, schedule, {
      perPass,
      until: (time) => Math.max(clock(), time) + opts.horizonS,
      staleBefore: clock() - opts.intervalS,
    });
    if (!pinned) return false;
    const { checked, loaded, touched, more } = pinned;
    stage("charges", performance.now() - started);
    // A quarantined token's groups are not read: their outlooks stay as they were.
    const charges = loaded.charges.filter((c) => !quarantine.has(c.token));
    const kept = [...new Set(loaded.charges.filter((c) => quarantine.has(c.token)).map(pairOf))];
    const withCharges = new Set(loaded.charges.map((c) => c.wallet));
    const others = touched.filter((w) => !withCharges.has(w));
    if (charges.length === 0 && others.length === 0) return false;
    const slices = slicesOf(charges, opts.sliceSize ?? 10_000).map((charges, i) => ({
      charges,
      others: i === 0 ? others : [],
      kept: i === 0 ? kept : [],
    }));
    const totals = await evaluateSlices(o, checked, slices, stage);
    reportPass(o, checked, totals, quarantine, started, stages);
    if (totals.error) throw totals.error;
    // Failed wallets wait for the next pass (no busy retry); a full pass means more are waiting.
    return more;
  }

  return {
    start() {
      loop ??= startLoop(opts, runOnce);
    },
    async stop() {
      await loop?.stop();
      loop = null;
    },
    markDirty: schedule.markDirty,
    runOnce,
  };
}

/** The poll loop running `step`, with a backoff up to the check interval and a log line per failure. */
function startLoop(opts: RenewalLoopOptions, step: () => Promise<boolean>): PollLoop {
  const loop = createPollLoop({
    intervalMs: opts.pollMs,
    step,
    maxBackoffMs: Math.max(opts.pollMs, opts.intervalS * 1000),
    onError: (err, failures, delayMs) => {
      opts.log?.(failures > 3 ? "error" : "warn", "renewal evaluation failed", {
        chainId: opts.chainId,
        error: describeError(err),
        retryInMs: delayMs,
      });
    },
  });
  loop.start();
  return loop;
}
