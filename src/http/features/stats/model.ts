/** The stats response and the documentation of `GET /v0/stats/:merchant`. */
import { Type as t, type Static } from "@sinclair/typebox";
import { documented, ParamDocs } from "../../params";
import { responses } from "../docs";
import { SUBSCRIPTION_STATUSES } from "../../../domain/status";
import { FAILURE_REASONS } from "../../../domain/failure-reasons";

/** Period lengths. */
export const STATS_INTERVALS = ["day", "week", "month"] as const;

/** A period length: UTC day, ISO week (from Monday) or calendar month. */
export type StatsInterval = (typeof STATS_INTERVALS)[number];

const periodStart = t.String({ format: "date-time", description: "Start of the UTC period (ISO 8601, ms)" });
const tokenFields = {
  token: t.Union([t.String(), t.Null()], { description: "Token contract (lowercase); null when unknown" }),
  currency: t.Union([t.String(), t.Null()], { description: "Token symbol; null when the token has none" }),
  token_decimals: t.Union([t.Integer(), t.Null()], { description: "Token decimals; null when the token has none" }),
};
const amount = (description: string) => t.String({ pattern: "^[0-9]+$", description });

/** The body of `GET /v0/stats/:merchant`. */
const renewalFigure = (description: string) =>
  t.Object(
    {
      count: t.Integer({ description: "How many charges" }),
      amount: t.String({ description: "Their sum, token base units (decimal)" }),
    },
    { description },
  );

export const StatsResponse = t.Object({
  merchant: t.String({ description: "The merchant (lowercase)" }),
  chain_id: t.Integer({ description: "The chain read" }),
  interval: t.Union(
    STATS_INTERVALS.map((v) => t.Literal(v)),
    { description: "Period length" },
  ),
  since: t.String({ format: "date-time", description: "Start of the first period (inclusive)" }),
  until: t.String({ format: "date-time", description: "End of the last period (exclusive)" }),
  now: t.String({
    format: "date-time",
    description: "The instant statuses and the run rate were computed at: the later of the clock and the indexed block",
  }),
  token: t.Union([t.String(), t.Null()], { description: "The token filter as sent, or null" }),
  periods: t.Array(periodStart, { description: "Every period of the range, oldest first (also those without data)" }),
  revenue: t.Array(
    t.Object({
      period_start: periodStart,
      ...tokenFields,
      gross: amount("Sum of the charges' amount_charged, token base units"),
      fees: amount("Sum of the charges' fee_paid (protocol fees), token base units"),
      net: amount("gross − fees"),
      charges: t.Integer({ description: "Number of successful charges" }),
    }),
    { description: "Successful charges per period and token; periods without charges are left out" },
  ),
  failures: t.Array(
    t.Object({
      period_start: periodStart,
      reason: t.Union([...FAILURE_REASONS.map((v) => t.Literal(v)), t.String()], { description: "Failure reason" }),
      count: t.Integer({ description: "Failed charges" }),
    }),
    { description: "Failed charges per period and reason; empty periods are left out" },
  ),
  subscriptions: t.Object({
    by_status: t.Object(Object.fromEntries(SUBSCRIPTION_STATUSES.map((s) => [s, t.Integer({ minimum: 0 })])), {
      description: "Subscriptions by status now (every status, zeros included)",
    }),
    periods: t.Array(
      t.Object({
        period_start: periodStart,
        created: t.Integer({ description: "Subscriptions created in the period" }),
        cancelled: t.Integer({ description: "Subscriptions cancelled in the period" }),
      }),
      { description: "Periods with at least one creation or cancellation" },
    ),
  }),
  run_rate: t.Array(
    t.Object({
      ...tokenFields,
      amount_per_30d: amount(
        "Σ over ACTIVE subscriptions of floor(plan amount × 2,592,000 ÷ plan interval in seconds), base units",
      ),
      active_subscriptions: t.Integer({ description: "ACTIVE subscriptions in this token" }),
    }),
    { description: "What the ACTIVE subscriptions bring in per 30 days, per token" },
  ),
  renewals: t.Array(
    t.Object({
      ...tokenFields,
      due: renewalFigure("Charges due within the horizon (RENEWAL_HORIZON_S) or past due, with an outlook"),
      will_renew: renewalFigure("Of them, those that will renew"),
      at_risk: t.Composite([
        renewalFigure("Of them, those at risk"),
        t.Object({
          by_reason: t.Object({
            AllowanceExpired: renewalFigure("At risk: the allowance expires before the charge"),
            InsufficientAllowance: renewalFigure("At risk: the allowance to the processor is too small"),
            InsufficientBalance: renewalFigure("At risk: the balance is too small"),
            ManagerNotOwner: renewalFigure(
              "At risk: a spend permission's manager is no longer an owner of the subscriber's smart account",
            ),
          }),
        }),
      ]),
    }),
    { description: "Renewal outlooks of the charges due within the horizon, per token (see GET /v0/renewals)" },
  ),
});

/** The stats response. */
export type StatsResponse = Static<typeof StatsResponse>;

const USDC = "0x5fbdb2315678afecb367f032d93f642f64180aa3";
const example: StatsResponse = {
  merchant: "0x70997970c51812dc3a010c7d01b50e0d17dc79c8",
  chain_id: 31337,
  interval: "month",
  since: "2026-10-01T00:00:00.000Z",
  until: "2027-01-01T00:00:00.000Z",
  now: "2026-12-22T14:34:25.000Z",
  token: "USDC",
  periods: ["2026-10-01T00:00:00.000Z", "2026-11-01T00:00:00.000Z", "2026-12-01T00:00:00.000Z"],
  revenue: [
    {
      period_start: "2026-11-01T00:00:00.000Z",
      token: USDC,
      currency: "USDC",
      token_decimals: 6,
      gross: "69930000",
      fees: "699300",
      net: "69230700",
      charges: 7,
    },
    {
      period_start: "2026-12-01T00:00:00.000Z",
      token: USDC,
      currency: "USDC",
      token_decimals: 6,
      gross: "49950000",
      fees: "499500",
      net: "49450500",
      charges: 5,
    },
  ],
  failures: [
    { period_start: "2026-12-01T00:00:00.000Z", reason: "AllowanceExpired", count: 1 },
    { period_start: "2026-12-01T00:00:00.000Z", reason: "InsufficientAllowance", count: 1 },
  ],
  subscriptions: {
    by_status: { BLOCKED: 0, CANCELLED: 2, PAUSED: 1, PENDING: 2, EXPIRED: 1, ACTIVE: 5 },
    periods: [
      { period_start: "2026-11-01T00:00:00.000Z", created: 9, cancelled: 2 },
      { period_start: "2026-12-01T00:00:00.000Z", created: 3, cancelled: 0 },
    ],
  },
  run_rate: [{ token: USDC, currency: "USDC", token_decimals: 6, amount_per_30d: "49950000", active_subscriptions: 5 }],
  renewals: [
    {
      token: USDC,
      currency: "USDC",
      token_decimals: 6,
      due: { count: 5, amount: "49950000" },
      will_renew: { count: 4, amount: "39960000" },
      at_risk: {
        count: 1,
        amount: "9990000",
        by_reason: {
          AllowanceExpired: { count: 0, amount: "0" },
          InsufficientAllowance: { count: 0, amount: "0" },
          InsufficientBalance: { count: 1, amount: "9990000" },
          ManagerNotOwner: { count: 0, amount: "0" },
        },
      },
    },
  ],
};

/** Path of the route. */
export const StatsParamsDoc = t.Object({ merchant: ParamDocs.merchant });

const dateTime = (description: string, example: string) =>
  documented(t.String({ format: "date-time", description, examples: [example] }));

/** Query of the route. */
export const StatsQueryDoc = t.Object({
  chain_id: t.Optional(ParamDocs.chainId),
  interval: t.Optional(
    documented(
      t.Union(
        STATS_INTERVALS.map((v) => t.Literal(v)),
        {
          default: "day",
          description:
            "Period length: `day` (UTC), `week` (ISO week, from Monday 00:00 UTC) or `month` (calendar month, UTC).",
        },
      ),
    ),
  ),
  since: t.Optional(
    dateTime(
      "Start of the range, rounded down to its period's start. Default: 30 days, 13 weeks or 12 months before " +
        "`until` (the current period included). Any ISO 8601 date-time.",
      "2026-01-01T00:00:00Z",
    ),
  ),
  until: t.Optional(
    dateTime(
      "End of the range (exclusive), rounded up to a period boundary. Default: the end of the current period " +
        '("now" is the later of the clock and the newest indexed block). At most 1000 periods per request.',
      "2027-01-01T00:00:00Z",
    ),
  ),
  token: t.Optional(
    documented(
      t.String({
        minLength: 1,
        maxLength: 64,
        description:
          "Token symbol, exact and case-insensitive: revenue, failures, subscriptions (by their plan's token) and run rate.",
        examples: ["USDC"],
      }),
    ),
  ),
});

/** OpenAPI detail of the route. */
export const statsDetail = {
  tags: ["stats"],
  summary: "Merchant statistics",
  description:
    "Revenue (gross, fees, net, charges) per period and token, failures per period and reason, subscriptions by " +
    "status now and created/cancelled per period, and the run rate of ACTIVE subscriptions. Periods are UTC-aligned. " +
    "Amounts are exact decimal strings in token base units, equal to summing the activity and subscriptions routes.",
  security: [{ bearer: [] }],
  responses: responses({ description: "Statistics", schema: StatsResponse, example }, [400, 401, 403, 503]),
};
