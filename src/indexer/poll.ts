/**
 * One poll of the indexer: as a standby, follow the leader's progress; as the leader, look at the chain (lagging
 * node, reorg, deep reorg), index up to head − CONFIRMATIONS, and read again token metadata that did not answer.
 * With RPC_WS_URL the leader takes the heads the node pushes (`newHeads`) and reads the head over HTTP only while
 * the subscription is down or silent.
 */
import type { CuBudget } from "../chain/budget";
import { getHeader } from "../chain/rpc";
import { createHeadFeed, type HeadFeed } from "../chain/ws";
import { describeError } from "../common/errors";
import type { Waker } from "../common/async";
import { ChainBehindError, LeadershipLostError, LogsInDoubtError, ReorgDetectedError } from "./errors";
import type { LeaderLock } from "./lock";
import type { IndexerContext } from "./context";
import { catchUp } from "./pipeline";
import { beginDeferral, buildDeferral, takeStatistics } from "./deferral";
import { checkChain, createDeepReorgGuard, type ChainCheck, type DeepReorgGuard } from "./reorg";
import { applyReorg } from "./rollback";
import { loadProgress, markDeepReorg, touchHead } from "./store";
import { updateTokens } from "./token-book";

/** Failures that mean "the chain moved or lags under this poll": looked at again at once, a few times. */
const QUICK_RETRY = [ReorgDetectedError, ChainBehindError, LogsInDoubtError];

/**
 * With a live head subscription that pushed nothing for this long, the head is read over HTTP (a socket can go
 * silent without closing); status calls a head older than 30 s stalled.
 */
export const HEAD_SILENCE_MS = 15_000;

/** The leader's source of heads: the subscription, the pushes taken so far and when the head was last looked at. */
type HeadSource = { feed: HeadFeed | null; taken: number; lookedAt: number };

/**
 * Milliseconds until the leader, at the head, looks at the chain again (0: now): at once when a head was pushed since
 * it last looked; with a live subscription, when it has been silent for HEAD_SILENCE_MS; while it is down, a poll
 * after the last look (as without one, head pacer included).
 */
function nextLookIn(h: HeadSource, pollMs: number, pacer: HeadPacer, now: number): number {
  const feed = h.feed!;
  if (feed.pushes() !== h.taken) return 0;
  const since = now - h.lookedAt;
  if (feed.live()) return HEAD_SILENCE_MS - since;
  if (since < pollMs) return pollMs - since;
  return pacer.early(now) ? pollMs : 0;
}

/** What the poll needs besides the context. */
export type PollOptions = { lock: LeaderLock; deepReorgPolls: number; waker: Waker };

/**
 * Acts on a look at the chain that was not "ok": waits (lagging node, deep reorg not yet confirmed) or rolls back.
 * Returns true when it rolled back (more to index at once), false to wait for the next poll.
 */
async function actOn(ctx: IndexerContext, check: ChainCheck, guard: DeepReorgGuard, head: bigint, target: bigint) {
  const { chainId, state, log } = ctx;
  const indexed = state.cursor?.block;
  if (check.kind === "wait") {
    state.notice = `waiting: ${check.reason}`;
    log("debug", "indexer waits for the node", { chainId, head, reason: check.reason });
    await touchHead(ctx.sql, chainId, state.headBlock ?? head);
    return false;
  }
  if (check.kind === "reorg") {
    log("warn", "reorg detected", { chainId, indexed, ancestor: check.ancestor.block, head });
    await applyReorg(ctx, check.ancestor, head, target);
    return true;
  }
  if (check.kind !== "deep") return false;
  const seen = guard.observe(check.fingerprint);
  if (!state.deepReorgSuspected) await markDeepReorg(ctx.sql, chainId, true);
  state.deepReorgSuspected = true;
  if (!guard.confirmed()) {
    state.notice = `deep reorg suspected: no stored block matches the chain (poll ${seen} of ${guard.polls})`;
    log("warn", "deep reorg suspected", { chainId, indexed, head, polls: seen });
    return false;
  }
  log("error", "deep reorg confirmed: reindexing from START_BLOCK", { chainId, indexed, head, polls: seen });
  await applyReorg(ctx, null, head, target);
  guard.clear();
  state.deepReorgSuspected = false;
  await markDeepReorg(ctx.sql, chainId, false);
  return true;
}

/**
 * When the chain makes blocks on a clock slower than the poll, the polls between two blocks find nothing and
 * still cost a head read each: a poll is skipped while the next block cannot be there yet (until half a poll
 * before it is due). With regular blocks a block is still seen within a poll of it; the interval is measured from
 * the heads' timestamps (never assumed).
 */
export function createHeadPacer(pollMs: number) {
  const heads: { number: bigint; time: number; offset: number; seen: number }[] = [];
  let seenAt = 0;
  return {
    /** A head read at `now` (ms); a new one resets the wait. */
    observe(header: { number: bigint; timestamp: number }, now: number) {
      const last = heads.at(-1);
      if (last && header.number <= last.number) return;
      // Local clock minus the block's: the smallest over recent heads is the clock offset plus the least lag.
      heads.push({ number: header.number, time: header.timestamp, offset: now - header.timestamp * 1000, seen: now });
      if (heads.length > 16) heads.shift();
      seenAt = now;
    },
    /** Milliseconds between blocks over the last heads seen; null until 4 blocks are known. */
    intervalMs(): number | null {
      const first = heads[0];
      const last = heads.at(-1);
      if (!first || !last || heads.length < 4 || last.number <= first.number) return null;
      const blocks = Number(last.number - first.number);
      const interval = ((last.time - first.time) * 1000) / blocks;
      // A clock the heads also kept here (not a test moving the chain's time, nor a node catching up).
      const wall = (last.seen - first.seen) / blocks;
      return wall >= interval / 2 && wall <= interval * 2 ? interval : null;
    },
    /** Whether a poll at `now` would come before the next block can exist. */
    early(now: number): boolean {
      const interval = this.intervalMs();
      if (interval === null || interval < 1.5 * pollMs) return false;
      // The next block is due one interval after the last head's timestamp (in the local clock, anchored on the
      // heads seen soonest, so a late poll does not push the next one later); polls before half a poll ahead of
      // that are skipped. Capped: the head is read at least every 15 s (status calls a chain older than 30 s stalled).
      const last = heads.at(-1)!;
      const offset = Math.min(...heads.map((h) => h.offset));
      const due = last.time * 1000 + offset + interval;
      return now < Math.min(due - pollMs / 2, seenAt + 15_000);
    },
  };
}

/** A {@link createHeadPacer}. */
export type HeadPacer = ReturnType<typeof createHeadPacer>;

/** The leader's poll; true when blocks up to the target are left. */
async function lead(ctx: IndexerContext, guard: DeepReorgGuard, pacer: HeadPacer, heads: HeadSource): Promise<boolean> {
  const { sql, client, chainId, state, log, policy } = ctx;
  if (state.stale()) {
    await state.reload(sql);
    state.needReload = false;
  }
  // The head's header rather than its number: its hash and bloom spare a header and, most polls, `eth_getLogs`. A
  // head pushed since the last look is the node's newest; blocks between it and the cursor are fetched by range.
  ctx.polled.clear();
  const feed = heads.feed;
  const pushed = feed && feed.pushes() !== heads.taken ? feed.latest()!.header : null;
  if (feed) heads.taken = feed.pushes();
  heads.lookedAt = performance.now();
  const latest = pushed ?? (await getHeader(client, "latest", policy));
  if (!latest) throw new ChainBehindError("the node returned no latest block");
  ctx.polled.set(latest.number, latest);
  pacer.observe(latest, performance.now());
  const head = latest.number;
  state.observeHead(head);
  ctx.sync.observe(state.cursor?.block ?? null, head);
  const target = head - ctx.confirmations;
  const check = await checkChain({
    sql,
    client,
    chainId,
    cursor: state.cursor,
    head,
    latest,
    window: ctx.window,
    policy,
  });
  if (check.kind !== "deep") {
    if (state.deepReorgSuspected) {
      log("info", "deep reorg no longer seen", { chainId, head });
      await markDeepReorg(sql, chainId, false);
    }
    state.deepReorgSuspected = false;
    guard.clear();
  }
  if (check.kind !== "ok") return actOn(ctx, check, guard, head, target);
  await beginDeferral(ctx, target);
  const wrote = await catchUp(ctx, head, target);
  if (ctx.deferral.pending && state.cursor && state.cursor.block >= target) await buildDeferral(ctx);
  if (!wrote) {
    // At the head with nothing to write: the first idle poll after an initial backfill takes its statistics.
    if (ctx.deferral.statisticsDue) await takeStatistics(ctx);
    const budget = (ctx.client.transport as { budget?: CuBudget }).budget;
    await touchHead(sql, chainId, state.headBlock ?? head, budget?.perHour());
    const c = state.cursor;
    const idle = { chainId, indexedBlock: c?.block ?? null, indexedTime: c?.time ?? null, head };
    for (const h of ctx.hooks) await h.onIdle?.(sql, idle);
  }
  return (state.cursor ? state.cursor.block + 1n : ctx.startBlock) <= target;
}

/** Reads again tokens whose metadata did not answer; records and announces the answers. Never throws. */
async function refreshTokens(ctx: IndexerContext): Promise<void> {
  const { chainId, log, state } = ctx;
  try {
    const answered = (await state.tokens.due()).filter((m) => m.symbol !== null || m.decimals !== null);
    if (answered.length === 0 || (await updateTokens(ctx.sql, chainId, answered)) === 0) return;
    log("info", "token metadata recorded", { chainId, tokens: answered.map((m) => m.address) });
    const at = (state.cursor?.block ?? ctx.startBlock - 1n).toString();
    await ctx.notifier?.publish({ chainId, fromBlock: at, toBlock: at, reorg: false });
  } catch (err) {
    log("warn", "token metadata refresh failed", { chainId, error: describeError(err) });
  }
}

/** Creates the poll step and its error policy for `createPollLoop`. */
export function createPoll(ctx: IndexerContext, opts: PollOptions) {
  const { sql, chainId, state, log } = ctx;
  const guard = createDeepReorgGuard(opts.deepReorgPolls);
  const pacer = createHeadPacer(ctx.pollMs);
  const budget = (ctx.client.transport as { budget?: CuBudget }).budget;
  const feed = ctx.wsUrl ? createHeadFeed(ctx.wsUrl, { budget, log: (l, m, f) => log(l, m, { chainId, ...f }) }) : null;
  const heads: HeadSource = { feed, taken: 0, lookedAt: 0 };
  let tokenRefresh: Promise<void> | null = null;
  return {
    /** One pass of the loop: standby or leader. */
    async step(): Promise<boolean> {
      if (!state.leader) {
        state.leader = await opts.lock.acquire();
        if (!state.leader) {
          feed?.stop(); // a standby pays for no heads
          // Standby: follow the leader's progress from the database.
          const progress = await loadProgress(sql, chainId);
          state.setCursor(progress.cursor);
          state.headBlock = progress.head;
          await opts.waker.sleep(Math.min(Math.max(ctx.pollMs, 100), 1000));
          return true;
        }
        log("info", "indexer is the leader", { chainId });
        state.needReload = true;
        ctx.deferral.pending = null;
      } else if (!(await opts.lock.check())) {
        state.leader = false;
        ctx.sync.reset();
        throw new LeadershipLostError("the session holding the indexer lock was lost");
      }
      // At the head, between two blocks of a slow clock: nothing to read yet.
      const atHead = () =>
        state.cursor !== null && state.headBlock !== null && state.cursor.block >= state.headBlock - ctx.confirmations;
      feed?.start();
      if (atHead() && !state.needReload) {
        if (feed) {
          // The step waits itself, so that a pushed head ends the wait (the loop's sleep would not wake for it).
          const wait = nextLookIn(heads, ctx.pollMs, pacer, performance.now());
          if (wait > 0) {
            await Promise.race([feed.wait(wait), opts.waker.sleep(wait)]);
            return !ctx.stopping();
          }
        } else if (pacer.early(performance.now())) return false;
      }
      state.notice = null;
      const behind = await lead(ctx, guard, pacer, heads);
      // In the background: a token that hangs never holds the chain back.
      tokenRefresh ??= refreshTokens(ctx).finally(() => (tokenRefresh = null));
      state.lastError = state.notice ?? state.stallMessage();
      state.lastSuccessAt = new Date().toISOString();
      // With a subscription, the next step at the head waits for a head itself; elsewhere (a node behind the index, no
      // block indexed yet) the loop sleeps a poll.
      return behind || (feed !== null && atHead());
    },

    /** A failed poll: caches reload; a chain moving under the poll is looked at again at once, else back off. */
    onError(err: unknown, failures: number, delayMs: number): number {
      state.needReload = true;
      if (QUICK_RETRY.some((E) => err instanceof E) && failures < 5) {
        log("info", "chain changed during a poll, retrying", { chainId, reason: (err as Error).message });
        return Math.min(ctx.pollMs, 50);
      }
      state.lastError = describeError(err);
      const level = failures > 3 ? "error" : "warn";
      log(level, "indexer poll failed", { chainId, error: state.lastError, retryInMs: delayMs });
      return delayMs;
    },

    /** Closes the head subscription and waits for a token refresh in flight. */
    settle: () => {
      feed?.stop();
      return tokenRefresh ?? Promise.resolve();
    },
  };
}
