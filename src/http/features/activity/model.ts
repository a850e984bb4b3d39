/** Activity records (docs/api-rules.md) and the documentation of the activity, payments and failures routes. */
import { Type as t, type Static } from "@sinclair/typebox";
import { documented, ParamDocs } from "../../params";
import { responses } from "../docs";
import { FAILURE_REASONS } from "../../../domain/failure-reasons";
import { csvText, formatUnits, formatUnitsSql, type CsvColumn } from "../../csv";
import { ACTIVITY_TYPES, activityAmountSql, activityRecordSql, type SqlField } from "../../../domain/records";
import type { Sql } from "../../../db/client";
import { FormatParamDoc, withCsvContent } from "../../stream";

/** Activity types: CHARGE (successful payment), FAIL (failed payment attempt) or REFILL (credit refill). */
export { ACTIVITY_TYPES, type ActivityType } from "../../../domain/records";

/** One activity record. */
export const ActivityRecord = t.Object({
  event_id: t.String({ description: "`<chain_id>:<tx_hash>:<log_index>`" }),
  allocation_id: t.String({ description: "`<chain_id>:<module>:<subscription_id>`" }),
  module_address: t.String({ description: "Subscription module contract (lowercase)" }),
  tx_hash: t.String({ description: "Transaction hash (lowercase)" }),
  block_number: t.String({ description: "Block number (decimal string)" }),
  type: t.Union(
    ACTIVITY_TYPES.map((v) => t.Literal(v)),
    { description: "CHARGE (successful payment), FAIL (failed payment attempt) or REFILL (credit refill)" },
  ),
  amount_charged: t.String({
    description: 'Token base units (decimal): gross charge, refilled amount, or "0" for failures',
  }),
  token_decimals: t.Union([t.Integer(), t.Null()], { description: "Token decimals; null when the token has none" }),
  currency: t.Union([t.String(), t.Null()], { description: "Token symbol; null when the token has none" }),
  reason: t.Union([t.Union(FAILURE_REASONS.map((v) => t.Literal(v))), t.Null()], {
    description: "Failure reason for FAIL; null otherwise",
  }),
  keeper_address: t.Union([t.String(), t.Null()], {
    description: "Sender of the charge (a keeper or the merchant) for CHARGE and FAIL; null for REFILL",
  }),
  fee_paid: t.Union([t.String(), t.Null()], { description: "Protocol fee of a CHARGE (base units); null otherwise" }),
  timestamp: t.String({ format: "date-time", description: "Block timestamp (ISO 8601, UTC, milliseconds)" }),
  source: t.Union([t.Literal("subscription_module"), t.Literal("spend_permission")], {
    description:
      "A module charge, or a Base Spend Permission's (SpendPermissionUsed; its allocation id names the hash)",
  }),
});

/** An activity record. */
export type ActivityRecord = Static<typeof ActivityRecord>;

const charge: ActivityRecord = {
  event_id: "31337:0x5c504ed432cb51138bcf09aa5e8a410dd4a1e204ef84bfed1be16dfba1b22060:2",
  allocation_id: "31337:0xa16e02e87b7454126e5e10d957a927a7f5b5d2be:1",
  module_address: "0xa16e02e87b7454126e5e10d957a927a7f5b5d2be",
  tx_hash: "0x5c504ed432cb51138bcf09aa5e8a410dd4a1e204ef84bfed1be16dfba1b22060",
  block_number: "1042",
  type: "CHARGE",
  amount_charged: "10000000",
  token_decimals: 6,
  currency: "USDC",
  reason: null,
  keeper_address: "0x90f79bf6eb2c4f870365e785982e1f101e93b906",
  fee_paid: "250000",
  timestamp: "2026-11-20T10:00:00.000Z",
  source: "subscription_module",
};

const failure: ActivityRecord = {
  ...charge,
  event_id: "31337:0x9b2c6f0e3a1d4b5c8e7f60a1b2c3d4e5f60718293a4b5c6d7e8f90a1b2c3d4e5:0",
  tx_hash: "0x9b2c6f0e3a1d4b5c8e7f60a1b2c3d4e5f60718293a4b5c6d7e8f90a1b2c3d4e5",
  block_number: "2210",
  type: "FAIL",
  amount_charged: "0",
  reason: "InsufficientBalance",
  fee_paid: null,
  timestamp: "2026-12-20T10:00:12.000Z",
};

const refill: ActivityRecord = {
  ...charge,
  event_id: "31337:0x1f0e2d3c4b5a69788796a5b4c3d2e1f00f1e2d3c4b5a69788796a5b4c3d2e1f0:1",
  tx_hash: "0x1f0e2d3c4b5a69788796a5b4c3d2e1f00f1e2d3c4b5a69788796a5b4c3d2e1f0",
  block_number: "2305",
  type: "REFILL",
  amount_charged: "20000000",
  keeper_address: null,
  fee_paid: null,
  timestamp: "2026-12-21T08:30:00.000Z",
};

/** The CSV columns of an activity record: the JSON fields, then the amounts in token units (exact decimals). */
export const ACTIVITY_CSV_COLUMNS: readonly CsvColumn<ActivityRecord>[] = [
  ...(
    [
      "event_id",
      "allocation_id",
      "module_address",
      "tx_hash",
      "block_number",
      "type",
      "amount_charged",
      "token_decimals",
      "currency",
      "reason",
      "keeper_address",
      "fee_paid",
      "timestamp",
      "source",
    ] as const
  ).map((name) => ({ name, value: (r: ActivityRecord) => r[name], sql: (sql: Sql) => recordField(sql, name) })),
  {
    name: "amount_charged_decimal",
    value: (r) => formatUnits(r.amount_charged, r.token_decimals),
    sql: (sql) => decimalField(sql, "amount_charged"),
  },
  {
    name: "fee_paid_decimal",
    value: (r) => formatUnits(r.fee_paid, r.token_decimals),
    sql: (sql) => decimalField(sql, "fee_paid"),
  },
];

/** The SQL of one field of the activity record (src/domain/records.ts). */
function recordField(sql: Sql, name: string): SqlField {
  return activityRecordSql(sql).find((f) => f.name === name)!;
}

/** An amount of the record in token units, in SQL: digits and at most one point, never escaped in CSV. */
function decimalField(sql: Sql, amount: "amount_charged" | "fee_paid"): Pick<SqlField, "kind" | "sql" | "notNull"> {
  return {
    kind: "plain",
    notNull: true, // formatUnitsSql gives '' for null
    sql: formatUnitsSql(sql, activityAmountSql(sql, amount), recordField(sql, "token_decimals").sql),
  };
}

const commonQuery = {
  format: t.Optional(FormatParamDoc),
  chain_id: t.Optional(ParamDocs.chainId),
  limit: t.Optional(ParamDocs.limit),
  since: t.Optional(
    documented(
      t.String({
        format: "date-time",
        description:
          "Only activity at or after this instant. Any ISO 8601 date-time, with or without milliseconds, `Z` or " +
          "an offset (encode `+` as `%2B`; an unencoded `+`, which arrives as a space, is read as `+`).",
        examples: ["2026-11-01T00:00:00Z"],
      }),
    ),
  ),
  token: t.Optional(
    documented(
      t.String({
        minLength: 1,
        maxLength: 64,
        description: "Token symbol: exact match, case-insensitive (no patterns). Applies to every type.",
        examples: ["USDC"],
      }),
    ),
  ),
  order: t.Optional(
    documented(
      t.Union([t.Literal("asc"), t.Literal("desc")], {
        default: "asc",
        description: "Chain order (block number, log index): asc = oldest first (default), desc = newest first.",
      }),
    ),
  ),
  starting_after: t.Optional(
    documented(
      t.String({
        description: "An event_id: the page starts right after it, in the chosen order.",
        examples: ["31337:0x5c504ed432cb51138bcf09aa5e8a410dd4a1e204ef84bfed1be16dfba1b22060:2"],
      }),
    ),
  ),
};

/** Query of `/v0/activity/:merchant`. */
export const ActivityQueryDoc = t.Object({
  ...commonQuery,
  type: t.Optional(
    documented(
      t.Union(
        ACTIVITY_TYPES.map((v) => t.Literal(v)),
        { description: "Only this type: CHARGE (payments), FAIL (failed charges) or REFILL (credit refills)." },
      ),
    ),
  ),
});

/** Query of `/v0/payments/:merchant` and `/v0/failures/:merchant`. */
export const TypedQueryDoc = t.Object(commonQuery);

/** Path of the three routes. */
export const MerchantParamsDoc = t.Object({ merchant: ParamDocs.merchant });

const errors = [400, 401, 403, 503];

/** OpenAPI detail of each route. */
export const details = {
  activity: {
    tags: ["activity"],
    summary: "Full activity log",
    description:
      "Charges, failed charges and credit refills on the merchant's modules, in chain order (oldest first, or " +
      "newest first with `order=desc`). A merchant with no modules gets `[]`.",
    security: [{ bearer: [] }],
    responses: withCsvContent(
      responses(
        {
          description: "Activity records",
          schema: t.Array(ActivityRecord),
          example: [charge, failure, refill],
          link: true,
        },
        errors,
      ),
      csvText(ACTIVITY_CSV_COLUMNS, [charge, failure, refill]),
    ),
  },
  payments: {
    tags: ["activity"],
    summary: "Payments only",
    description: "The activity log restricted to successful charges (type CHARGE), for revenue reporting.",
    security: [{ bearer: [] }],
    responses: withCsvContent(
      responses(
        { description: "CHARGE records", schema: t.Array(ActivityRecord), example: [charge], link: true },
        errors,
      ),
      csvText(ACTIVITY_CSV_COLUMNS, [charge]),
    ),
  },
  failures: {
    tags: ["activity"],
    summary: "Failures only",
    description:
      "The activity log restricted to failed charge attempts (type FAIL); `reason` is one of " +
      `${FAILURE_REASONS.join(", ")}.`,
    security: [{ bearer: [] }],
    responses: withCsvContent(
      responses(
        { description: "FAIL records", schema: t.Array(ActivityRecord), example: [failure], link: true },
        errors,
      ),
      csvText(ACTIVITY_CSV_COLUMNS, [failure]),
    ),
  },
};
