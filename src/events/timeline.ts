/**
 * The subscription events of one batch, computed by folding its logs over the state before it (webhooks.md §1):
 * `subscription.created`, and `subscription.status_changed` for every change of the computed status, expiries
 * included at their exact instant. Pure: the hook loads the inputs and writes the output. (Activity events are the
 * activity rows themselves: see the events hook.)
 */
import { paidUntil, subscriptionStatus, type SubscriptionStatus } from "../domain/status";
import { toSubscriptionRecord } from "../domain/records";
import { applyToSubscription, planKey, subscriptionFromCreated, type SubState } from "../domain/subscription";
import { moduleOfEvent } from "../domain/attribution";
import { ACTIVITY_LOGS } from "../domain/chain-event";
import type { BatchEvent } from "../indexer/fetch";
import { eventIdOf } from "./ids";
import { firstAtOrAfter } from "../common/search";
import { subscriptionEventData } from "./envelope";

/** An event to write. `ts` is unix seconds; an expiry carries its instant to record it in `event_expiries`. */
export type NewEvent = {
  id: string;
  merchant: string;
  type: string;
  blockNumber: bigint;
  logIndex: number;
  subIndex: number;
  ts: number;
  data: Record<string, unknown>;
  /** A subscription event's allocation at the event: stored as columns, and `data` is built from it when asked. */
  snapshot?: SubSnapshot;
  expiry?: { subscriptionId: string; instant: number };
  /** Its place in the log when the batch numbered it (see `numberEvents`). */
  seq?: bigint;
};

/**
 * What a subscription event's record is built from: a copy of its allocation's state, its pair's block flag, its
 * status, and for a status change the status before (undefined: `subscription.created`).
 */
export type SubSnapshot = {
  state: SubState;
  blocked: boolean;
  status: SubscriptionStatus;
  previous?: SubscriptionStatus | null;
};

/** A subscription event: its snapshot, and `data` built from it on first use (a backfill stores only the snapshot). */
function snapshotEvent(chainId: number, e: Omit<NewEvent, "data" | "snapshot">, snapshot: SubSnapshot): NewEvent {
  let data: Record<string, unknown> | undefined;
  return {
    ...e,
    snapshot,
    get data() {
      return (data ??= subscriptionEventData(
        recordOf(chainId, snapshot.state, snapshot.blocked, snapshot.status),
        snapshot.previous,
      ));
    },
  };
}

/** Plan terms the status depends on. */
export type PlanTerms = { interval: number; grace: number; token: string };

/** What the fold of one batch needs besides its logs. */
export type TimelineInput = {
  chainId: number;
  events: BatchEvent[];
  /** State before the batch of every existing allocation the batch touches. */
  before: ReadonlyMap<string, SubState>;
  /** `<module>:<subscriber>` → blocked, before the batch (absent: not blocked). */
  blocked: ReadonlyMap<string, boolean>;
  /** `<module>:<planId>` → terms (plans of the batch included). */
  plans: ReadonlyMap<string, PlanTerms>;
  /** `<subscriptionId>:<instant>` of expiries already announced. */
  announced: Set<string>;
  /** Timestamp of the last block before the batch (0 before the first). */
  prevTime: number;
  toBlock: bigint;
  toHash: string;
  toTime: number;
};

/** Where an expiry at `instant` is placed: the first block of the batch at or after it, else the batch's last. */
export function blockFinder(input: Pick<TimelineInput, "events" | "toBlock" | "toHash">) {
  const { events } = input;
  return (instant: number): { number: bigint; hash: string } => {
    const ev = events[firstAtOrAfter(events.length, (i) => events[i]!.blockTime >= instant)];
    return ev ? { number: ev.blockNumber, hash: ev.blockHash } : { number: input.toBlock, hash: input.toHash };
  };
}

/** The subscription record of a state at unix second `at`. */
export function recordOf(chainId: number, s: SubState, blocked: boolean, status: SubscriptionStatus) {
  return toSubscriptionRecord({
    chain_id: String(chainId),
    subscription_id: s.subscriptionId,
    module: s.module,
    subscriber: s.subscriber,
    plan_id: s.planId,
    max_executions: s.maxExecutions,
    times_executed: String(s.timesExecuted),
    total_spent: s.totalSpent.toString(),
    created_at: String(s.createdAt),
    next_charge_at: String(s.nextChargeAt),
    allowance_expiry: s.allowanceExpiry,
    paused: s.paused,
    cancelled: s.cancelled,
    is_blocked: blocked,
    status,
  });
}

/** Status of a state at unix second `at`. */
export function statusAt(s: SubState, blocked: boolean, terms: PlanTerms | undefined, at: number): SubscriptionStatus {
  return subscriptionStatus(
    {
      blocked,
      cancelled: s.cancelled,
      paused: s.paused,
      timesExecuted: s.timesExecuted,
      lastPaidAt: s.lastPaidAt,
      interval: terms?.interval ?? 0,
      grace: terms?.grace ?? 0,
    },
    at,
  );
}

/** The expiry event of an allocation that turned EXPIRED at `instant`. */
export function expiryEvent(
  chainId: number,
  s: SubState,
  blocked: boolean,
  instant: number,
  block: { number: bigint; hash: string },
  logIndex: number,
): NewEvent {
  return snapshotEvent(
    chainId,
    {
      id: expiryId(chainId, block.hash, s.subscriptionId, instant),
      merchant: s.merchant,
      type: "subscription.status_changed",
      blockNumber: block.number,
      logIndex,
      subIndex: 0,
      ts: instant,
      expiry: { subscriptionId: s.subscriptionId, instant },
    },
    { state: { ...s }, blocked, status: "EXPIRED", previous: "ACTIVE" },
  );
}

const expiryId = (chainId: number, blockHash: string, subscriptionId: string, instant: number) =>
  eventIdOf(chainId, blockHash, "expired", subscriptionId, instant);

/**
 * The batch's expiries moved (in place) to the first block at or after their instant (`blockAt`), empty blocks
 * included, so that an expiry's block and id do not depend on where batches end. Its place in the log does not
 * change: no log lies between that block and the one the fold chose.
 */
export async function placeExpiries(
  chainId: number,
  events: NewEvent[],
  blockAt: (t: number) => Promise<{ number: bigint; hash: string }>,
): Promise<NewEvent[]> {
  return Promise.all(
    events.map(async (e) => {
      if (!e.expiry) return e;
      const block = await blockAt(e.expiry.instant);
      e.blockNumber = block.number;
      e.id = expiryId(chainId, block.hash, e.expiry.subscriptionId, e.expiry.instant);
      return e;
    }),
  );
}

/** The first second at which a paid allocation with these terms is EXPIRED. */
export function expiryInstant(s: SubState, terms: PlanTerms | undefined): number {
  return paidUntil({ lastPaidAt: s.lastPaidAt, ...(terms ?? { interval: 0, grace: 0 }) }) + 1;
}

/**
 * The expiry instant of an allocation when it falls in `(after, until]` and the allocation is then ACTIVE (paid, not
 * paused, cancelled or blocked), else undefined: `expiringBetween`'s rule, for states held in memory.
 */
export function expiringIn(
  s: SubState,
  blocked: boolean,
  terms: PlanTerms | undefined,
  after: number,
  until: number,
): number | undefined {
  if (s.timesExecuted === 0 || s.paused || s.cancelled || blocked) return undefined;
  const instant = expiryInstant(s, terms);
  return instant > after && instant <= until ? instant : undefined;
}

/** The expiry events of allocations found due (`expiringBetween`), each placed in the block `place` gives. */
export function dueExpiries(
  chainId: number,
  due: { subs: Map<string, SubState>; plans: Map<string, PlanTerms> },
  place: (instant: number) => { number: bigint; hash: string },
  logIndex: number,
): NewEvent[] {
  return [...due.subs.values()].map((s) => {
    const instant = expiryInstant(s, due.plans.get(planKey(s.module, s.planId)));
    return expiryEvent(chainId, s, false, instant, place(instant), logIndex);
  });
}

/** Logs of the batch that touch each allocation, in chain order (block changes fan out to the pair's allocations). */
function logsBySubscription(input: TimelineInput, pairs: Map<string, Set<string>>): Map<string, BatchEvent[]> {
  const out = new Map<string, BatchEvent[]>();
  const push = (id: string, ev: BatchEvent) => (out.get(id) ?? out.set(id, []).get(id)!).push(ev);
  for (const ev of input.events) {
    if (ev.name === "SubscriberBlocked" || ev.name === "SubscriberUnblocked") {
      for (const id of pairs.get(`${moduleOfEvent(ev)}:${String(ev.args.subscriber)}`) ?? []) push(id, ev);
    } else if (ev.subscriptionId !== null && ev.name !== "KeeperSet" && ev.name !== "FeeSet") {
      push(ev.subscriptionId, ev);
    }
  }
  return out;
}

/** Allocations of each `<module>:<subscriber>` pair: the existing ones and those the batch creates, in order. */
function pairsOf(input: TimelineInput, merchants: ReadonlyMap<string, string>): Map<string, Set<string>> {
  // Sets, not lists: a subscriber may hold thousands of allocations of one module.
  const pairs = new Map<string, Set<string>>();
  const add = (key: string, id: string) => (pairs.get(key) ?? pairs.set(key, new Set()).get(key)!).add(id);
  for (const s of input.before.values()) add(`${s.module}:${s.subscriber}`, s.subscriptionId);
  for (const ev of input.events) {
    if (ev.name !== "SubscriptionCreated") continue;
    const module = moduleOfEvent(ev)!;
    if (merchants.has(module)) add(`${module}:${String(ev.args.subscriber)}`, ev.subscriptionId!);
  }
  return pairs;
}

/** The fields of an event that its allocation and its log give. */
const eventBase = (s: SubState, ev: BatchEvent) => ({
  merchant: s.merchant,
  blockNumber: ev.blockNumber,
  logIndex: ev.logIndex,
  ts: ev.blockTime,
});

/**
 * The subscription events of the batch for every allocation it touches: created, status changes in log order,
 * and expiries up to the batch's last block. `merchants` maps module → merchant (the batch's modules included).
 */
export function subscriptionEvents(input: TimelineInput, merchants: ReadonlyMap<string, string>): NewEvent[] {
  const out: NewEvent[] = [];
  const findBlock = blockFinder(input);
  const pairs = pairsOf(input, merchants);
  for (const [id, logs] of logsBySubscription(input, pairs)) {
    let state = input.before.has(id) ? { ...input.before.get(id)! } : null;
    // The pair's flag as of this allocation's place in the log: its own walk sees every block change of its pair
    // (see `logsBySubscription`), so it starts from the flag before the batch and is never shared with the others.
    let pairBlocked: boolean | null = null;
    // An allocation's pair and plan never change: its flag before the batch and its terms are looked up once (and
    // again if the batch creates it).
    const blockedBefore = (s: SubState | null) =>
      s ? (input.blocked.get(`${s.module}:${s.subscriber}`) ?? false) : false;
    let wasBlocked = blockedBefore(state);
    const isBlocked = () => pairBlocked ?? wasBlocked;
    let planTerms = state ? input.plans.get(planKey(state.module, state.planId)) : undefined;
    const terms = () => planTerms;
    let prev = state ? statusAt(state, isBlocked(), terms(), input.prevTime) : null;
    const expireUpTo = (t: number) => {
      if (!state || prev !== "ACTIVE") return;
      const instant = expiryInstant(state, terms());
      if (instant > t) return;
      prev = "EXPIRED";
      if (input.announced.has(`${id}:${instant}`)) return;
      out.push(expiryEvent(input.chainId, state, isBlocked(), instant, findBlock(instant), -1));
    };
    for (const ev of logs) {
      expireUpTo(ev.blockTime);
      const module = moduleOfEvent(ev)!;
      if (ev.name === "SubscriptionCreated") {
        const merchant = merchants.get(module);
        if (merchant === undefined) break;
        state = subscriptionFromCreated(ev, merchant);
        wasBlocked = blockedBefore(state);
        planTerms = input.plans.get(planKey(state.module, state.planId));
      } else if (ev.name === "SubscriberBlocked" || ev.name === "SubscriberUnblocked") {
        pairBlocked = ev.name === "SubscriberBlocked";
      } else if (state && state.module === module) {
        applyToSubscription(state, ev, terms());
      }
      if (!state) continue;
      const blocked = isBlocked();
      const now = statusAt(state, blocked, terms(), ev.blockTime);
      if (ev.name === "SubscriptionCreated") {
        const type = "subscription.created";
        out.push(
          snapshotEvent(
            input.chainId,
            {
              ...eventBase(state, ev),
              id: eventIdOf(input.chainId, ev.blockHash, ev.logIndex, type),
              type,
              subIndex: 0,
            },
            { state: { ...state }, blocked, status: now },
          ),
        );
      } else if (now !== prev) {
        const type = "subscription.status_changed";
        // A payment log is itself an event at this position (its activity row's): the status change follows it.
        const subIndex = ACTIVITY_LOGS.has(ev.name) ? 1 : 0;
        const eventId = eventIdOf(input.chainId, ev.blockHash, ev.logIndex, "status", id, now);
        out.push(
          snapshotEvent(
            input.chainId,
            { ...eventBase(state, ev), id: eventId, type, subIndex },
            { state: { ...state }, blocked, status: now, previous: prev },
          ),
        );
      }
      prev = now;
    }
    expireUpTo(input.toTime);
  }
  return out;
}

/** Orders a batch's events: by block, then position in the block (expiries first), then sub-index. */
export function sortEvents(events: NewEvent[]): NewEvent[] {
  return events.sort((a, b) =>
    a.blockNumber !== b.blockNumber
      ? a.blockNumber < b.blockNumber
        ? -1
        : 1
      : a.logIndex - b.logIndex || a.subIndex - b.subIndex || a.ts - b.ts || (a.id < b.id ? -1 : a.id > b.id ? 1 : 0),
  );
}

/** The distance between a batch's `n` activity events in its block of seqs of `size`. */
const gapOf = (size: bigint, n: number) => size / BigInt(n + 1);

/**
 * The seqs of a batch's `n` activity events in its block of seqs `[base, base + size)`: event k at
 * `base + gap·(k+1)`, `gap = size / (n+1)`; in float arithmetic while it is exact (a backfill batch has thousands).
 */
export function activitySeqs(base: bigint, size: bigint, n: number): string[] {
  const gap = gapOf(size, n);
  if (base + size < 2n ** 53n) {
    const [b, g] = [Number(base), Number(gap)];
    const seqs = new Array<string>(n);
    for (let k = 0; k < n; k++) seqs[k] = String(b + g * (k + 1));
    return seqs;
  }
  return Array.from({ length: n }, (_, k) => (base + gap * BigInt(k + 1)).toString());
}

/**
 * Numbers a batch's subscription events (sorted) inside its block of seqs, in the gaps between its activity events
 * (see `activitySeqs`), after the activity events that precede them in the chain. An event that does not fit in its
 * gap keeps no seq (it is appended after the block).
 */
export function numberEvents(
  base: bigint,
  size: bigint,
  activity: { blockNumber: bigint; logIndex: number }[],
  events: NewEvent[],
): void {
  const gap = gapOf(size, activity.length);
  let k = 0;
  let j = 0n;
  const before = (a: { blockNumber: bigint; logIndex: number }, e: NewEvent) =>
    a.blockNumber !== e.blockNumber
      ? a.blockNumber < e.blockNumber
      : a.logIndex < e.logIndex || (a.logIndex === e.logIndex && e.subIndex > 0);
  for (const e of events) {
    while (k < activity.length && before(activity[k]!, e)) {
      k++;
      j = 0n;
    }
    j++;
    if (j < gap) e.seq = base + gap * BigInt(k) + j;
  }
}
