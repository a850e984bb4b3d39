/** The event object and the documentation of the event log routes (webhooks.md §2–3). */
import { Type as t } from "@sinclair/typebox";
import { documented, ParamDocs } from "../../params";
import { responses } from "../docs";
import { csvText, type CsvColumn } from "../../csv";
import { FormatParamDoc, withCsvContent } from "../../stream";
import { EVENT_TYPES, type EventEnvelope } from "../../../events/envelope";

/** Every event type (src/events/envelope.ts). */
export { EVENT_TYPES };

/** One event. */
export const EventObject = t.Object({
  id: t.String({ description: "`evt_` + 40 hex digits; deterministic: the same fact always gets the same id" }),
  type: t.Union(
    EVENT_TYPES.map((v) => t.Literal(v)),
    { description: "Event type" },
  ),
  timestamp: t.String({ format: "date-time", description: "Block time, or the expiry instant (ISO 8601, ms, UTC)" }),
  chain_id: t.Integer(),
  merchant: t.String({ description: "The merchant (lowercase)" }),
  block_number: t.String({ description: "Block that caused it; for an expiry the newest indexed block then" }),
  data: t.Object(
    {
      object: t.Unknown({ description: "The activity record, the subscription record, or `{id, type}`" }),
      previous_status: t.Optional(t.String({ description: "subscription.status_changed only: the status before" })),
      due_at: t.Optional(t.String({ description: "subscription.renewal_upcoming only: the due instant" })),
      amount: t.Optional(t.String({ description: "subscription.renewal_upcoming only: the charge, base units" })),
      currency: t.Optional(t.Union([t.String(), t.Null()], { description: "subscription.renewal_upcoming only" })),
      token_decimals: t.Optional(
        t.Union([t.Integer(), t.Null()], { description: "subscription.renewal_upcoming only" }),
      ),
      renewal: t.Optional(t.Unknown({ description: "renewal_at_risk / renewal_recovered: the outlook observed" })),
      previous_renewal: t.Optional(
        t.Unknown({
          description: "renewal_at_risk / renewal_recovered: the outlook last sent for that due instant, or null",
        }),
      ),
    },
    {
      description:
        "`object`, plus `previous_status` for subscription.status_changed; `due_at`, `amount`, `currency`, " +
        "`token_decimals` for subscription.renewal_upcoming; `renewal`, `previous_renewal` for renewal_at_risk and " +
        "renewal_recovered (see GET /v0/renewals)",
    },
  ),
});

const example = {
  id: "evt_3f0c2a9e5b7d41c6a8e2f0b1d9c7a5e3f1b2c4d6",
  type: "subscription.status_changed",
  timestamp: "2026-11-20T10:00:01.000Z",
  chain_id: 31337,
  merchant: "0x70997970c51812dc3a010c7d01b50e0d17dc79c8",
  block_number: "123",
  data: {
    object: {
      allocation_id: "31337:0xa16e02e87b7454126e5e10d957a927a7f5b5d2be:3",
      on_chain_id: "3",
      module_address: "0xa16e02e87b7454126e5e10d957a927a7f5b5d2be",
      user_address: "0x3c44cdddb6a900fa2b585dd299e03d12fa4293bc",
      plan_id: "31337:0xa16e02e87b7454126e5e10d957a927a7f5b5d2be:1",
      status: "EXPIRED",
      total_spent: "9990000",
      times_executed: 1,
      next_charge_date: "2026-11-20T09:00:00.000Z",
      expires_at: null,
      remaining_executions: null,
      created_at: "2026-10-20T09:00:00.000Z",
      is_blocked: false,
    },
    previous_status: "ACTIVE",
  },
};

/** Path of the list. */
export const EventsParamsDoc = t.Object({ merchant: ParamDocs.merchant });

/** Path of one event. */
export const EventParamsDoc = t.Object({
  merchant: ParamDocs.merchant,
  id: documented(t.String({ description: "Event id (`evt_…`)", examples: [example.id] })),
});

/** Query of the list. */
export const EventsQueryDoc = t.Object({
  type: t.Optional(
    documented(t.String({ description: "One type, or several comma-separated", examples: ["charge.failed"] })),
  ),
  since: t.Optional(documented(t.String({ format: "date-time", description: "Only events at or after this time" }))),
  limit: t.Optional(
    documented(
      t.Integer({ minimum: 1, maximum: 1000, description: "Page size, 1 to 1000; omitted: every matching event" }),
    ),
  ),
  starting_after: t.Optional(documented(t.String({ description: "An event id: the page after it" }))),
  order: t.Optional(documented(t.Union([t.Literal("asc"), t.Literal("desc")], { description: "Log order (asc)" }))),
  chain_id: t.Optional(ParamDocs.chainId),
  format: t.Optional(FormatParamDoc),
});

/** CSV columns of the event log: the envelope's fields, `data` as its JSON text. */
export const EVENT_CSV_COLUMNS: readonly CsvColumn<EventEnvelope>[] = [
  { name: "id", value: (e) => e.id },
  { name: "type", value: (e) => e.type },
  { name: "timestamp", value: (e) => e.timestamp },
  { name: "chain_id", value: (e) => e.chain_id },
  { name: "merchant", value: (e) => e.merchant },
  { name: "block_number", value: (e) => e.block_number },
  { name: "data", value: (e) => JSON.stringify(e.data) },
];

/** OpenAPI detail of the routes. */
export const details = {
  list: {
    tags: ["events"],
    summary: "The event log",
    description:
      "The merchant's events in log order (oldest first, or newest first with `order=desc`): the same objects " +
      "webhooks deliver. A withdrawn event stays and is followed by an `event.reverted`. With `limit`, pages " +
      'with `Link: <url>; rel="next"`; without it, every matching event (streamed). Without `chain_id`, every ' +
      "chain. `format=csv` gives the same rows as CSV.",
    security: [{ bearer: [] }],
    responses: withCsvContent(
      responses(
        { description: "Events", schema: t.Array(EventObject), example: [example], link: true },
        [400, 401, 403, 503],
      ),
      csvText(EVENT_CSV_COLUMNS, [example as EventEnvelope]),
    ),
  },
  one: {
    tags: ["events"],
    summary: "One event",
    description: "One event of the merchant's log, as the list and webhooks show it; 404 for another merchant's.",
    security: [{ bearer: [] }],
    responses: responses({ description: "The event", schema: EventObject, example }, [400, 401, 403, 404, 503]),
  },
};
