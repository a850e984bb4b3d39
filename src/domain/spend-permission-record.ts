/**
 * The subscription record of a spend permission (spend-permissions spec §2.1, §2.3): the fields every record has,
 * filled from the permission, and its `spend_permission` object, computed at "now" from the stored row.
 */
import { isoFromUnix, type SubscriptionRecordObject } from "./records";
import { toRenewalObject, type RenewalRow } from "./renewal-record";
import {
  FOREVER_END,
  nextChargeInstant,
  permissionPeriodView,
  type PermissionState,
  type RevokedBy,
} from "./spend-permission";
import type { SubscriptionStatus } from "./status";

/** The columns of a `spend_permissions` row that the API and the indexer both read (numbers as text). */
export type PermissionColumns = {
  subscription_id: string;
  hash: string;
  manager: string;
  merchant: string;
  subscriber: string;
  token: string;
  allowance: string;
  period_s: string;
  start_s: string;
  end_s: string;
  salt: string;
  extra_data: string;
  times_executed: number;
  total_spent: string;
  last_period_start: string | null;
  last_period_end: string;
  last_period_spent: string | null;
  next_charge_at: string;
  revoked: boolean;
  revoked_by: RevokedBy | null;
};

/** A `spend_permissions` row as the API selects it, with "now" and the computed status. */
export type PermissionRecordRow = PermissionColumns & {
  chain_id: string;
  /** ISO 8601 UTC of the Revoked log's block, or null. */
  revoked_at: string | null;
  /** Unix seconds of the Approved log's block. */
  created_at: string;
  now_s: string;
  status: SubscriptionStatus;
  /** The stored renewal outlook that still holds (spend-permissions §4); absent or null: none. */
  renewal?: RenewalRow | null;
};

/** The fold's state of a stored row. */
export function permissionStateOf(r: PermissionRecordRow): PermissionState {
  const paidThrough = Number(r.last_period_end);
  return {
    account: r.subscriber as `0x${string}`,
    spender: r.merchant as `0x${string}`,
    token: r.token as `0x${string}`,
    allowance: BigInt(r.allowance),
    period: Number(r.period_s),
    start: Number(r.start_s),
    end: Number(r.end_s),
    salt: BigInt(r.salt),
    extraData: r.extra_data as `0x${string}`,
    timesExecuted: r.times_executed,
    totalSpent: BigInt(r.total_spent),
    paidThrough,
    lastPeriod:
      r.last_period_start === null
        ? null
        : { start: Number(r.last_period_start), end: paidThrough, spend: BigInt(r.last_period_spent ?? "0") },
    nextChargeAt: Number(r.next_charge_at),
    revoked: r.revoked,
    revokedBy: r.revoked_by,
    revokedAt: null,
  };
}

/** `<chain_id>:<manager>:<spender>:<token>:<allowance>:<period>`: identical terms of one spender are one plan. */
export function permissionPlanId(
  r: Pick<PermissionRecordRow, "chain_id" | "manager" | "merchant" | "token" | "allowance" | "period_s">,
) {
  return `${r.chain_id}:${r.manager}:${r.merchant}:${r.token}:${r.allowance}:${r.period_s}`;
}

/** The subscription record of a permission row. */
export function toPermissionRecord(r: PermissionRecordRow): SubscriptionRecordObject {
  const s = permissionStateOf(r);
  const now = Number(r.now_s);
  const next = nextChargeInstant(s, now);
  const view = permissionPeriodView(s, now);
  const iso = (t: number | null) => (t === null ? null : isoFromUnix(t));
  return {
    allocation_id: `${r.chain_id}:${r.manager}:${r.hash}`,
    on_chain_id: r.hash,
    module_address: r.manager,
    user_address: r.subscriber,
    plan_id: permissionPlanId(r),
    status: r.status,
    total_spent: r.total_spent,
    times_executed: r.times_executed,
    next_charge_date: iso(next),
    expires_at: s.end === FOREVER_END ? null : String(s.end),
    remaining_executions: null,
    created_at: isoFromUnix(r.created_at),
    is_blocked: false,
    renewal: r.renewal ? toRenewalObject(r.renewal) : null,
    source: "spend_permission",
    spend_permission: {
      hash: r.hash,
      spender: r.merchant,
      token: r.token,
      allowance: r.allowance,
      period_s: s.period,
      start: r.start_s,
      end: r.end_s,
      salt: r.salt,
      extra_data: r.extra_data,
      is_subscribed: view.isSubscribed,
      current_period_start: iso(view.currentPeriodStart),
      current_period_end: iso(view.currentPeriodEnd),
      spent_in_period: view.spentInPeriod?.toString() ?? null,
      remaining_in_period: view.remainingInPeriod?.toString() ?? null,
      paid_through: s.paidThrough === 0 ? null : isoFromUnix(s.paidThrough),
      revoked_by: r.revoked_by,
      revoked_at: r.revoked_at,
    },
  };
}
