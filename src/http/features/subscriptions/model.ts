/** Subscription records (docs/api-rules.md "Records") and the documentation of the subscriptions routes. */
import { Type as t, type Static } from "@sinclair/typebox";
import { documented, ParamDocs } from "../../params";
import { responses } from "../docs";

import { SUBSCRIPTION_STATUSES } from "../../../domain/status";
import { csvText, fieldColumns, formatUnits, type CsvColumn } from "../../csv";
import { FormatParamDoc, withCsvContent } from "../../stream";
import { renewalExample, RenewalSchema } from "../renewals/model";

export { SUBSCRIPTION_STATUSES, type SubscriptionStatus } from "../../../domain/status";

/** Schema of a computed status. */
export const SubscriptionStatusSchema = t.Union(
  SUBSCRIPTION_STATUSES.map((s) => t.Literal(s)),
  {
    description:
      "Computed at query time, first match wins: BLOCKED (merchant blocked the subscriber), CANCELLED, PAUSED, " +
      "PENDING (no payment yet), EXPIRED (now > last payment + interval + grace period), ACTIVE.",
  },
);

/** The `spend_permission` object of a permission's record. */
export const SpendPermissionSchema = t.Object({
  hash: t.String({ description: "EIP-712 hash of the permission (= on_chain_id, the SDK's subscription id)" }),
  spender: t.String({ description: "The merchant's spender address (lowercase)" }),
  token: t.String({ description: "Token, or 0xEeee…EEeE for the native currency" }),
  allowance: t.String({ description: "Per-period allowance, base units (decimal)" }),
  period_s: t.Integer({ description: "Period length in seconds" }),
  start: t.String({ description: "Unix seconds (decimal string)" }),
  end: t.String({ description: "Unix seconds, exclusive (decimal string)" }),
  salt: t.String(),
  extra_data: t.String(),
  is_subscribed: t.Boolean({ description: "Not revoked and start <= now < end (Base SDK's isSubscribed)" }),
  current_period_start: t.Union([t.String({ format: "date-time" }), t.Null()]),
  current_period_end: t.Union([t.String({ format: "date-time" }), t.Null()], { description: "Exclusive" }),
  spent_in_period: t.Union([t.String(), t.Null()]),
  remaining_in_period: t.Union([t.String(), t.Null()]),
  paid_through: t.Union([t.String({ format: "date-time" }), t.Null()]),
  revoked_by: t.Union([t.Literal("subscriber"), t.Literal("merchant"), t.Literal("unknown"), t.Null()]),
  revoked_at: t.Union([t.String({ format: "date-time" }), t.Null()]),
});

/** One subscription allocation. */
export const SubscriptionRecord = t.Object({
  allocation_id: t.String({ description: "`<chain_id>:<module>:<subscription_id>`" }),
  on_chain_id: t.String({ description: "Subscription id on the chain (uint256, decimal)" }),
  module_address: t.String({ description: "Subscription module contract (lowercase)" }),
  user_address: t.String({ description: "Subscriber wallet (lowercase)" }),
  plan_id: t.String({ description: "`<chain_id>:<module>:<plan_id>`" }),
  status: SubscriptionStatusSchema,
  total_spent: t.String({ description: "Cumulative amount charged, token base units (decimal)" }),
  times_executed: t.Integer({ description: "Successful payment executions" }),
  next_charge_date: t.Union([t.String({ format: "date-time" }), t.Null()], {
    description:
      "Next scheduled charge; null when none is queued (cancelled, paused, blocked, or every execution used). " +
      "May lie in the past (PENDING or EXPIRED).",
  }),
  expires_at: t.Union([t.String(), t.Null()], {
    description: "Token-allowance expiry in unix seconds (decimal string); null when it never expires",
  }),
  remaining_executions: t.Union([t.Integer(), t.Null()], { description: "Executions left; null means unlimited" }),
  created_at: t.String({ format: "date-time", description: "Block timestamp of the subscription" }),
  is_blocked: t.Boolean({ description: "Whether the merchant has blocked the subscriber on this module" }),
  renewal: t.Union([RenewalSchema, t.Null()], {
    description: "The renewal outlook of the next charge (see `GET /v0/renewals/{merchant}`); null when none",
  }),
  source: t.Union([t.Literal("subscription_module"), t.Literal("spend_permission")], {
    description: "The protocol's module allocation, or a Base Spend Permission (keyed by its hash)",
  }),
  spend_permission: t.Union([SpendPermissionSchema, t.Null()], {
    description: "The permission's own fields; null on module records",
  }),
});

/** A subscription record. */
export type SubscriptionRecord = Static<typeof SubscriptionRecord>;

const example: SubscriptionRecord = {
  allocation_id: "31337:0xa16e02e87b7454126e5e10d957a927a7f5b5d2be:1",
  on_chain_id: "1",
  module_address: "0xa16e02e87b7454126e5e10d957a927a7f5b5d2be",
  user_address: "0x3c44cdddb6a900fa2b585dd299e03d12fa4293bc",
  plan_id: "31337:0xa16e02e87b7454126e5e10d957a927a7f5b5d2be:1",
  status: "ACTIVE",
  total_spent: "30000000",
  times_executed: 3,
  next_charge_date: "2026-12-20T10:00:00.000Z",
  expires_at: "1798761600",
  remaining_executions: 9,
  created_at: "2026-09-21T10:00:00.000Z",
  is_blocked: false,
  renewal: {
    ...renewalExample,
    due_at: "2026-12-20T10:00:00.000Z",
    outlook: "will_renew",
    reason: null,
    shortfall: "0",
  },
  source: "subscription_module",
  spend_permission: null,
};

/** A subscription record plus the decimals of its plan's token (null when unknown), for the CSV. */
export type SubscriptionCsvRow = SubscriptionRecord & { token_decimals: number | null };

const FIELDS = [
  "allocation_id",
  "on_chain_id",
  "module_address",
  "user_address",
  "plan_id",
  "status",
  "total_spent",
  "times_executed",
  "next_charge_date",
  "expires_at",
  "remaining_executions",
  "created_at",
  "is_blocked",
  "source",
] as const;

/** The CSV columns of a subscription: the JSON fields, then `total_spent` in token units (exact decimal). */
export const SUBSCRIPTION_CSV_COLUMNS: readonly CsvColumn<SubscriptionCsvRow>[] = [
  ...fieldColumns<SubscriptionCsvRow>(FIELDS),
  { name: "total_spent_decimal", value: (r) => formatUnits(r.total_spent, r.token_decimals) },
];

/** Query of the list route (documentation only; parsed in index.ts). */
export const ListQueryDoc = t.Object({
  format: t.Optional(FormatParamDoc),
  chain_id: t.Optional(ParamDocs.chainId),
  status: t.Optional(
    documented(
      t.Union(
        SUBSCRIPTION_STATUSES.map((s) => t.Literal(s)),
        { description: "Only subscriptions with this computed status" },
      ),
    ),
  ),
  source: t.Optional(
    documented(
      t.Union([t.Literal("subscription_module"), t.Literal("spend_permission")], {
        description: "Only module allocations, or only Base Spend Permissions",
      }),
    ),
  ),
  limit: t.Optional(ParamDocs.limit),
  starting_after: t.Optional(
    documented(
      t.String({
        description: "An allocation_id: the page starts right after it (creation order).",
        examples: ["31337:0xa16e02e87b7454126e5e10d957a927a7f5b5d2be:1"],
      }),
    ),
  ),
});

/** Query of the single-subscription route. */
export const GetQueryDoc = t.Object({ chain_id: t.Optional(ParamDocs.chainId) });

/** Path of the list route. */
export const ListParamsDoc = t.Object({ merchant: ParamDocs.merchant });

/** Path of the single-subscription route. */
export const GetParamsDoc = t.Object({
  merchant: ParamDocs.merchant,
  id: documented(
    t.String({
      pattern: "^([0-9]{1,78}|0x[0-9a-fA-F]{64})$",
      description: "On-chain subscription id (decimal uint256), or a spend permission's hash (0x + 64 hex)",
      examples: ["1"],
    }),
  ),
});

/** OpenAPI detail of `GET /v0/subscriptions/:merchant`. */
export const listDetail = {
  tags: ["subscriptions"],
  summary: "List subscriptions",
  description:
    "Every subscription allocation on the modules the merchant owns, oldest first (creation block and log " +
    "index), with the status computed at query time. Filter by `status`; page with `limit` and `starting_after`.",
  security: [{ bearer: [] }],
  responses: withCsvContent(
    responses(
      {
        description: "Subscription records (an empty array when the merchant has none)",
        schema: t.Array(SubscriptionRecord),
        example: [example],
        link: true,
      },
      [400, 401, 403, 503],
    ),
    csvText(SUBSCRIPTION_CSV_COLUMNS, [{ ...example, token_decimals: 6 }]),
  ),
};

/** OpenAPI detail of `GET /v0/subscriptions/:merchant/:id`. */
export const getDetail = {
  tags: ["subscriptions"],
  summary: "Get a subscription",
  description:
    "One subscription by its on-chain id, on `chain_id` (default: the indexed chain). 404 when it does not exist " +
    "or belongs to another merchant's module.",
  security: [{ bearer: [] }],
  responses: responses(
    { description: "The subscription record", schema: SubscriptionRecord, example },
    [400, 401, 403, 404, 503],
    {
      400: { message: "id must be a decimal integer from 0 to 2^256 - 1", param: "id" },
      404: {
        description: "No subscription with this id on the merchant's modules on that chain.",
        message: "no subscription 99 of this merchant on chain 31337",
        param: "id",
      },
    },
  ),
};
