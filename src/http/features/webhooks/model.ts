/** The endpoint and delivery objects and the documentation of the webhook routes (webhooks.md §3). */
import { Type as t, type TSchema } from "@sinclair/typebox";
import type { OpenAPIV3 } from "openapi-types";
import { documented, ParamDocs } from "../../params";
import { errorResponse, jsonSchema, responses } from "../docs";

const iso = (description: string) => t.String({ format: "date-time", description });
const nullable = (s: TSchema) => t.Union([s, t.Null()]);

/** An endpoint. */
export const EndpointObject = t.Object({
  id: t.String({ description: "`we_…`" }),
  url: t.String({ description: "Where deliveries are POSTed (https)" }),
  event_types: t.Array(t.String(), { description: 'Types delivered, or ["*"] for every type' }),
  description: nullable(t.String({ description: "Free text" })),
  enabled: t.Boolean({ description: "False once disabled (by PATCH or after WEBHOOK_DISABLE_AFTER_S of failures)" }),
  disabled_reason: nullable(t.String({ description: "Why it was disabled automatically" })),
  chain_id: nullable(
    t.Integer({
      description:
        "The only chain whose events it receives: set when a SIWE session (or a key one made) created it; null: every chain",
    }),
  ),
  created_at: iso("Creation time"),
  updated_at: iso("Last change"),
});

/** An endpoint with its secret (create and rotate only). */
export const EndpointWithSecret = t.Object({
  ...EndpointObject.properties,
  secret: t.String({ description: "`whsec_…`: shown only in this response" }),
});

/** A delivery with its latest attempt. */
export const DeliveryObject = t.Object({
  id: t.String({ description: "`wd_…`" }),
  event_id: t.String(),
  event_type: t.String(),
  attempt: t.Integer({ description: "Attempts made so far" }),
  status: t.Union([t.Literal("pending"), t.Literal("succeeded"), t.Literal("failed")]),
  response_status: nullable(t.Integer({ description: "HTTP status of the latest attempt" })),
  error: nullable(t.String({ description: "Why the latest attempt failed" })),
  duration_ms: nullable(t.Integer()),
  created_at: iso("Time of the latest attempt (of the delivery before any)"),
  next_attempt_at: nullable(iso("When a pending delivery is tried next")),
});

const endpoint = {
  id: "we_4f1c2a9e5b7d41c6a8e2f0b1",
  url: "https://merchant.example/webhooks",
  event_types: ["*"],
  description: "production",
  enabled: true,
  disabled_reason: null,
  chain_id: null,
  created_at: "2026-11-20T10:00:00.000Z",
  updated_at: "2026-11-20T10:00:00.000Z",
};
const withSecret = { ...endpoint, secret: "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw" };
const delivery = {
  id: "wd_9d8c7b6a5f4e3d2c1b0a9f8e",
  event_id: "evt_3f0c2a9e5b7d41c6a8e2f0b1d9c7a5e3f1b2c4d6",
  event_type: "charge.succeeded",
  attempt: 1,
  status: "succeeded",
  response_status: 200,
  error: null,
  duration_ms: 41,
  created_at: "2026-11-20T10:00:01.000Z",
  next_attempt_at: null,
};

/** Paths. */
export const MerchantParamsDoc = t.Object({ merchant: ParamDocs.merchant });
export const EndpointParamsDoc = t.Object({
  merchant: ParamDocs.merchant,
  id: documented(t.String({ description: "Endpoint id (`we_…`)", examples: [endpoint.id] })),
});
export const EventParamsDoc = t.Object({
  merchant: ParamDocs.merchant,
  id: documented(t.String({ description: "Event id (`evt_…`)", examples: [delivery.event_id] })),
});

/** Query of the delivery log. */
export const DeliveriesQueryDoc = t.Object({
  status: t.Optional(
    documented(
      t.Union([t.Literal("pending"), t.Literal("succeeded"), t.Literal("failed")], { description: "Only this status" }),
    ),
  ),
  limit: t.Optional(
    documented(t.Integer({ minimum: 1, maximum: 1000, description: "Page size, 1 to 1000 (default 100)" })),
  ),
  starting_after: t.Optional(documented(t.String({ description: "A delivery id: the page after it" }))),
});

const body = (schema: TSchema, example: unknown, required = true): OpenAPIV3.RequestBodyObject => ({
  required,
  content: { "application/json": { schema: jsonSchema(schema) as OpenAPIV3.SchemaObject, example } },
});
const types = t.Array(t.String(), { description: 'Event types, or ["*"] (default)' });
const CreateBody = t.Object(
  { url: t.String(), event_types: t.Optional(types), description: t.Optional(t.String({ maxLength: 500 })) },
  { additionalProperties: false },
);
const PatchBody = t.Object(
  {
    url: t.Optional(t.String()),
    event_types: t.Optional(types),
    description: t.Optional(nullable(t.String({ maxLength: 500 }))),
    enabled: t.Optional(t.Boolean()),
  },
  { additionalProperties: false },
);
const ReplayBody = t.Object(
  {
    since: t.String({ format: "date-time" }),
    until: t.Optional(t.String({ format: "date-time" })),
    types: t.Optional(types),
  },
  { additionalProperties: false },
);
const RotateBody = t.Object(
  { expire_previous_in: t.Optional(t.Integer({ minimum: 0, maximum: 604800, default: 86400 })) },
  { additionalProperties: false },
);
const RedeliverBody = t.Object({ endpoint_id: t.Optional(t.String()) }, { additionalProperties: false });
const Enqueued = t.Object({ enqueued: t.Integer({ description: "Deliveries created" }) });
const Replayed = t.Object({
  enqueued: t.Integer({ description: "Deliveries created" }),
  skipped: t.Integer({
    description: "Matching events left out: they already have a pending delivery to this endpoint",
  }),
});

/** 409 of redeliver (the shared table of error statuses has no 409: its envelope, with this route's code). */
const withdrawn = {
  ...errorResponse(400, {
    type: "invalid_request_error",
    code: "event_withdrawn",
    message: "event evt_… was withdrawn by a reorg (evt_…): it is not sent again",
    param: "id",
  }),
  description: "The event was withdrawn by a reorg: an `event.reverted` follows it in the log.",
};

const sec = [{ bearer: [] }];
const tags = ["webhooks"];
const writes = " Takes the credential in the `Authorization` header only (never the session cookie alone).";
const noBody = " No body (an empty one or `{}` is fine; any field is a 400).";
const ok = (description: string, schema: TSchema, example: unknown, status: 200 | 201 = 200) =>
  responses({ description, schema, example, freshness: false, status }, [400, 401, 403, 404, 503]);

/** OpenAPI detail of each route. */
export const details = {
  create: {
    tags,
    security: sec,
    summary: "Create an endpoint",
    description:
      "Creates an endpoint; the response carries its signing secret, shown only here. A merchant has at most 16 " +
      "endpoints: one more is a 400 `webhook_endpoint_limit_reached`." +
      writes,
    requestBody: body(CreateBody, { url: endpoint.url, event_types: ["*"], description: "production" }),
    responses: ok("The endpoint and its secret", EndpointWithSecret, withSecret, 201),
  },
  list: {
    tags,
    security: sec,
    summary: "List endpoints",
    description: "The merchant's endpoints, oldest first; never their secrets.",
    responses: ok("Endpoints", t.Array(EndpointObject), [endpoint]),
  },
  get: {
    tags,
    security: sec,
    summary: "One endpoint",
    description: "One endpoint of the merchant; 404 when unknown or another merchant's.",
    responses: ok("The endpoint", EndpointObject, endpoint),
  },
  update: {
    tags,
    security: sec,
    summary: "Update an endpoint",
    description:
      "Changes url, event_types, description or enabled; `enabled: true` re-enables a disabled one." + writes,
    requestBody: body(PatchBody, { enabled: true }),
    responses: ok("The endpoint", EndpointObject, endpoint),
  },
  remove: {
    tags,
    security: sec,
    summary: "Delete an endpoint",
    description: "Deletes the endpoint and cancels its pending deliveries." + noBody + writes,
    responses: ok("Deleted", t.Object({ id: t.String(), deleted: t.Literal(true) }), {
      id: endpoint.id,
      deleted: true,
    }),
  },
  rotate: {
    tags,
    security: sec,
    summary: "Rotate the secret",
    description:
      "A new secret, shown once; the previous one keeps signing alongside it for `expire_previous_in` seconds " +
      "(default 86400, 24 hours; 0 stops it now, as after a leak; at most 604800, 7 days)." +
      writes,
    requestBody: body(RotateBody, { expire_previous_in: 0 }, false),
    responses: ok("The endpoint and its new secret", EndpointWithSecret, withSecret),
  },
  test: {
    tags,
    security: sec,
    summary: "Send a test event",
    description:
      "Delivers a `webhook.test` event to the endpoint now (one attempt) and answers with that attempt. At most 10 " +
      "a minute per endpoint: one more is a 429 with `Retry-After`." +
      noBody +
      writes,
    responses: responses(
      { description: "The attempt", schema: DeliveryObject, example: delivery, freshness: false },
      [400, 401, 403, 404, 429, 503],
    ),
  },
  deliveries: {
    tags,
    security: sec,
    summary: "Delivery log",
    description: "The endpoint's deliveries with their latest attempt, newest first; `Link` paging.",
    responses: responses(
      { description: "Deliveries", schema: t.Array(DeliveryObject), example: [delivery], link: true, freshness: false },
      [400, 401, 403, 404, 503],
    ),
  },
  replay: {
    tags,
    security: sec,
    summary: "Replay events",
    description:
      "Enqueues every event of the merchant in [since, until) (ISO 8601 date-times, as the event log's `since`) of " +
      "the endpoint's `event_types` (narrowed by `types`) again: only events still on the canonical chain, never " +
      "one a reorg withdrew, an `event.reverted` or a `webhook.test`. An event that already has a pending delivery " +
      "to this endpoint is skipped (counted in `skipped`), so the same replay twice enqueues nothing the second time." +
      writes,
    requestBody: body(ReplayBody, { since: "2026-11-01T00:00:00Z", types: ["charge.failed"] }),
    responses: ok("How many deliveries were enqueued and how many events were skipped", Replayed, {
      enqueued: 12,
      skipped: 3,
    }),
  },
  redeliver: {
    tags,
    security: sec,
    summary: "Redeliver an event",
    description:
      "Sends the event again to one endpoint (`endpoint_id`) or to every endpoint of the merchant it matches (a " +
      "`webhook.test`: only the endpoint it was written for; an `event.reverted`: the endpoints subscribed to the " +
      "withdrawn event's type and those that were sent it). An event a reorg withdrew is a 409." +
      writes,
    requestBody: body(RedeliverBody, { endpoint_id: endpoint.id }, false),
    responses: {
      ...ok("How many deliveries were enqueued", Enqueued, { enqueued: 1 }),
      409: withdrawn,
    },
  },
};
