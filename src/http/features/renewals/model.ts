/** The renewal outlook object and list item (renewals.md §2, §5), and the documentation of the renewals route. */
import { Type as t, type Static } from "@sinclair/typebox";
import { documented, ParamDocs } from "../../params";
import { responses } from "../docs";
import { csvText, fieldColumns, formatUnits, type CsvColumn } from "../../csv";
import { FormatParamDoc, withCsvContent } from "../../stream";

/** The outlooks and reasons. */
export const RENEWAL_OUTLOOKS = ["will_renew", "at_risk"] as const;
export const RENEWAL_REASONS = [
  "AllowanceExpired",
  "InsufficientAllowance",
  "InsufficientBalance",
  "ManagerNotOwner",
] as const;

const amount = (description: string) => t.String({ description: `${description}, token base units (decimal)` });

/** The outlook object. */
export const RenewalSchema = t.Object(
  {
    due_at: t.String({
      format: "date-time",
      description: "The due instant judged: the later of next_charge_date and checked_at",
    }),
    outlook: t.Union(RENEWAL_OUTLOOKS.map((o) => t.Literal(o))),
    reason: t.Union([...RENEWAL_REASONS.map((r) => t.Literal(r)), t.Null()], {
      description:
        "Why the charge will fail, in the contract's order of checks; null when it will renew. ManagerNotOwner: a " +
        "spend permission's manager is no longer an owner of the subscriber's smart account",
    }),
    amount: amount("The charge"),
    currency: t.Union([t.String(), t.Null()], { description: "Token symbol" }),
    token_decimals: t.Union([t.Integer(), t.Null()]),
    balance: amount("The subscriber's balance at checked_block, before its earlier charges in the horizon"),
    allowance: amount(
      "Its allowance to the processor at checked_block, before its earlier charges; for a spend permission, the period's allowance",
    ),
    credit: amount("The subscription's prepaid credit at checked_block (0 for a spend permission)"),
    shortfall: amount(
      "How much more of the limiting resource the charge needs after the earlier charges (0 when it will renew; the full amount for AllowanceExpired and ManagerNotOwner)",
    ),
    checked_block: t.String({ description: "The block every read of the evaluation was pinned to (decimal)" }),
    checked_at: t.String({ format: "date-time", description: "That block's timestamp" }),
  },
  {
    description:
      "The renewal outlook: what the next charge will do, judged from the chain before it happens. A forecast: the " +
      "subscriber can still change it. Null when the subscription is not chargeable or not due within the horizon.",
  },
);

/** An outlook object. */
export type Renewal = Static<typeof RenewalSchema>;

/** An example outlook (renewals.md §2). */
export const renewalExample: Renewal = {
  due_at: "2026-12-01T10:00:00.000Z",
  outlook: "at_risk",
  reason: "InsufficientBalance",
  amount: "9990000",
  currency: "USDC",
  token_decimals: 6,
  balance: "4200000",
  allowance: "115792089237316195423570985008687907853269984665640564039457584007913129639935",
  credit: "0",
  shortfall: "5790000",
  checked_block: "18422011",
  checked_at: "2026-11-28T09:12:44.000Z",
};

/** One item of the renewals list. */
export const RenewalItem = t.Composite([
  t.Object({
    allocation_id: t.String({
      description: "`<chain_id>:<module>:<subscription_id>` (a spend permission: `<chain_id>:<manager>:<hash>`)",
    }),
    on_chain_id: t.String({ description: "Subscription id on the chain (decimal), or a spend permission's hash" }),
    module_address: t.String(),
    user_address: t.String({ description: "Subscriber wallet (lowercase)" }),
    plan_id: t.String({
      description:
        "`<chain_id>:<module>:<plan_id>` (a spend permission: `<chain_id>:<manager>:<spender>:<token>:<allowance>:<period>`)",
    }),
  }),
  RenewalSchema,
]);

/** A renewals list item. */
export type RenewalItem = Static<typeof RenewalItem>;

const itemExample: RenewalItem = {
  allocation_id: "31337:0xa16e02e87b7454126e5e10d957a927a7f5b5d2be:7",
  on_chain_id: "7",
  module_address: "0xa16e02e87b7454126e5e10d957a927a7f5b5d2be",
  user_address: "0x90f79bf6eb2c4f870365e785982e1f101e93b906",
  plan_id: "31337:0xa16e02e87b7454126e5e10d957a927a7f5b5d2be:1",
  ...renewalExample,
};

const FIELDS = [
  "allocation_id",
  "on_chain_id",
  "module_address",
  "user_address",
  "plan_id",
  "due_at",
  "outlook",
  "reason",
  "amount",
  "currency",
  "token_decimals",
  "balance",
  "allowance",
  "credit",
  "shortfall",
  "checked_block",
  "checked_at",
] as const;

/** The CSV columns: the JSON fields, then the amount and shortfall in token units (exact decimals). */
export const RENEWAL_CSV_COLUMNS: readonly CsvColumn<RenewalItem>[] = [
  ...fieldColumns<RenewalItem>(FIELDS),
  { name: "amount_decimal", value: (r) => formatUnits(r.amount, r.token_decimals) },
  { name: "shortfall_decimal", value: (r) => formatUnits(r.shortfall, r.token_decimals) },
];

/** Query of the list route (documentation only; parsed in index.ts). */
export const ListQueryDoc = t.Object({
  format: t.Optional(FormatParamDoc),
  chain_id: t.Optional(ParamDocs.chainId),
  outlook: t.Optional(
    documented(
      t.Union(
        RENEWAL_OUTLOOKS.map((o) => t.Literal(o)),
        { description: "Only this outlook" },
      ),
    ),
  ),
  reason: t.Optional(
    documented(
      t.Union(
        RENEWAL_REASONS.map((r) => t.Literal(r)),
        { description: "Only renewals at risk for this reason (implies outlook=at_risk)" },
      ),
    ),
  ),
  due_before: t.Optional(
    documented(
      t.String({
        format: "date-time",
        description: "Only renewals due before this instant (ISO 8601)",
        examples: ["2026-12-01T00:00:00Z"],
      }),
    ),
  ),
  token: t.Optional(
    documented(t.String({ description: "Token symbol, exact and case-insensitive", examples: ["USDC"] })),
  ),
  limit: t.Optional(ParamDocs.limit),
  starting_after: t.Optional(
    documented(
      t.String({
        description: "An allocation_id: the page starts right after it (order: due_at, then on-chain id).",
        examples: ["31337:0xa16e02e87b7454126e5e10d957a927a7f5b5d2be:7"],
      }),
    ),
  ),
});

/** Path of the list route. */
export const ListParamsDoc = t.Object({ merchant: ParamDocs.merchant });

/** OpenAPI detail of `GET /v0/renewals/:merchant`. */
export const listDetail = {
  tags: ["renewals"],
  summary: "List renewal outlooks",
  description:
    "The renewal outlook of every chargeable subscription of the merchant due within the horizon " +
    "(`RENEWAL_HORIZON_S`, 7 days by default) or past due: whether its next charge will succeed, judged from the " +
    "subscriber's balance, allowance, allowance expiry and prepaid credit at `checked_block`, in the contract's " +
    "order of checks, one wallet's charges in a token sharing its funds in due order. Spend permissions the " +
    "merchant is the spender of are listed too (checks: the manager still owns the account, then the balance). " +
    "Ordered by `due_at`, then on-chain id as a number. Filter by `outlook`, `reason`, `due_before`, `token`; page " +
    "with `limit` and `starting_after`.",
  security: [{ bearer: [] }],
  responses: withCsvContent(
    responses(
      {
        description: "Outlooks (an empty array when none is due)",
        schema: t.Array(RenewalItem),
        example: [itemExample],
        link: true,
      },
      [400, 401, 403, 503],
      {
        400: {
          message:
            "reason must be one of AllowanceExpired, InsufficientAllowance, InsufficientBalance, ManagerNotOwner",
          param: "reason",
        },
      },
    ),
    csvText(RENEWAL_CSV_COLUMNS, [itemExample]),
  ),
};
