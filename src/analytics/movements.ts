/**
 * MRR movements (analytics.md §2) folded from status changes, and their ids: pure. All changes of one customer
 * (merchant, wallet, token) at one instant (one block and timestamp; an expiry's computed instant is its own) make one
 * movement, from the customer's MRR just before to just after; an instant that leaves it unchanged makes none.
 */
import { CHURN_REASONS, isInvoluntary, movementKind, RECOVERY_S, type MovementKind } from "../domain/mrr";
import type { SubscriptionStatus } from "../domain/status";
import { eventIdOf } from "../events/ids";

/** One allocation's status change, with what its MRR and reason depend on. */
export type StatusChange = {
  allocationId: string;
  merchant: string;
  /** The subscriber wallet, lowercase. */
  customer: string;
  /** The plan's token, lowercase. */
  token: string;
  blockNumber: bigint;
  /** Unix seconds: the block's timestamp, or the expiry's instant. */
  at: number;
  /** Null: the allocation was created by this change. */
  previous: SubscriptionStatus | null;
  status: SubscriptionStatus;
  /** The allocation's MRR while ACTIVE (its plan's floor(amount × month ÷ interval)). */
  activeMrr: bigint;
  /** Why it left ACTIVE, when `status` is not ACTIVE (see CHURN_REASONS). */
  reason: string | null;
};

/**
 * What a customer's next movement depends on: its latest movement (undefined: it never had MRR), the instant of its
 * first movement, and the instant its current stretch of MRR > 0 began.
 */
export type CustomerState = {
  mrr: bigint;
  kind: MovementKind;
  reason: string | null;
  at: number;
  firstAt: number;
  activeSince: number;
  /** The instant of its latest churn (0: none). */
  lastChurnAt: number;
};

/** A movement, before its id. */
export type Movement = {
  merchant: string;
  customer: string;
  token: string;
  blockNumber: bigint;
  at: number;
  kind: MovementKind;
  mrrBefore: bigint;
  mrrAfter: bigint;
  reason: string | null;
  recovered: boolean;
  /** The allocations that entered or left ACTIVE at this instant. */
  allocationIds: string[];
  /** The instant of the customer's first movement (its cohort). */
  firstAt: number;
  /** The instant of the `new` or `reactivation` movement that began the customer's current stretch of MRR > 0. */
  activeSince: number;
  /** The instant of the customer's churn before this movement (0: none). */
  prevChurnAt: number;
};

/** A movement with its id, as stored. */
export type StoredMovement = Movement & { id: string };

/** The id of the movement of a customer at an instant (`mov_`), and of its event (`evt_`): the same 40 digits. */
export function movementIds(chainId: number, blockHash: string, m: Movement) {
  const evt = eventIdOf(chainId, blockHash, "customer", m.merchant, m.customer, m.token, m.at);
  return { id: `mov_${evt.slice(4)}`, eventId: evt };
}

/** Key of a customer. */
export const customerKey = (merchant: string, customer: string, token: string) => `${merchant}:${customer}:${token}`;

/** The reason of a churn or contraction among allocations that left ACTIVE: the first in CHURN_REASONS' order. */
function firstReason(reasons: (string | null)[]): string | null {
  let best: string | null = null;
  let rank = Infinity;
  for (const r of reasons) {
    const i = (CHURN_REASONS as readonly string[]).indexOf(r ?? "");
    if (i >= 0 && i < rank) [best, rank] = [r, i];
  }
  return best;
}

/**
 * The movements of `changes` (in chain order), each customer starting from `before(key)`; the states the
 * movements leave are written back through `after` (a map the caller may keep for the next fold).
 */
export function foldMovements(
  changes: readonly StatusChange[],
  before: (key: string) => CustomerState | undefined,
  after: Map<string, CustomerState> = new Map(),
): Movement[] {
  const out: Movement[] = [];
  // Groups of one customer and one instant, in chain order of their first change.
  const groups = new Map<string, StatusChange[]>();
  for (const c of changes) {
    const k = `${customerKey(c.merchant, c.customer, c.token)}|${c.blockNumber}|${c.at}`;
    (groups.get(k) ?? groups.set(k, []).get(k)!).push(c);
  }
  for (const group of groups.values()) {
    const { merchant, customer, token, blockNumber, at } = group[0]!;
    const key = customerKey(merchant, customer, token);
    const state = after.get(key) ?? before(key);
    // Each allocation from its status before the instant to its status after it.
    const allocs = new Map<string, { from: SubscriptionStatus | null; last: StatusChange }>();
    for (const c of group) {
      const a = allocs.get(c.allocationId);
      if (a) a.last = c;
      else allocs.set(c.allocationId, { from: c.previous, last: c });
    }
    let delta = 0n;
    const left: (string | null)[] = [];
    let entered = false;
    const moved: string[] = [];
    for (const [id, { from, last }] of allocs) {
      const wasActive = from === "ACTIVE";
      const isActive = last.status === "ACTIVE";
      if (wasActive && !isActive) {
        delta -= last.activeMrr;
        left.push(last.reason);
        moved.push(id);
      } else if (!wasActive && isActive) {
        delta += last.activeMrr;
        entered = true;
        moved.push(id);
      }
    }
    const mrrBefore = state?.mrr ?? 0n;
    const mrrAfter = mrrBefore + delta;
    const kind = movementKind(mrrBefore, mrrAfter, state !== undefined);
    if (kind === null) continue;
    let reason: string | null = null;
    if (kind === "churn") reason = firstReason(left);
    else if (kind === "contraction") reason = entered ? "plan_change" : firstReason(left);
    const recovered =
      kind === "reactivation" &&
      state!.kind === "churn" &&
      isInvoluntary(state!.reason) &&
      at - state!.at <= RECOVERY_S;
    const firstAt = state?.firstAt ?? at;
    const activeSince = kind === "new" || kind === "reactivation" ? at : state!.activeSince;
    const prevChurnAt = state?.lastChurnAt ?? 0;
    out.push({
      merchant,
      customer,
      token,
      blockNumber,
      at,
      kind,
      mrrBefore,
      mrrAfter,
      reason,
      recovered,
      allocationIds: moved,
      firstAt,
      activeSince,
      prevChurnAt,
    });
    const lastChurnAt = kind === "churn" ? at : prevChurnAt;
    after.set(key, { mrr: mrrAfter, kind, reason, at, firstAt, activeSince, lastChurnAt });
  }
  return out;
}
