/**
 * The OpenAPI `webhooks` section: one entry per event type (src/events/envelope.ts, webhooks.md §1, renewals.md §4,
 * analytics.md §5), each the signed POST a merchant's endpoint receives, with the payload's schema and an example.
 * The typed client's webhook event union is generated from this section.
 */
import { Type as t, type TSchema } from "@sinclair/typebox";
import type { OpenAPIV3 } from "openapi-types";
import { EVENT_TYPES } from "../../../events/envelope";
import { ActivityRecord } from "../activity/model";
import { SubscriptionRecord, SubscriptionStatusSchema } from "../subscriptions/model";
import { RenewalSchema, renewalExample } from "../renewals/model";
import { jsonSchema } from "./index";

/** Event types announced by the MRR analytics (analytics.md §5), whether or not this build emits them yet. */
export const CUSTOMER_EVENT_TYPES = ["customer.churned", "customer.reactivated"] as const;

/** Every event type a webhook endpoint can receive. */
export const WEBHOOK_EVENT_TYPES = [...new Set<string>([...EVENT_TYPES, ...CUSTOMER_EVENT_TYPES])];

/** Churn reasons of a movement (analytics.md §2); `plan_change` only on a contraction. */
const MOVEMENT_REASONS = [
  "cancelled_by_subscriber",
  "cancelled_by_merchant",
  "blocked",
  "paused",
  "InsufficientBalance",
  "InsufficientAllowance",
  "AllowanceExpired",
  "TransferFailed",
  "not_charged",
  "plan_change",
] as const;

/** The MRR movement record (analytics.md §5): `data.object` of customer.churned and customer.reactivated. */
export const MovementRecord = t.Object(
  {
    id: t.String({ description: "Movement id: deterministic from the block and the customer" }),
    at: t.String({ format: "date-time", description: "Instant of the movement (ISO 8601, ms, UTC)" }),
    block_number: t.String({ description: "Block of the movement (decimal)" }),
    customer: t.String({ description: "The subscriber wallet (lowercase)" }),
    token: t.String({ description: "The plan token (lowercase address)" }),
    currency: t.Union([t.String(), t.Null()], { description: "Token symbol; null when the token has none" }),
    token_decimals: t.Union([t.Integer(), t.Null()], { description: "Token decimals; null when unknown" }),
    kind: t.Union(
      ["new", "expansion", "contraction", "churn", "reactivation"].map((k) => t.Literal(k)),
      { description: "new, expansion, contraction, churn or reactivation" },
    ),
    mrr_before: t.String({ description: "The customer's MRR just before, token base units (decimal)" }),
    mrr_after: t.String({ description: "Its MRR just after, token base units (decimal)" }),
    amount: t.String({ description: "mrr_after − mrr_before, signed, token base units (decimal)" }),
    reason: t.Union([...MOVEMENT_REASONS.map((r) => t.Literal(r)), t.Null()], {
      description: "Why a churn or contraction happened; null for the other kinds",
    }),
    recovered: t.Boolean({ description: "A reactivation within 30 days of an involuntary churn" }),
    allocation_ids: t.Array(t.String(), { description: "The allocations whose change made the movement" }),
  },
  { description: "An MRR movement of one customer at one instant (analytics.md)" },
);

/** The subscription record as events carry it: events stored before renewal outlooks existed have no `renewal`. */
const EventSubscriptionRecord = t.Object(
  { ...SubscriptionRecord.properties, renewal: t.Optional(SubscriptionRecord.properties.renewal) },
  { description: "The subscription record (as GET /v0/subscriptions answers it) at the event's instant" },
);

/** `data.object` of event.reverted: the withdrawn event. */
export const RevertedObject = t.Object(
  {
    id: t.String({ description: "Id of the withdrawn event" }),
    type: t.String({ description: "Type of the withdrawn event" }),
    block_number: t.String({ description: "Block of the withdrawn event (decimal)" }),
    chain_id: t.Union([t.Integer(), t.Null()], { description: "Its chain" }),
    allocation_id: t.Union([t.String(), t.Null()], {
      description: "The allocation it concerned; null for an event without a subscriber",
    }),
    user_address: t.Union([t.String(), t.Null()], {
      description: "The subscriber it concerned (evict this wallet from a cache); null for an event without one",
    }),
  },
  { description: "The withdrawn event; ignore an id you never received" },
);

const activity = {
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

const subscription = {
  allocation_id: "31337:0xa16e02e87b7454126e5e10d957a927a7f5b5d2be:1",
  on_chain_id: "1",
  module_address: "0xa16e02e87b7454126e5e10d957a927a7f5b5d2be",
  user_address: "0x3c44cdddb6a900fa2b585dd299e03d12fa4293bc",
  plan_id: "31337:0xa16e02e87b7454126e5e10d957a927a7f5b5d2be:1",
  status: "ACTIVE",
  total_spent: "10000000",
  times_executed: 1,
  next_charge_date: "2026-12-20T10:00:00.000Z",
  expires_at: null,
  remaining_executions: null,
  created_at: "2026-11-20T10:00:00.000Z",
  is_blocked: false,
  renewal: null,
  source: "subscription_module",
  spend_permission: null,
};

const movement = {
  id: "mov_8c1f0e2d3b4a59687766a5b4c3d2e1f00f1e2d3c",
  at: "2026-12-23T10:00:01.000Z",
  block_number: "2260",
  customer: "0x3c44cdddb6a900fa2b585dd299e03d12fa4293bc",
  token: "0x5fbdb2315678afecb367f032d93f642f64180aa3",
  currency: "USDC",
  token_decimals: 6,
  kind: "churn",
  mrr_before: "10000000",
  mrr_after: "0",
  amount: "-10000000",
  reason: "InsufficientBalance",
  recovered: false,
  allocation_ids: ["31337:0xa16e02e87b7454126e5e10d957a927a7f5b5d2be:1"],
};

/** What one event type's payload holds: its `data` schema, an example `data`, and what it means. */
type EventDoc = { summary: string; description: string; data: TSchema; example: Record<string, unknown> };

const activityEvent = (what: string, type: "CHARGE" | "FAIL" | "REFILL"): EventDoc => ({
  summary: what,
  description: `A ${type} activity record was indexed. \`data.object\` is that record, as GET /v0/activity answers it.`,
  data: t.Object({ object: ActivityRecord }),
  example: {
    object:
      type === "CHARGE"
        ? activity
        : type === "FAIL"
          ? { ...activity, type, amount_charged: "0", reason: "InsufficientBalance", fee_paid: null }
          : { ...activity, type, amount_charged: "20000000", keeper_address: null, fee_paid: null },
  },
});

const renewalObservation = (what: string, description: string, outlook: "at_risk" | "will_renew"): EventDoc => ({
  summary: what,
  description,
  data: t.Object({
    object: EventSubscriptionRecord,
    renewal: RenewalSchema,
    previous_renewal: t.Union([RenewalSchema, t.Null()], {
      description: "The outlook last sent for that due instant, or null",
    }),
  }),
  example: {
    object: subscription,
    renewal:
      outlook === "at_risk"
        ? renewalExample
        : { ...renewalExample, outlook, reason: null, balance: "20000000", shortfall: "0" },
    previous_renewal: outlook === "at_risk" ? null : renewalExample,
  },
});

const movementEvent = (what: string, description: string, kind: "churn" | "reactivation"): EventDoc => ({
  summary: what,
  description,
  data: t.Object({ object: MovementRecord }),
  example: {
    object:
      kind === "churn"
        ? movement
        : {
            ...movement,
            id: "mov_2a9e5b7d41c6a8e2f0b1d9c7a5e3f1b2c4d6e8f0",
            at: "2026-12-30T09:15:00.000Z",
            block_number: "2301",
            kind,
            mrr_before: "0",
            mrr_after: "10000000",
            amount: "10000000",
            reason: null,
            recovered: true,
          },
  },
});

/** The documentation of every event type's payload. */
export const EVENT_DOCS: Record<string, EventDoc> = {
  "charge.succeeded": activityEvent("A payment succeeded", "CHARGE"),
  "charge.failed": activityEvent("A payment attempt failed", "FAIL"),
  "credit.refilled": activityEvent("A subscription's credit was refilled", "REFILL"),
  "subscription.created": {
    summary: "A subscription appeared",
    description: "An allocation was created on the chain. `data.object` is its subscription record at that moment.",
    data: t.Object({ object: EventSubscriptionRecord }),
    example: { object: { ...subscription, status: "PENDING", times_executed: 0, total_spent: "0" } },
  },
  "subscription.status_changed": {
    summary: "A subscription's computed status changed",
    description:
      "The computed status of an allocation changed (a log, or an expiry instant passing). `data.object` is the " +
      "record after the change; `data.previous_status` the status before.",
    data: t.Object({ object: EventSubscriptionRecord, previous_status: SubscriptionStatusSchema }),
    example: { object: { ...subscription, status: "EXPIRED" }, previous_status: "ACTIVE" },
  },
  "subscription.renewal_upcoming": {
    summary: "A renewal is coming",
    description:
      "RENEWAL_NOTICE_S (default 3 days) before `next_charge_at` of a chargeable subscription: the due instant and " +
      "the amount that will be charged.",
    data: t.Object({
      object: EventSubscriptionRecord,
      due_at: t.String({ format: "date-time", description: "The due instant" }),
      amount: t.String({ description: "The charge, token base units (decimal)" }),
      currency: t.Union([t.String(), t.Null()], { description: "Token symbol" }),
      token_decimals: t.Union([t.Integer(), t.Null()], { description: "Token decimals" }),
    }),
    example: {
      object: subscription,
      due_at: "2026-12-20T10:00:00.000Z",
      amount: "10000000",
      currency: "USDC",
      token_decimals: 6,
    },
  },
  "subscription.renewal_at_risk": renewalObservation(
    "A renewal will fail",
    "An evaluation found the next charge will fail (or fail for another reason than the one last sent for that due " +
      "instant). `data.renewal` is the outlook observed.",
    "at_risk",
  ),
  "subscription.renewal_recovered": renewalObservation(
    "A renewal at risk will succeed again",
    "An evaluation found `will_renew` for a due instant whose last outlook sent was `at_risk`.",
    "will_renew",
  ),
  "event.reverted": {
    summary: "A reorg withdrew an event",
    description:
      "A reorg removed the block that caused an event. Sent to every enabled endpoint subscribed to the withdrawn " +
      "event's type, whether or not it received that event: evict `user_address` from any cache of paid-up answers.",
    data: t.Object({ object: RevertedObject }),
    example: {
      object: {
        id: "evt_3f0c2a9e5b7d41c6a8e2f0b1d9c7a5e3f1b2c4d6",
        type: "charge.succeeded",
        block_number: "1042",
        chain_id: 31337,
        allocation_id: "31337:0xa16e02e87b7454126e5e10d957a927a7f5b5d2be:1",
        user_address: "0x3c44cdddb6a900fa2b585dd299e03d12fa4293bc",
      },
    },
  },
  "webhook.test": {
    summary: "A test delivery",
    description: "Sent by `POST /v0/webhook_endpoints/{merchant}/{id}/test` to that endpoint only.",
    data: t.Object({
      object: t.Object({ endpoint_id: t.String({ description: "The endpoint tested" }) }),
    }),
    example: { object: { endpoint_id: "we_9f2c4a1b7e3d5c6a8b0f" } },
  },
  "customer.churned": movementEvent(
    "A customer churned",
    "A `churn` MRR movement: the customer's MRR fell to 0. `data.object` is the movement record, with its `reason`.",
    "churn",
  ),
  "customer.reactivated": movementEvent(
    "A customer came back",
    "A `reactivation` MRR movement: a customer who had MRR before has MRR again. `recovered` is true within 30 days " +
      "of an involuntary churn.",
    "reactivation",
  ),
};

/** The delivered payload of `type`: the event object (webhooks.md §2) with that type's `data`. */
export function eventSchema(type: string): TSchema {
  const doc = EVENT_DOCS[type];
  if (!doc) throw new Error(`event type ${type} has no payload documentation in src/http/features/docs/webhooks.ts`);
  return t.Object(
    {
      id: t.String({ description: "`evt_` + hex or base58; deterministic: the same fact always gets the same id" }),
      type: t.Literal(type),
      timestamp: t.String({
        format: "date-time",
        description: "Block time, or the expiry instant (ISO 8601, ms, UTC)",
      }),
      chain_id: t.Integer({ description: "The chain" }),
      merchant: t.String({ description: "The merchant (lowercase)" }),
      block_number: t.String({ description: "Block that caused it (decimal)" }),
      data: doc.data,
    },
    { description: doc.summary },
  );
}

/** An example payload of `type`. */
export function eventExample(type: string): Record<string, unknown> {
  return {
    id: "evt_5d0c2a9e5b7d41c6a8e2f0b1d9c7a5e3f1b2c4d6",
    type,
    timestamp: "2026-11-20T10:00:00.000Z",
    chain_id: 31337,
    merchant: "0x70997970c51812dc3a010c7d01b50e0d17dc79c8",
    block_number: "1042",
    data: EVENT_DOCS[type]!.example,
  };
}

const signatureHeaders: OpenAPIV3.ParameterObject[] = [
  {
    name: "webhook-id",
    in: "header",
    required: true,
    description: "The event id: the same on every attempt, so a receiver deduplicates by it",
    schema: { type: "string" },
    example: "evt_5d0c2a9e5b7d41c6a8e2f0b1d9c7a5e3f1b2c4d6",
  },
  {
    name: "webhook-timestamp",
    in: "header",
    required: true,
    description: "Unix seconds of this attempt; refuse one more than 5 minutes away from your clock",
    schema: { type: "string" },
    example: "1795687200",
  },
  {
    name: "webhook-signature",
    in: "header",
    required: true,
    description:
      "Standard Webhooks signature: space-separated `v1,<base64 HMAC-SHA256 of id.timestamp.body>` (two during a " +
      "secret rotation)",
    schema: { type: "string" },
    example: "v1,K5oZfzN95Z9UVu1EsfQmfVNQhnkZ2pj9o9NDN/H/pI4=",
  },
];

/** `webhooks` of the OpenAPI document: one signed POST per event type. */
export function webhooksSection(): Record<string, OpenAPIV3.PathItemObject> {
  const out: Record<string, OpenAPIV3.PathItemObject> = {};
  for (const type of WEBHOOK_EVENT_TYPES) {
    const doc = EVENT_DOCS[type];
    if (!doc) throw new Error(`event type ${type} has no payload documentation in src/http/features/docs/webhooks.ts`);
    out[type] = {
      post: {
        operationId: `webhook_${type.replaceAll(".", "_")}`,
        tags: ["webhooks"],
        summary: doc.summary,
        description:
          `${doc.description}\n\nDelivered as a signed POST (Standard Webhooks) to each enabled endpoint subscribed ` +
          "to this type; verify the signature before trusting the body. Retried with backoff until a 2xx.",
        security: [],
        parameters: signatureHeaders,
        requestBody: {
          required: true,
          content: {
            "application/json": {
              schema: jsonSchema(eventSchema(type)) as OpenAPIV3.SchemaObject,
              example: eventExample(type),
            },
          },
        },
        responses: {
          "200": { description: "Any 2xx acknowledges the delivery; the body is ignored" },
          "400": { description: "Any other status (or none within the timeout) is a failed attempt, retried later" },
        },
      },
    };
  }
  return out;
}
