/**
 * `subscription.renewal_upcoming` (renewals.md §4): derived from the chain like an expiry. For a chargeable
 * allocation, the notice instant is `next_charge_at − RENEWAL_NOTICE_S`; the event lies in the first block at or after
 * it, comes before the logs of that block, and is created by the batch whose time range holds it, folding the batch's
 * logs (a charge, pause, cancel or block before the instant prevents it). None when the instant is at or before the
 * block that set the schedule, nor twice for one due instant (`renewal_notices`). Its id names the block's hash, the
 * allocation and the due instant: a re-index gives the same id, a reorg that removes the block withdraws it.
 */
import { moduleOfEvent } from "../domain/attribution";
import { isoFromUnix } from "../domain/records";
import { eventIdOf } from "../events/ids";
import { recordOf, statusAt, type NewEvent } from "../events/timeline";
import type { BatchContext } from "../indexer/hooks";
import { applyToSubscription, planKey, subscriptionFromCreated, type SubState } from "../domain/subscription";
import type { Q } from "../db/query";
import { fromRow, type SubRow } from "../db/rows";
import type { BatchEvent } from "../indexer/fetch";
import { leftInFlight, type BatchRows } from "../indexer/write";

/** Whether an allocation is chargeable (renewals.md §1). */
export function chargeable(s: SubState, blocked: boolean): boolean {
  const max = Number(s.maxExecutions);
  return !s.cancelled && !s.paused && !blocked && (max === 0 || s.timesExecuted < max);
}

/**
 * The notice instant of an allocation's schedule (`next_charge_at − notice`), or undefined when it is at or before
 * the instant that set the schedule (a plan shorter than the notice).
 */
function noticeInstant(s: SubState, noticeS: number): number | undefined {
  const instant = s.nextChargeAt - noticeS;
  return instant > Math.max(s.createdAt, s.lastPaidAt) ? instant : undefined;
}

/** A notice found by the fold: the allocation's state and block flag at the instant. */
type Notice = { s: SubState; blocked: boolean; instant: number };

/**
 * Folds one allocation's logs of the batch (its own and its pair's block changes, in chain order) from its state
 * before the batch, and returns the notice whose instant falls in the window of a state that is chargeable.
 */
export function noticesOf(
  start: SubState | null,
  blockedBefore: boolean,
  logs: readonly BatchEvent[],
  window: { fromTime: number; toTime: number; noticeS: number; merchant?: string; plans: BatchContext["plans"] },
): Notice[] {
  const out: Notice[] = [];
  let s = start ? { ...start } : null;
  let blocked = blockedBefore;
  let prev = window.fromTime;
  const check = (until: number) => {
    if (!s || !chargeable(s, blocked)) return;
    const instant = noticeInstant(s, window.noticeS);
    if (instant !== undefined && instant > prev && instant <= until) out.push({ s: { ...s }, blocked, instant });
  };
  for (const ev of logs) {
    check(ev.blockTime);
    if (ev.name === "SubscriptionCreated") {
      if (!window.merchant) return out;
      s = subscriptionFromCreated(ev, window.merchant);
    } else if (ev.name === "SubscriberBlocked" || ev.name === "SubscriberUnblocked") {
      blocked = ev.name === "SubscriberBlocked";
    } else if (s) {
      applyToSubscription(s, ev, window.plans.get(planKey(s.module, s.planId)));
    }
    prev = Math.max(prev, ev.blockTime);
  }
  check(window.toTime);
  return out;
}

/** Chargeable allocations (committed state) whose notice instant lies in `(after, until]`, `skip` left out. */
async function dueForNotice(q: Q, chainId: number, noticeS: number, after: number, until: number) {
  return q<(SubRow & { blocked: boolean })[]>`
    select s.subscription_id, s.module, s.merchant, s.subscriber, s.plan_id, s.max_executions, s.times_executed,
      s.total_spent, s.created_at, s.last_paid_at, s.next_charge_at, s.allowance_expiry, s.paused, s.cancelled,
      s.block_number, s.log_index, s.tx_hash, coalesce(b.blocked, false) as blocked
    from subscriptions s
    left join blocked_subscribers b on b.chain_id = s.chain_id and b.module = s.module and b.subscriber = s.subscriber
    where s.chain_id = ${chainId} and not s.cancelled and not s.paused
      and s.next_charge_at > ${after + noticeS} and s.next_charge_at <= ${until + noticeS}`;
}

/** What a batch's notice window is: its time range `(fromTime, toTime]` and the notice period. */
export type NoticeWindow = { fromTime: number; toTime: number; noticeS: number };

/**
 * Whether the fold of one allocation over a batch may find a notice (a necessary condition, never a sufficient one):
 * `next_charge_at` and the instant that set it change only with a charge, so the only instants the fold can test are
 * the state's before the batch (above the instant that set it) and, after each charge at `t`, `t + interval − notice`;
 * one of them must lie in the batch's range. Lets a batch skip the fold of every allocation whose schedule is far
 * from a notice (on a backfill, nearly all of them).
 */
export function mayNotice(
  start: SubState | null,
  chargeTimes: readonly number[],
  interval: number,
  w: NoticeWindow,
): boolean {
  const inRange = (instant: number) => instant > w.fromTime && instant <= w.toTime;
  const instant = start ? noticeInstant(start, w.noticeS) : undefined;
  if (instant !== undefined && inRange(instant)) return true;
  return chargeTimes.some((t) => inRange(t + interval - w.noticeS));
}

/**
 * The batch's allocations whose fold may find a notice ({@link mayNotice}): states before it (touched, in flight,
 * due; null when the batch creates it), each one's `<module>:<subscriber>` pair, the pairs' block flags, the
 * allocations' logs and the pairs' block changes.
 */
async function candidates(tx: Q, ctx: BatchContext, inFlight: readonly BatchRows[], noticeS: number) {
  const { chainId } = ctx;
  const states = new Map<string, SubState | null>(ctx.rows.before);
  const blocked = new Map<string, boolean>();
  // The newest state an uncommitted batch ahead of this one gives (the database may not show it yet).
  const left = leftInFlight(inFlight);
  for (const [id, s] of left.subs) if (!states.has(id)) states.set(id, s);
  for (const r of await dueForNotice(tx, chainId, noticeS, ctx.fromTime, ctx.toTime)) {
    if (!states.has(r.subscription_id)) states.set(r.subscription_id, fromRow(r));
    blocked.set(`${r.module}:${r.subscriber}`, r.blocked);
  }
  // The allocations the batch creates, and the times of each allocation's charges.
  const createdBy = new Map<string, BatchEvent>();
  const charges = new Map<string, number[]>();
  for (const ev of ctx.rows.batch.events) {
    const id = ev.subscriptionId;
    if (id === null) continue;
    if (ev.name === "SubscriptionCreated" && !states.has(id) && !createdBy.has(id)) createdBy.set(id, ev);
    else if (ev.name === "ChargeSucceeded") (charges.get(id) ?? charges.set(id, []).get(id)!).push(ev.blockTime);
  }
  const window = { fromTime: ctx.fromTime, toTime: ctx.toTime, noticeS };
  const folded = new Map<string, SubState | null>();
  const consider = (id: string, s: SubState | null, module: string, planId: string) => {
    const interval = ctx.plans.get(planKey(module, planId))?.interval ?? 0;
    if (mayNotice(s, charges.get(id) ?? [], interval, window)) folded.set(id, s);
  };
  for (const [id, s] of states) if (s) consider(id, s, s.module, s.planId);
  for (const [id, ev] of createdBy) consider(id, null, moduleOfEvent(ev)!, String(ev.args.planId));
  const logs = new Map<string, BatchEvent[]>();
  const pairLogs = new Map<string, BatchEvent[]>();
  const pairOf = new Map<string, [module: string, subscriber: string]>();
  if (folded.size === 0) return { states: folded, pairOf, blocked, logs, pairLogs };
  const push = (m: Map<string, BatchEvent[]>, k: string, ev: BatchEvent) => (m.get(k) ?? m.set(k, []).get(k)!).push(ev);
  for (const ev of ctx.rows.batch.events) {
    if (ev.name === "SubscriberBlocked" || ev.name === "SubscriberUnblocked") {
      push(pairLogs, `${moduleOfEvent(ev)}:${String(ev.args.subscriber)}`, ev);
    } else if (ev.subscriptionId !== null && folded.has(ev.subscriptionId)) {
      if (ev.name !== "KeeperSet" && ev.name !== "FeeSet") push(logs, ev.subscriptionId, ev);
    }
  }
  const pairs = new Map<string, [string, string]>();
  for (const [id, s] of folded) {
    // Every allocation without a state before the batch is one it creates.
    const created = createdBy.get(id);
    const module = s ? s.module : moduleOfEvent(created!)!;
    const subscriber = s ? s.subscriber : String(created!.args.subscriber);
    const pair = `${module}:${subscriber}`;
    pairOf.set(id, [module, subscriber]);
    if (!blocked.has(pair)) pairs.set(pair, [module, subscriber]);
  }
  if (pairs.size > 0) {
    const rows = await tx<{ module: string; subscriber: string; blocked: boolean }[]>`
      select module, subscriber, blocked from blocked_subscribers where chain_id = ${chainId}
        and (module, subscriber) in (select * from unnest(${[...pairs.values()].map((p) => p[0])}::text[],
          ${[...pairs.values()].map((p) => p[1])}::text[]))`;
    for (const r of rows) blocked.set(`${r.module}:${r.subscriber}`, r.blocked);
  }
  // The block flags the batches in flight leave (the database may still show the ones before them).
  for (const [pair, b] of left.flags) blocked.set(pair, b.blocked);
  return { states: folded, pairOf, blocked, logs, pairLogs };
}

/** The `renewal_upcoming` events of one batch, placed in their blocks; records them in `renewal_notices`. */
export async function upcomingEvents(
  tx: Q,
  ctx: BatchContext,
  inFlight: readonly BatchRows[],
  noticeS: number,
): Promise<NewEvent[]> {
  // A Spend Permission catch-up holds no module log; the range's module notices were announced when it was indexed.
  if (noticeS <= 0 || ctx.toTime <= ctx.fromTime || ctx.catchUp) return [];
  const { chainId } = ctx;
  const { states, pairOf, blocked, logs, pairLogs } = await candidates(tx, ctx, inFlight, noticeS);
  const found: Notice[] = [];
  for (const [id, s] of states) {
    const own = logs.get(id) ?? [];
    const [module, subscriber] = pairOf.get(id)!;
    const pair = `${module}:${subscriber}`;
    const merged = [...own, ...(pairLogs.get(pair) ?? [])].sort((a, b) =>
      a.blockNumber < b.blockNumber ? -1 : a.blockNumber > b.blockNumber ? 1 : a.logIndex - b.logIndex,
    );
    const window = {
      fromTime: ctx.fromTime,
      toTime: ctx.toTime,
      noticeS,
      merchant: ctx.merchants.get(module),
      plans: ctx.plans,
    };
    found.push(...noticesOf(s, blocked.get(pair) ?? false, merged, window));
  }
  if (found.length === 0) return [];
  const ids = found.map((n) => n.s.subscriptionId);
  const dues = found.map((n) => n.s.nextChargeAt);
  const announced = new Set(
    (
      await tx<{ k: string }[]>`
        select subscription_id::text || ':' || due_at as k from renewal_notices where chain_id = ${chainId}
          and (subscription_id, due_at) in (select * from unnest(${ids}::text[]::numeric[], ${dues}::bigint[]))`
    ).map((r) => r.k),
  );
  const fresh = found.filter((n) => !announced.has(`${n.s.subscriptionId}:${n.s.nextChargeAt}`));
  if (fresh.length === 0) return [];
  const terms = await planTerms(tx, ctx, inFlight, fresh);
  const events: NewEvent[] = [];
  for (const n of fresh) {
    const block = await ctx.blockAt(n.instant);
    const plan = terms.get(planKey(n.s.module, n.s.planId));
    const status = statusAt(n.s, n.blocked, ctx.plans.get(planKey(n.s.module, n.s.planId)), n.instant);
    events.push({
      id: eventIdOf(chainId, block.hash, "renewal_upcoming", n.s.subscriptionId, n.s.nextChargeAt),
      merchant: n.s.merchant,
      type: "subscription.renewal_upcoming",
      blockNumber: block.number,
      logIndex: -1,
      subIndex: 0,
      ts: n.instant,
      data: {
        object: recordOf(chainId, n.s, n.blocked, status),
        due_at: isoFromUnix(n.s.nextChargeAt),
        amount: plan?.amount ?? null,
        currency: plan?.symbol ?? null,
        token_decimals: plan?.decimals ?? null,
      },
    });
  }
  await tx`insert into renewal_notices (chain_id, subscription_id, due_at, block_number)
    select ${chainId}, s, d, b from unnest(${fresh.map((n) => n.s.subscriptionId)}::text[]::numeric[],
      ${fresh.map((n) => n.s.nextChargeAt)}::bigint[], ${events.map((e) => e.blockNumber.toString())}::bigint[]) as x(s, d, b)
    on conflict do nothing`;
  return events;
}

/** Amount and token metadata of the notices' plans: committed rows, else those of the batches in flight or its own. */
async function planTerms(tx: Q, ctx: BatchContext, inFlight: readonly BatchRows[], notices: Notice[]) {
  const keys = [...new Set(notices.map((n) => planKey(n.s.module, n.s.planId)))];
  const plans = new Map<string, { amount: string; token: string }>();
  for (const r of [...inFlight, ctx.rows]) {
    for (const p of r.derived.plans) plans.set(planKey(p.module, p.planId), { amount: p.amount, token: p.token });
  }
  const rows = await tx<{ module: string; plan_id: string; amount: string; token: string }[]>`
    select module, plan_id::text, amount::text, token from plans
    where chain_id = ${ctx.chainId} and (module || ':' || plan_id) = any(${keys}::text[])`;
  for (const r of rows) plans.set(planKey(r.module, r.plan_id), { amount: r.amount, token: r.token });
  const meta = await tokenMeta(tx, ctx, inFlight, [...new Set([...plans.values()].map((p) => p.token))]);
  const out = new Map<string, { amount: string; symbol: string | null; decimals: number | null }>();
  for (const [k, p] of plans) {
    const m = meta.get(p.token);
    out.set(k, { amount: p.amount, symbol: m?.symbol ?? null, decimals: m?.decimals ?? null });
  }
  return out;
}

/** Symbol and decimals of `tokens`: committed rows, else those of the batches in flight or the batch's own. */
export async function tokenMeta(tx: Q, ctx: BatchContext, inFlight: readonly BatchRows[], tokens: string[]) {
  const meta = new Map<string, { symbol: string | null; decimals: number | null }>();
  for (const t of await tx<{ address: string; symbol: string | null; decimals: number | null }[]>`
    select address, symbol, decimals from tokens where chain_id = ${ctx.chainId} and address = any(${tokens}::text[])`) {
    meta.set(t.address, t);
  }
  for (const r of [...inFlight, ctx.rows]) for (const t of r.tokens) meta.set(t.address, t);
  return meta;
}
