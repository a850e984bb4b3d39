/** Responses and documentation of the MRR routes (analytics.md §5): `/v0/stats/:merchant/mrr`, its movements, cohorts. */
import { Type as t, type Static } from "@sinclair/typebox";
import { documented } from "../../params";
import { responses } from "../docs";
import { CHURN_REASONS, MOVEMENT_KINDS } from "../../../domain/mrr";
import { STATS_INTERVALS, StatsQueryDoc } from "../stats/model";
import { FormatParamDoc, withCsvContent } from "../../stream";

const instant = (description: string) => t.String({ format: "date-time", description });
const units = (description: string) => t.String({ pattern: "^-?[0-9]+$", description });
const ratio = (description: string) =>
  t.Union([t.String({ pattern: "^-?[0-9]+\\.[0-9]{6}$" }), t.Null()], {
    description: `${description}; 6 fractional digits, rounded half to even; null when the denominator is 0`,
  });
const tokenFields = {
  token: t.String({ description: "Token contract (lowercase)" }),
  currency: t.Union([t.String(), t.Null()], { description: "Token symbol; null when the token has none" }),
  token_decimals: t.Union([t.Integer(), t.Null()], { description: "Token decimals; null when the token has none" }),
};
const figure = (description: string) =>
  t.Object(
    {
      count: t.Integer({ minimum: 0, description: "How many movements" }),
      amount: units("Sum of their amounts (after − before), token base units, signed"),
    },
    { description },
  );
const header = {
  merchant: t.String({ description: "The merchant (lowercase)" }),
  chain_id: t.Integer({ description: "The chain read" }),
  interval: t.Union(
    STATS_INTERVALS.map((v) => t.Literal(v)),
    { description: "Period length (UTC)" },
  ),
  since: instant("Start of the first period"),
  until: instant("End of the last period"),
  now: instant("The instant the current figures are computed at: the later of the clock and the indexed block"),
};

/** Movement counts and sums of one period, by kind. */
const Movements = t.Object(
  Object.fromEntries(MOVEMENT_KINDS.map((k) => [k, figure(`\`${k}\` movements in the period`)])) as Record<
    (typeof MOVEMENT_KINDS)[number],
    ReturnType<typeof figure>
  >,
);

/** Churn movements of one period by reason (every reason, zeros included). */
const ChurnByReason = t.Object(
  Object.fromEntries(CHURN_REASONS.map((r) => [r, figure(`Churn movements with reason \`${r}\``)])) as Record<
    (typeof CHURN_REASONS)[number],
    ReturnType<typeof figure>
  >,
);

/** One period of the MRR response. */
export const MrrPeriod = t.Object({
  period_start: instant("Start of the UTC period; the period holds the instants in (period_start, next start]"),
  mrr_start: units("The merchant's MRR at period_start"),
  mrr_end: units("The merchant's MRR at the period's end (= mrr_start + Σ movement amounts of the period)"),
  movements: Movements,
  churn_by_reason: ChurnByReason,
  recovered: figure("Reactivations within 30 days of an involuntary churn of the same customer"),
  customers_start: t.Integer({ minimum: 0, description: "Customers with MRR > 0 at period_start" }),
  new_customers: t.Integer({ minimum: 0, description: "`new` movements in the period" }),
  churned_customers: t.Integer({ minimum: 0, description: "Customers with a churn movement (counted once)" }),
  subscriber_churn_rate: ratio("churned_customers ÷ (customers_start + new_customers)"),
  gross_revenue_churn: ratio("(−Σ contraction − Σ churn) ÷ mrr_start"),
  nrr: ratio(
    "Net revenue retention: (mrr_start + Σ expansion + Σ contraction + Σ churn of customers with MRR > 0 at the start) ÷ mrr_start",
  ),
  grr: ratio("Gross revenue retention: as nrr without expansion"),
});

/** The body of `GET /v0/stats/:merchant/mrr`. */
export const MrrResponse = t.Object({
  ...header,
  tokens: t.Array(
    t.Object({
      ...tokenFields,
      mrr: units("MRR now: Σ over ACTIVE allocations of floor(amount × 2,629,800 ÷ interval_s), base units"),
      arr: units("12 × mrr"),
      arpa: units("mrr ÷ customers (floor); 0 without customers"),
      customers: t.Integer({ minimum: 0, description: "Customers (wallets in this token) with MRR > 0 now" }),
      ltv: t.Union(
        [units("arpa ÷ the mean subscriber churn rate of the last three complete periods (floor)"), t.Null()],
        {
          description: "Lifetime value; null when that mean churn rate is 0",
        },
      ),
      periods: t.Array(MrrPeriod, { description: "Every period of the range, oldest first (zeros included)" }),
    }),
    { description: "One entry per token the merchant ever had MRR in (figures of different tokens are never added)" },
  ),
});
export type MrrResponse = Static<typeof MrrResponse>;
export type MrrPeriod = Static<typeof MrrPeriod>;

/** One movement record. */
export const MovementRecord = t.Object({
  id: t.String({ description: "Movement id (`mov_` + 40 hex digits): the same fact on the same chain, the same id" }),
  at: instant("The instant (a block's timestamp, or an expiry's computed instant)"),
  block_number: t.String({
    pattern: "^[0-9]+$",
    description: "The block it belongs to (an expiry: the first block at or after it)",
  }),
  customer: t.String({ description: "Subscriber wallet (lowercase)" }),
  ...tokenFields,
  kind: t.Union(
    MOVEMENT_KINDS.map((k) => t.Literal(k)),
    { description: "new, expansion, contraction, churn or reactivation" },
  ),
  mrr_before: units("The customer's MRR just before"),
  mrr_after: units("The customer's MRR just after"),
  amount: units("mrr_after − mrr_before (negative for contraction and churn)"),
  reason: t.Union([t.String(), t.Null()], {
    description: `Churn and contraction only: ${CHURN_REASONS.join(", ")}, or plan_change for a contraction`,
  }),
  recovered: t.Boolean({ description: "A reactivation within 30 days of an involuntary churn of the same customer" }),
  allocation_ids: t.Array(t.String(), {
    description:
      "Allocations that entered or left ACTIVE at this instant: `<chain_id>:<module>:<subscription_id>`, or for a " +
      "Spend Permission `<chain_id>:<manager>:<hash>`",
  }),
});
export type MovementRecord = Static<typeof MovementRecord>;

/** The body of `GET /v0/stats/:merchant/cohorts`. */
export const CohortsResponse = t.Object({
  ...header,
  tokens: t.Array(
    t.Object({
      ...tokenFields,
      cohorts: t.Array(
        t.Object({
          cohort_start: instant("The period of the customers' first `new` movement"),
          size: t.Integer({ minimum: 0, description: "Customers in the cohort" }),
          mrr_start: units("The cohort's MRR at the end of period 0"),
          periods: t.Array(
            t.Object({
              n: t.Integer({ minimum: 0, description: "Periods since the cohort's own (0)" }),
              customers: t.Integer({
                minimum: 0,
                description: "Of the cohort, customers with MRR > 0 at the end of period n",
              }),
              mrr: units("The cohort's MRR at the end of period n"),
              customer_retention: ratio("customers ÷ size"),
              revenue_retention: ratio("mrr ÷ mrr_start"),
            }),
          ),
        }),
      ),
    }),
  ),
});
export type CohortsResponse = Static<typeof CohortsResponse>;

const USDC = "0x5fbdb2315678afecb367f032d93f642f64180aa3";
const zero = { count: 0, amount: "0" };
const examplePeriod: MrrPeriod = {
  period_start: "2026-11-01T00:00:00.000Z",
  mrr_start: "40000000",
  mrr_end: "49990000",
  movements: {
    new: { count: 2, amount: "20000000" },
    expansion: { count: 1, amount: "5000000" },
    contraction: { count: 1, amount: "-2010000" },
    churn: { count: 2, amount: "-18000000" },
    reactivation: { count: 1, amount: "5000000" },
  },
  churn_by_reason: {
    ...(Object.fromEntries(CHURN_REASONS.map((r) => [r, zero])) as MrrPeriod["churn_by_reason"]),
    cancelled_by_subscriber: { count: 1, amount: "-10000000" },
    InsufficientBalance: { count: 1, amount: "-8000000" },
  },
  recovered: { count: 1, amount: "5000000" },
  customers_start: 8,
  new_customers: 2,
  churned_customers: 2,
  subscriber_churn_rate: "0.200000",
  gross_revenue_churn: "0.500250",
  nrr: "0.624750",
  grr: "0.499750",
};
const example: MrrResponse = {
  merchant: "0x70997970c51812dc3a010c7d01b50e0d17dc79c8",
  chain_id: 31337,
  interval: "month",
  since: "2026-11-01T00:00:00.000Z",
  until: "2026-12-01T00:00:00.000Z",
  now: "2026-11-29T06:00:00.000Z",
  tokens: [
    {
      token: USDC,
      currency: "USDC",
      token_decimals: 6,
      mrr: "49990000",
      arr: "599880000",
      arpa: "5554444",
      customers: 9,
      ltv: "27772220",
      periods: [examplePeriod],
    },
  ],
};
const exampleMovement: MovementRecord = {
  id: "mov_3f1c9a0b7d2e4c6a8b0d1e2f3a4b5c6d7e8f9a0b",
  at: "2026-11-20T10:00:01.000Z",
  block_number: "1234",
  customer: "0x90f79bf6eb2c4f870365e785982e1f101e93b906",
  token: USDC,
  currency: "USDC",
  token_decimals: 6,
  kind: "churn",
  mrr_before: "8000000",
  mrr_after: "0",
  amount: "-8000000",
  reason: "InsufficientBalance",
  recovered: false,
  allocation_ids: ["31337:0xa16e02e87b7454126e5e10d957a927a7f5b5d2be:7"],
};
const exampleCohorts: CohortsResponse = {
  ...example,
  tokens: [
    {
      token: USDC,
      currency: "USDC",
      token_decimals: 6,
      cohorts: [
        {
          cohort_start: "2026-11-01T00:00:00.000Z",
          size: 4,
          mrr_start: "40000000",
          periods: [
            { n: 0, customers: 4, mrr: "40000000", customer_retention: "1.000000", revenue_retention: "1.000000" },
          ],
        },
      ],
    },
  ],
};

/** Query of the MRR route (the `/v0/stats` query). */
export const MrrQueryDoc = StatsQueryDoc;

/** Query of the cohorts route. */
export const CohortsQueryDoc = t.Object({
  ...StatsQueryDoc.properties,
  interval: t.Optional(
    documented(
      t.Union([t.Literal("month"), t.Literal("week")], {
        default: "month",
        description: "Cohort and period length: calendar month (default) or ISO week, UTC.",
      }),
    ),
  ),
});

/** Query of the movements route. */
export const MovementsQueryDoc = t.Object({
  chain_id: StatsQueryDoc.properties.chain_id,
  token: StatsQueryDoc.properties.token,
  since: StatsQueryDoc.properties.since,
  until: StatsQueryDoc.properties.until,
  kind: t.Optional(
    documented(
      t.Union(
        MOVEMENT_KINDS.map((k) => t.Literal(k)),
        { description: "Only movements of this kind." },
      ),
    ),
  ),
  limit: t.Optional(
    documented(t.Integer({ minimum: 1, maximum: 1000, default: 100, description: "Page size (default 100)." })),
  ),
  starting_after: t.Optional(
    documented(
      t.String({
        description: "A movement id: the page starts with the movement after it (newest first).",
        examples: [exampleMovement.id],
      }),
    ),
  ),
  format: t.Optional(FormatParamDoc),
});

const csvExample =
  "id,at,block_number,customer,token,currency,token_decimals,kind,mrr_before,mrr_after,amount,reason,recovered,allocation_ids\r\n" +
  `${exampleMovement.id},2026-11-20T10:00:01.000Z,1234,${exampleMovement.customer},${USDC},USDC,6,churn,8000000,0,'-8000000,InsufficientBalance,false,${exampleMovement.allocation_ids[0]}\r\n`;

/** OpenAPI details of the three routes. */
export const details = {
  mrr: {
    tags: ["stats"],
    operationId: "getMrr",
    summary: "MRR, movements and rates per period",
    description:
      "Per token: MRR, ARR, ARPA, customers and LTV now, and for every period of the range the MRR at its start and " +
      "end, movements by kind (new, expansion, contraction, churn, reactivation), churn by reason, recovered " +
      "revenue, subscriber churn rate, gross revenue churn, NRR and GRR. Exact, from the status timeline of the chain.",
    security: [{ bearer: [] }],
    responses: responses({ description: "MRR figures", schema: MrrResponse, example }, [400, 401, 403, 503]),
  },
  movements: {
    tags: ["stats"],
    operationId: "listMrrMovements",
    summary: "MRR movements",
    description:
      "One record per customer and instant at which its MRR changed, newest first, paged with `starting_after` " +
      "(a `Link` header names the next page); `format=csv` gives Stripe's MRR changes report.",
    security: [{ bearer: [] }],
    responses: withCsvContent(
      responses(
        { description: "Movements", schema: t.Array(MovementRecord), example: [exampleMovement], link: true },
        [400, 401, 403, 503],
      ),
      csvExample,
    ),
  },
  cohorts: {
    tags: ["stats"],
    operationId: "getCohorts",
    summary: "Cohort retention",
    description:
      "Customers grouped by the period of their first `new` movement; for each later period, the customers still " +
      "with MRR > 0 and their MRR at its end, with customer and revenue retention.",
    security: [{ bearer: [] }],
    responses: responses(
      { description: "Cohorts", schema: CohortsResponse, example: exampleCohorts },
      [400, 401, 403, 503],
    ),
  },
};
