/** Authorization check result (docs/api-rules.md "Records") and the documentation of `GET /v0/auth/check`. */
import { Type as t, type Static } from "@sinclair/typebox";
import { documented, ParamDocs } from "../../params";
import { errorEnvelopeWith, responses } from "../docs";
import { SubscriptionStatusSchema } from "../subscriptions/model";

/** Check modes. */
export const CHECK_MODES = ["indexed", "onchain", "both"] as const;

/** One allocation of the wallet for a requested plan. */
export const CheckDetail = t.Object({
  allocation_id: t.String({ description: "`<chain_id>:<module>:<subscription_id>`" }),
  plan_id_on_chain: t.String({ description: "On-chain uint32 plan id (decimal)" }),
  status: SubscriptionStatusSchema,
  next_charge_date: t.Union([t.String({ format: "date-time" }), t.Null()], {
    description: "Next scheduled charge (ISO 8601); null when none is queued",
  }),
  times_executed: t.Integer({ description: "Successful payment executions" }),
  is_subscribed: t.Optional(
    t.Boolean({ description: "Spend permissions only: not revoked and start <= now < end (Base SDK's isSubscribed)" }),
  ),
});

/** The index's answer. */
export const IndexedResult = t.Object({
  authorized: t.Boolean({ description: "Some requested plan has an ACTIVE allocation" }),
  matching_plan_ids: t.Array(t.String(), {
    description: "Requested plan ids whose allocation is ACTIVE, in request order",
  }),
  details: t.Array(CheckDetail, {
    description:
      "Every allocation of the wallet on this module for the requested plans, whatever its status, newest first",
  }),
  indexed_block: t.Union([t.String(), t.Null()], {
    description: "Newest block of the chain the index had committed when it answered (null before the first batch)",
  }),
  valid_until: t.Union([t.String({ format: "date-time" }), t.Null()], {
    description:
      "The instant this answer stops being true with no new event: the earliest expiry " +
      "(last_paid_at + interval + grace_period + 1 s) of the ACTIVE allocations among the requested plans. A cache " +
      "may keep the answer until then, unless a webhook (subscription.*, event.reverted) says otherwise. Null when " +
      "no allocation is ACTIVE.",
    examples: ["2026-12-21T10:00:01.000Z"],
  }),
});

/** The contract's answer. */
export const OnchainResult = t.Object({
  authorized: t.Boolean({ description: "The contract's answer" }),
  method: t.Union([t.Literal("isActive"), t.Literal("isActiveAny"), t.Literal("isValid+getLastUpdatedPeriod")], {
    description:
      "isActive for one plan, isActiveAny for several; for a spend permission, isValid and getLastUpdatedPeriod " +
      "of each candidate with the block's timestamp, in one Multicall3 call",
  }),
});

/** The check result. */
export const CheckResult = t.Object({
  authorized: t.Boolean({ description: "Authorized for any requested plan; in mode both, the on-chain answer" }),
  mode: t.Union(
    CHECK_MODES.map((m) => t.Literal(m)),
    { description: "The mode used" },
  ),
  wallet: t.String({ description: "The wallet checked, lowercase" }),
  module_address: t.String({ description: "The module checked, lowercase" }),
  chain_id: t.Integer({ description: "The chain checked" }),
  plan_ids: t.Array(t.String(), { description: "The plan ids checked (deduplicated, in request order)" }),
  indexed: t.Optional(
    t.Object(IndexedResult.properties, { description: "The index's answer; present in modes indexed and both" }),
  ),
  onchain: t.Optional(
    t.Object(OnchainResult.properties, { description: "The contract's answer; present in modes onchain and both" }),
  ),
});

/** A check result. */
export type CheckResult = Static<typeof CheckResult>;
/** The indexed part of a check result. */
export type IndexedResult = Static<typeof IndexedResult>;
/** The on-chain part of a check result. */
export type OnchainResult = Static<typeof OnchainResult>;

/** Query of the route (documentation only; parsed in index.ts). */
export const CheckQueryDoc = t.Object({
  spender: t.Optional(
    documented(
      t.String({
        pattern: "^0x[0-9a-fA-F]{40}$",
        description:
          "Required when module_address is a Spend Permission manager: the merchant's spender. plan_ids are then " +
          "optional plan keys `<token>:<allowance>:<period>` (default: any of the spender's plans).",
      }),
    ),
  ),
  module_address: documented(
    t.String({
      pattern: "^0x[0-9a-fA-F]{40}$",
      description: "Subscription module contract address (any letter case)",
      examples: ["0xa16e02e87b7454126e5e10d957a927a7f5b5d2be"],
    }),
  ),
  wallet: documented(
    t.String({
      pattern: "^0x[0-9a-fA-F]{40}$",
      description: "Wallet to check (any letter case)",
      examples: ["0x3c44cdddb6a900fa2b585dd299e03d12fa4293bc"],
    }),
  ),
  plan_ids: documented(
    t.String({
      pattern: "^[0-9]{1,10}(,[0-9]{1,10})*$",
      description:
        "Comma-separated on-chain plan ids (uint32, decimal), at most 100. Repeated ids are checked once, keeping " +
        "the first position.",
      examples: ["1,2"],
    }),
  ),
  mode: t.Optional(
    documented(
      t.Union(
        CHECK_MODES.map((m) => t.Literal(m)),
        {
          default: "indexed",
          description:
            "indexed: the index (about a millisecond; may lag the chain by a few seconds). onchain: the contract's " +
            "isActive/isActiveAny through the RPC (authoritative). both: both in parallel; `authorized` is the on-chain answer.",
        },
      ),
    ),
  ),
  chain_id: t.Optional(ParamDocs.chainId),
  min_block: t.Optional(
    documented(
      t.String({
        pattern: "^[0-9]{1,20}$",
        description:
          "Mode indexed or both: answer only from an index that has reached this block (decimal). The service " +
          "waits up to 2 s for it, then answers 503 `index_behind` with Retry-After. A webhook receiver passes the " +
          "event's `block_number`, so no answer older than the event it just received can replace it.",
        examples: ["1042"],
      }),
    ),
  ),
});

/** Query of `GET /v0/auth/plans` (documentation only; parsed in index.ts). */
export const PlansQueryDoc = t.Object({
  module_address: CheckQueryDoc.properties.module_address,
  plan_ids: CheckQueryDoc.properties.plan_ids,
  chain_id: t.Optional(ParamDocs.chainId),
});

/** One plan as `GET /v0/auth/plans` describes it. */
export const PlanInfoSchema = t.Object({
  plan_id: t.String({ description: "On-chain uint32 plan id (decimal)" }),
  token: t.String({ description: "The token charged (lowercase address)" }),
  symbol: t.Union([t.String(), t.Null()], { description: "The token's symbol (null when the chain did not say)" }),
  decimals: t.Union([t.Integer(), t.Null()], { description: "The token's decimals (null when unknown)" }),
  amount: t.String({ description: "Charged each interval, in the token's smallest unit (decimal)" }),
  interval_s: t.Integer({ description: "Seconds between charges" }),
  grace_s: t.Integer({ description: "Seconds after a missed charge during which the subscription stays ACTIVE" }),
});

/** The answer of `GET /v0/auth/plans`. */
export const PlansResult = t.Object({
  chain_id: t.Integer(),
  module_address: t.String({ description: "The module, lowercase" }),
  plans: t.Array(PlanInfoSchema, { description: "The requested plans, in request order" }),
});

/** The rate-limit rule both routes follow, as their OpenAPI text says it. */
const RATE_LIMIT_TEXT =
  "Public: no credential needed. Rate limited per client address (RATE_LIMIT_PER_MINUTE): the socket's peer " +
  "address by default, or the address a trusted proxy reports (the CLIENT_IP_HEADER header, or the " +
  "TRUSTED_PROXY_HOPS-th address from the right of X-Forwarded-For); IPv6 clients are keyed by their /64. " +
  "With `Authorization: Bearer <API key or session>` the request is counted against that credential " +
  "(RATE_LIMIT_PER_KEY_PER_MINUTE) instead of the address, so servers behind one NAT or serverless egress do " +
  "not share a bucket; an invalid credential is a 401 and spends the address's bucket.";

/** OpenAPI detail of `GET /v0/auth/plans`. */
export const plansDetail = {
  tags: ["authorization"],
  summary: "Describe plans",
  description:
    "The price, token and interval of each of `plan_ids` on `module_address`, as indexed: what a paywall shows " +
    "(the gate package's 402 body). A plan the index does not know is a 400 on plan_ids. " +
    RATE_LIMIT_TEXT,
  security: [],
  responses: responses(
    {
      description: "The plans",
      schema: PlansResult,
      example: {
        chain_id: 31337,
        module_address: "0xa16e02e87b7454126e5e10d957a927a7f5b5d2be",
        plans: [
          {
            plan_id: "1",
            token: "0x5fbdb2315678afecb367f032d93f642f64180aa3",
            symbol: "USDC",
            decimals: 6,
            amount: "10000000",
            interval_s: 2592000,
            grace_s: 259200,
          },
        ],
      },
    },
    [400, 401, 429, 503],
    {
      400: {
        code: "invalid_parameter",
        message: "plan 9 of module 0xa16e02e87b7454126e5e10d957a927a7f5b5d2be is not indexed on chain 31337",
        param: "plan_ids",
      },
    },
  ),
};

const example: CheckResult = {
  authorized: true,
  mode: "both",
  wallet: "0x3c44cdddb6a900fa2b585dd299e03d12fa4293bc",
  module_address: "0xa16e02e87b7454126e5e10d957a927a7f5b5d2be",
  chain_id: 31337,
  plan_ids: ["1", "2"],
  indexed: {
    authorized: true,
    matching_plan_ids: ["1"],
    details: [
      {
        allocation_id: "31337:0xa16e02e87b7454126e5e10d957a927a7f5b5d2be:7",
        plan_id_on_chain: "1",
        status: "ACTIVE",
        next_charge_date: "2026-12-20T10:00:00.000Z",
        times_executed: 3,
      },
      {
        allocation_id: "31337:0xa16e02e87b7454126e5e10d957a927a7f5b5d2be:2",
        plan_id_on_chain: "2",
        status: "CANCELLED",
        next_charge_date: null,
        times_executed: 1,
      },
    ],
    indexed_block: "1042",
    valid_until: "2026-12-21T10:00:01.000Z",
  },
  onchain: { authorized: true, method: "isActiveAny" },
};

/** OpenAPI detail of `GET /v0/auth/check`. */
export const checkDetail = {
  tags: ["authorization"],
  summary: "Check authorization",
  description:
    "Whether `wallet` is currently authorized (has an ACTIVE subscription) for any of `plan_ids` on " +
    "`module_address`. `chain_id` must be a chain this service indexes or has an RPC endpoint for " +
    "(`onchain`/`both` need an RPC endpoint). " +
    RATE_LIMIT_TEXT +
    " On-chain checks are shared fairly: a client (its address, or its credential) holds at most its share of " +
    "the chain's ONCHAIN_CHECK_CONCURRENCY calls in flight (the cap divided by the clients holding calls, at most " +
    "half of it); beyond it, 503 `chain_busy`.",
  security: [],
  responses: responses({ description: "The check result", schema: CheckResult, example }, [400, 401, 429, 502, 503], {
    400: {
      code: "invalid_parameter",
      message: "plan_ids must be comma-separated decimal uint32 plan ids, e.g. 1,2",
      param: "plan_ids",
    },
    503: {
      description:
        "The database is unreachable (`unavailable`); the index has not reached `min_block` within 2 s " +
        "(`index_behind`); or in mode onchain/both the chain already has ONCHAIN_CHECK_CONCURRENCY distinct " +
        "on-chain checks in flight, or this client its share of them (`chain_busy`). Retry after Retry-After.",
    },
    502: {
      description:
        "Mode onchain or both: the chain's RPC failed or timed out. In mode both the body also carries the indexed " +
        "answer under `error.indexed`.",
      message: "the RPC call to chain 31337 timed out",
      extra: { indexed: example.indexed },
      schema: errorEnvelopeWith({
        indexed: t.Optional(
          t.Object(IndexedResult.properties, { description: "Mode both: the index's answer, which did succeed" }),
        ),
      }),
    },
  }),
};
