/**
 * The API records of the index (docs/api-rules.md "Records"): one mapping from table rows to the activity record and
 * the subscription record, used by the API routes and by the event log (events carry these records as `data.object`).
 */
import type postgres from "postgres";
import type { SubscriptionStatus } from "./status";
import { toRenewalObject, type RenewalObject, type RenewalRow } from "./renewal-record";
import type { RevokedBy } from "./spend-permission";

/** The types of an activity record (`activity.type`). */
export const ACTIVITY_TYPES = ["CHARGE", "FAIL", "REFILL"] as const;

/** The type of an activity record. */
export type ActivityType = (typeof ACTIVITY_TYPES)[number];

/** An activity row: the columns of `activity` the record needs, token metadata joined. */
export type ActivityRecordRow = {
  chain_id: string;
  block_number: string;
  log_index: number;
  tx_hash: string;
  /** Block timestamp, ISO 8601 UTC with milliseconds. */
  timestamp: string;
  module: string;
  subscription_id: string;
  type: ActivityType;
  amount: string;
  fee: string | null;
  reason: string | null;
  keeper: string | null;
  symbol: string | null;
  decimals: number | null;
  /** A spend permission's charge: the permission's hash (its allocation id names it); null or absent otherwise. */
  permission_hash?: string | null;
};

/** The activity record (api.md 2.1). */
export type ActivityRecordObject = {
  event_id: string;
  allocation_id: string;
  module_address: string;
  tx_hash: string;
  block_number: string;
  type: "CHARGE" | "FAIL" | "REFILL";
  amount_charged: string;
  token_decimals: number | null;
  currency: string | null;
  reason: string | null;
  keeper_address: string | null;
  fee_paid: string | null;
  timestamp: string;
  /** Which source the record comes from: the protocol's modules, or Base Spend Permissions. */
  source: "subscription_module" | "spend_permission";
};

/** `<chain_id>:<tx_hash>:<log_index>`. */
export function eventId(r: { chain_id: string; tx_hash: string; log_index: number }): string {
  return `${r.chain_id}:${r.tx_hash}:${r.log_index}`;
}

/** `<chain_id>:<module>:<subscription_id>`. */
export function allocationId(r: { chain_id: string; module: string; subscription_id: string }): string {
  return `${r.chain_id}:${r.module}:${r.subscription_id}`;
}

/** The activity record of a row; the per-type nulls are fixed here. */
export function toActivityRecord(r: ActivityRecordRow): ActivityRecordObject {
  return {
    event_id: eventId(r),
    allocation_id: r.permission_hash ? `${r.chain_id}:${r.module}:${r.permission_hash}` : allocationId(r),
    module_address: r.module,
    tx_hash: r.tx_hash,
    block_number: r.block_number,
    type: r.type,
    amount_charged: r.type === "FAIL" ? "0" : r.amount,
    token_decimals: r.decimals,
    currency: r.symbol,
    reason: r.type === "FAIL" ? r.reason : null,
    keeper_address: r.type === "REFILL" ? null : r.keeper,
    fee_paid: r.type === "CHARGE" ? r.fee : null,
    timestamp: r.timestamp,
    source: r.permission_hash ? "spend_permission" : "subscription_module",
  };
}

type Sql = postgres.Sql<{}>;

/** A SQL expression embedded in a query (a postgres.js fragment). */
export type SqlFragment = postgres.PendingQuery<postgres.Row[]>;

/**
 * One field of a record rendered in SQL: its key, its expression (text, or integer for a `number`), and how JSON
 * shows it. `plain` is a string the indexer only ever writes as `0x` + lowercase hex or digits and colons (addresses,
 * hashes, ids built of them), digits, or a fixed word (the type): nothing in it needs escaping, in JSON or CSV.
 * `notNull`: the expression is never null (built of NOT NULL columns only), so no `coalesce` guards it.
 */
export type SqlField = { name: string; kind: "string" | "plain" | "number"; sql: SqlFragment; notNull?: boolean };

/** The block time of activity `a` as records show it: ISO 8601 UTC with milliseconds. */
export function activityTimestampSql(sql: Sql): SqlFragment {
  return sql`to_char(a.block_time at time zone 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"')`;
}

/** The record's amount_charged or fee_paid in SQL, as numeric: 0 for a FAIL, the fee of a CHARGE only. */
export function activityAmountSql(sql: Sql, name: "amount_charged" | "fee_paid"): SqlFragment {
  return name === "amount_charged"
    ? sql`(case when a.type = 'FAIL' then 0 else a.amount end)`
    : sql`(case when a.type = 'CHARGE' then a.fee end)`;
}

/**
 * {@link toActivityRecord} in SQL, field by field in the record's key order, per-type nulls included, over the aliases
 * `a` (activity) and `t` (its token, left joined). test/domain/records.test.ts holds the two equal over random rows.
 */
export function activityRecordSql(sql: Sql): SqlField[] {
  return [
    {
      name: "event_id",
      kind: "plain",
      notNull: true,
      sql: sql`(a.chain_id || ':' || a.tx_hash || ':' || a.log_index)`,
    },
    {
      name: "allocation_id",
      kind: "plain",
      notNull: true,
      sql: sql`(a.chain_id || ':' || a.module || ':' || coalesce(a.permission_hash, a.subscription_id::text))`,
    },
    { name: "module_address", kind: "plain", notNull: true, sql: sql`a.module` },
    { name: "tx_hash", kind: "plain", notNull: true, sql: sql`a.tx_hash` },
    { name: "block_number", kind: "plain", notNull: true, sql: sql`a.block_number::text` },
    { name: "type", kind: "plain", notNull: true, sql: sql`a.type` },
    {
      name: "amount_charged",
      kind: "plain",
      notNull: true,
      sql: sql`${activityAmountSql(sql, "amount_charged")}::text`,
    },
    { name: "token_decimals", kind: "number", sql: sql`t.decimals` },
    { name: "currency", kind: "string", sql: sql`t.symbol` },
    { name: "reason", kind: "string", sql: sql`(case when a.type = 'FAIL' then a.reason end)` },
    { name: "keeper_address", kind: "plain", sql: sql`(case when a.type <> 'REFILL' then a.keeper end)` },
    { name: "fee_paid", kind: "plain", sql: sql`${activityAmountSql(sql, "fee_paid")}::text` },
    { name: "timestamp", kind: "plain", notNull: true, sql: activityTimestampSql(sql) },
    {
      name: "source",
      kind: "plain",
      notNull: true,
      sql: sql`(case when a.permission_hash is null then 'subscription_module' else 'spend_permission' end)`,
    },
  ];
}

/** A subscription row: the columns of `subscriptions` the record needs, block state and status computed. */
export type SubscriptionRecordRow = {
  chain_id: string;
  subscription_id: string;
  module: string;
  subscriber: string;
  plan_id: string;
  max_executions: string;
  times_executed: string;
  total_spent: string;
  created_at: string;
  next_charge_at: string;
  allowance_expiry: string;
  paused: boolean;
  cancelled: boolean;
  is_blocked: boolean;
  status: SubscriptionStatus;
  /** The stored renewal outlook (renewals.md), when the allocation has one; absent or null: none. */
  renewal?: RenewalRow | null;
};

/** The `spend_permission` object of a record. */
export type SpendPermissionObject = {
  hash: string;
  spender: string;
  token: string;
  allowance: string;
  period_s: number;
  start: string;
  end: string;
  salt: string;
  extra_data: string;
  is_subscribed: boolean;
  current_period_start: string | null;
  current_period_end: string | null;
  spent_in_period: string | null;
  remaining_in_period: string | null;
  paid_through: string | null;
  revoked_by: RevokedBy | null;
  revoked_at: string | null;
};

/** The subscription record (api.md 2.2). */
export type SubscriptionRecordObject = {
  allocation_id: string;
  on_chain_id: string;
  module_address: string;
  user_address: string;
  plan_id: string;
  status: SubscriptionStatus;
  total_spent: string;
  times_executed: number;
  next_charge_date: string | null;
  expires_at: string | null;
  remaining_executions: number | null;
  created_at: string;
  is_blocked: boolean;
  renewal: RenewalObject | null;
  /** Which source the record comes from: the protocol's modules, or Base Spend Permissions. */
  source: "subscription_module" | "spend_permission";
  /** The permission's own fields (./spend-permission-record.ts); null on module records. */
  spend_permission: SpendPermissionObject | null;
};

/** ISO 8601 (ms, UTC) of unix seconds held as a decimal string; clamped to the range a JS Date can show. */
export function isoFromUnix(seconds: string | number): string {
  const ms = Math.min(Math.max(Number(seconds) * 1000, -8.64e15), 8.64e15);
  return new Date(ms).toISOString();
}

/**
 * The next scheduled charge: null when none is queued (cancelled, paused, blocked, or every execution used),
 * otherwise the contract's nextChargeAt, also when it lies in the past.
 */
export function nextChargeDate(r: {
  is_blocked: boolean;
  cancelled: boolean;
  paused: boolean;
  max_executions: string;
  times_executed: string;
  next_charge_at: string;
}): string | null {
  if (r.is_blocked || r.cancelled || r.paused) return null;
  if (BigInt(r.max_executions) > 0n && BigInt(r.times_executed) >= BigInt(r.max_executions)) return null;
  return isoFromUnix(r.next_charge_at);
}

/** The subscription record of a row. */
export function toSubscriptionRecord(r: SubscriptionRecordRow): SubscriptionRecordObject {
  const max = BigInt(r.max_executions);
  const times = BigInt(r.times_executed);
  return {
    allocation_id: allocationId(r),
    on_chain_id: r.subscription_id,
    module_address: r.module,
    user_address: r.subscriber,
    plan_id: `${r.chain_id}:${r.module}:${r.plan_id}`,
    status: r.status,
    total_spent: r.total_spent,
    times_executed: Number(times),
    next_charge_date: nextChargeDate(r),
    expires_at: r.allowance_expiry === "0" ? null : r.allowance_expiry,
    remaining_executions: max === 0n ? null : Number(max > times ? max - times : 0n),
    created_at: isoFromUnix(r.created_at),
    is_blocked: r.is_blocked,
    renewal: r.renewal ? toRenewalObject(r.renewal) : null,
    source: "subscription_module",
    spend_permission: null,
  };
}
