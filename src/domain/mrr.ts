/**
 * Monthly recurring revenue (analytics.md §1–3): an allocation's MRR, a movement's kind, and rates as decimal
 * strings. The SQL fragment and the TypeScript function of an allocation's MRR are the same rule;
 * test/domain/mrr.test.ts holds them equal.
 */
import type postgres from "postgres";
import type { SubscriptionStatus } from "./status";
import type { RevokedBy } from "./spend-permission";

type Sql = postgres.Sql<{}>;

/** A month: a 365.25-day year ÷ 12, in seconds. */
export const MONTH_S = 2_629_800n;

/** An allocation's MRR in token base units: floor(amount × MONTH_S ÷ interval) while ACTIVE, else 0. */
export function allocationMrr(status: SubscriptionStatus, amount: bigint, intervalS: bigint | number): bigint {
  const interval = BigInt(intervalS);
  if (status !== "ACTIVE" || interval <= 0n) return 0n;
  return (amount * MONTH_S) / interval;
}

/** SQL of {@link allocationMrr} for a status expression and the plan's columns `amount`, `interval_s` of alias `p`. */
export function allocationMrrSql(sql: Sql, status: ReturnType<Sql>) {
  return sql`(case when ${status} = 'ACTIVE' and p.interval_s > 0
    then div(p.amount * ${MONTH_S.toString()}::numeric, p.interval_s) else 0 end)`;
}

/** Kinds of movement, in the order figures list them. */
export const MOVEMENT_KINDS = ["new", "expansion", "contraction", "churn", "reactivation"] as const;

/** A movement's kind. */
export type MovementKind = (typeof MOVEMENT_KINDS)[number];

/**
 * The kind of a change of a customer's MRR from `before` to `after` (analytics.md §2), or null when it did not
 * change. `hadMrr`: the customer had MRR > 0 at some earlier instant.
 */
export function movementKind(before: bigint, after: bigint, hadMrr: boolean): MovementKind | null {
  if (before === after) return null;
  if (before === 0n) return hadMrr ? "reactivation" : "new";
  if (after === 0n) return "churn";
  return after > before ? "expansion" : "contraction";
}

/** Churn reasons of an EXPIRED allocation: the last failed charge since its last successful one, or none tried. */
export const INVOLUNTARY_REASONS = [
  "InsufficientBalance",
  "InsufficientAllowance",
  "AllowanceExpired",
  "TransferFailed",
  "not_charged",
] as const;

/** Churn and contraction reasons, in precedence order (the first applies when several allocations left ACTIVE). */
export const CHURN_REASONS = [
  "cancelled_by_subscriber",
  "cancelled_by_merchant",
  "blocked",
  "paused",
  ...INVOLUNTARY_REASONS,
] as const;

/** Why a customer churned or contracted; `plan_change` only for a contraction. */
export type MovementReason = (typeof CHURN_REASONS)[number] | "plan_change";

/**
 * Why an allocation left ACTIVE for `status` (analytics.md §2): `blocked`, `paused`, who cancelled, or for EXPIRED the
 * reason of its last failed charge since its last successful one (`not_charged` when none was tried). Null for a
 * status that is not a leaving one.
 */
export function leaveReason(
  status: SubscriptionStatus,
  facts: { cancelledBySubscriber: boolean; lastFailure: string | null },
): MovementReason | null {
  if (status === "BLOCKED") return "blocked";
  if (status === "PAUSED") return "paused";
  if (status === "CANCELLED") return facts.cancelledBySubscriber ? "cancelled_by_subscriber" : "cancelled_by_merchant";
  if (status === "EXPIRED") return (facts.lastFailure as MovementReason | null) ?? "not_charged";
  return null;
}

/**
 * {@link leaveReason} of a Spend Permission. A revocation is the account's (`revoke`, `approveWithRevoke`) or the
 * spender's (`revokeAsSpender`); `revoked_by` `unknown` (a sender the index cannot place: a relayer, a Safe module, an
 * EIP-7702 batcher) counts as the subscriber's, because a merchant's spender is recognised (its own transaction, or
 * a user operation through a known EntryPoint) while those senders act for wallets. A lapse or an end is
 * `not_charged`: a failed `spend` reverts and leaves no record to name.
 */
export function permissionLeaveReason(status: SubscriptionStatus, revokedBy: RevokedBy | null): MovementReason | null {
  return leaveReason(status, { cancelledBySubscriber: revokedBy !== "merchant", lastFailure: null });
}

/** Whether a churn reason is involuntary (an expiry): a reactivation within RECOVERY_S of one is `recovered`. */
export const isInvoluntary = (reason: string | null) =>
  (INVOLUNTARY_REASONS as readonly string[]).includes(reason ?? "");

/** A reactivation this soon after an involuntary churn of the same customer is recovered revenue: 30 days. */
export const RECOVERY_S = 30 * 86_400;

/**
 * `num ÷ den` as a decimal string with 6 fractional digits, rounded half to even; null when `den` is 0. Signs are
 * kept (a ratio of a negative sum).
 */
export function rate(num: bigint, den: bigint): string | null {
  if (den === 0n) return null;
  const neg = num < 0n !== den < 0n && num !== 0n;
  const n = num < 0n ? -num : num;
  const d = den < 0n ? -den : den;
  const scaled = n * 1_000_000n;
  let q = scaled / d;
  const r = scaled % d;
  if (r * 2n > d || (r * 2n === d && q % 2n === 1n)) q += 1n;
  const s = q.toString().padStart(7, "0");
  const out = `${s.slice(0, -6)}.${s.slice(-6)}`;
  return neg && q !== 0n ? `-${out}` : out;
}

/** The UTC day (days since 1970-01-01) whose period holds instant `at` (unix s): periods are (start, end]. */
export const dayOfInstant = (at: number) => Math.floor((at - 1) / 86_400);

/**
 * SQL of the unix start of the period (`day`, ISO `week` from Monday, calendar `month`, UTC) of the day numbered by
 * the integer expression `d`.
 */
export function periodOfDaySql(sql: Sql, interval: "day" | "week" | "month", d: ReturnType<Sql>) {
  if (interval === "day") return sql`((${d})::bigint * 86400)`;
  if (interval === "week") return sql`((((${d}) + 3) / 7 * 7 - 3)::bigint * 86400)`;
  return sql`extract(epoch from date_trunc('month', (date '1970-01-01' + (${d})::int)::timestamp))::bigint`;
}
