/** Input rules of the webhook routes and the `test` delivery. */
import type { Sql } from "../../../db/client";
import { ApiError, InvalidParameterError } from "../../errors";
import { parseSince } from "../../params";
import type { DispatcherConfig } from "../../../webhooks/dispatcher";
import { createEndpoint } from "../../../webhooks/endpoints";
import { standing } from "../../../events/queries";
import { EVENT_TYPES } from "../events/model";
import { resolveDestination } from "../../../webhooks/destination";
import { UnsafeDestinationError } from "../../../webhooks/errors";

/** A JSON body as an object whose every field is one of `allowed` (else a 400 naming the field); none is `{}`. */
export function bodyObject(body: unknown, allowed: readonly string[]): Record<string, unknown> {
  if (body === undefined || body === null || body === "") return {};
  const proto = typeof body === "object" ? Object.getPrototypeOf(body) : undefined;
  if (proto !== Object.prototype && proto !== null) {
    throw new InvalidParameterError("body", "the body must be a JSON object");
  }
  for (const k of Object.keys(body)) {
    if (!allowed.includes(k)) {
      const known = allowed.length > 0 ? `allowed: ${allowed.join(", ")}` : "this route takes no body fields";
      throw new InvalidParameterError(k, `unknown field ${k}; ${known}`);
    }
  }
  return body as Record<string, unknown>;
}

/** A string field (`maxLength` characters at most); undefined when absent. */
export function stringField(b: Record<string, unknown>, name: string, maxLength: number): string | undefined {
  const v = b[name];
  if (v === undefined) return undefined;
  if (typeof v !== "string" || v.length > maxLength) {
    throw new InvalidParameterError(name, `${name} must be a string of at most ${maxLength} characters`);
  }
  return v;
}

/** `event_types`: `["*"]` or a non-empty list of known types (the list a webhook can subscribe to). */
export function eventTypesField(b: Record<string, unknown>, name = "event_types"): string[] | undefined {
  const v = b[name];
  if (v === undefined) return undefined;
  const known = EVENT_TYPES.filter((t) => t !== "webhook.test") as string[];
  if (
    !Array.isArray(v) ||
    v.length === 0 ||
    v.some((t) => typeof t !== "string" || (t !== "*" && !known.includes(t))) ||
    (v.includes("*") && v.length > 1)
  ) {
    throw new InvalidParameterError(name, `${name} must be ["*"] or a list of: ${known.join(", ")}`);
  }
  return [...new Set(v as string[])];
}

/** A destination URL allowed by the rules, checked after DNS resolution (a 400 naming `url` otherwise). */
export async function urlField(b: Record<string, unknown>, allowPrivate: boolean, required: boolean) {
  const url = stringField(b, "url", 2048);
  if (url === undefined) {
    if (required) throw new InvalidParameterError("url", "url is required");
    return undefined;
  }
  try {
    await resolveDestination(url, allowPrivate);
  } catch (err) {
    if (err instanceof UnsafeDestinationError) throw new InvalidParameterError("url", err.message);
    throw new InvalidParameterError("url", `url cannot be resolved: ${(err as Error).message}`);
  }
  return url;
}

/**
 * A date-time field: exactly what the event log's `since` accepts (an ISO 8601 date-time, `Z` or an offset, within
 * years 0001–9999); anything else is a 400 naming the field.
 */
export function timeField(b: Record<string, unknown>, name: string, required: boolean): Date | undefined {
  const v = b[name];
  if (v === undefined) {
    if (required) throw new InvalidParameterError(name, `${name} is required`);
    return undefined;
  }
  if (typeof v !== "string") {
    throw new InvalidParameterError(name, `${name} must be an ISO 8601 date-time string such as 2026-11-20T10:00:00Z`);
  }
  return parseSince({ [name]: v }, name);
}

/**
 * Validates a create body (`{url, event_types?, description?}` plus the `also` fields) and creates the endpoint:
 * the one path of the API route, the control route and the CLI. `chainId`: the creator's chain scope (null: all).
 */
export async function createFromBody(
  sql: Sql,
  merchant: string,
  body: unknown,
  config: Pick<DispatcherConfig, "allowPrivate" | "secretKey">,
  also: string[] = [],
  chainId: number | null = null,
) {
  const b = bodyObject(body, ["url", "event_types", "description", ...also]);
  const url = (await urlField(b, config.allowPrivate, true))!;
  const eventTypes = eventTypesField(b) ?? ["*"];
  const description = stringField(b, "description", 500) ?? null;
  return createEndpoint(sql, { merchant, url, eventTypes, description, chainId }, config.secretKey);
}

/**
 * What a replay re-enqueues, as a condition on `event_log e`: events still on the canonical chain, never an
 * `event.reverted` (its event is not sent again) or a `webhook.test` (it belongs to its own `…/test` call).
 */
export function replayable(sql: Sql) {
  return sql`${standing(sql)} and e.type not in ('event.reverted', 'webhook.test')`;
}

/** The types a replay sends: the request's `types` within the endpoint's own `event_types` (`*`: every type). */
export function replayTypes(endpointTypes: string[], requested: string[] | undefined): string[] {
  if (requested === undefined || requested.includes("*")) return endpointTypes;
  if (endpointTypes.includes("*")) return requested;
  return requested.filter((t) => endpointTypes.includes(t));
}

/** The endpoints that have a delivery of the event `eventId` (sent, pending or failed). */
export async function endpointsSent(sql: Sql, eventId: string): Promise<Set<string>> {
  const rows = await sql<{ endpoint_id: string }[]>`
    select distinct endpoint_id from webhook_deliveries where event_id = ${eventId}`;
  return new Set(rows.map((r) => r.endpoint_id));
}

/** 409: the event was withdrawn by a reorg; sending it again would undo its `event.reverted` (webhooks.md §1). */
export class EventWithdrawnError extends ApiError {
  constructor(id: string, revertedBy: string) {
    super(
      409,
      "invalid_request_error",
      "event_withdrawn",
      `event ${id} was withdrawn by a reorg (${revertedBy}): it is not sent again`,
      "id",
    );
  }
}
