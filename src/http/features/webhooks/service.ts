/** Input rules of the webhook routes and the `test` delivery. */
import type { Sql } from "../../../db/client";
import { InvalidParameterError } from "../../errors";
import type { DispatcherConfig } from "../../../webhooks/dispatcher";
import { createEndpoint } from "../../../webhooks/endpoints";
import { EVENT_TYPES } from "../events/model";
import { resolveDestination } from "../../../webhooks/destination";
import { UnsafeDestinationError } from "../../../webhooks/errors";

/** A JSON body as an object whose every field is one of `allowed` (else a 400 naming the field). */
export function bodyObject(body: unknown, allowed: readonly string[]): Record<string, unknown> {
  if (body === undefined || body === null || body === "") return {};
  if (typeof body !== "object" || Array.isArray(body)) {
    throw new InvalidParameterError("body", "the body must be a JSON object");
  }
  for (const k of Object.keys(body)) {
    if (!allowed.includes(k)) throw new InvalidParameterError(k, `unknown field ${k}; allowed: ${allowed.join(", ")}`);
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

/** A timestamp field (ISO 8601 or unix seconds). */
export function timeField(b: Record<string, unknown>, name: string, required: boolean): Date | undefined {
  const v = b[name];
  if (v === undefined) {
    if (required) throw new InvalidParameterError(name, `${name} is required`);
    return undefined;
  }
  const d = typeof v === "number" ? new Date(v * 1000) : typeof v === "string" ? new Date(v) : new Date(NaN);
  if (Number.isNaN(d.getTime()))
    throw new InvalidParameterError(name, `${name} must be an ISO 8601 time or unix seconds`);
  return d;
}

/**
 * Validates a create body (`{url, event_types?, description?}` plus the `also` fields) and creates the endpoint:
 * the one path of the API route, the control route and the CLI.
 */
export async function createFromBody(
  sql: Sql,
  merchant: string,
  body: unknown,
  config: Pick<DispatcherConfig, "allowPrivate" | "secretKey">,
  also: string[] = [],
) {
  const b = bodyObject(body, ["url", "event_types", "description", ...also]);
  const url = (await urlField(b, config.allowPrivate, true))!;
  const eventTypes = eventTypesField(b) ?? ["*"];
  const description = stringField(b, "description", 500) ?? null;
  return createEndpoint(sql, { merchant, url, eventTypes, description }, config.secretKey);
}
