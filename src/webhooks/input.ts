/**
 * The input rules of webhook endpoints (webhooks.md §3), shared by the API routes, the control route and the CLI:
 * bodies, fields and the one create path. A refused value throws InvalidFieldError naming the field (the API's 400).
 */
import type { Sql } from "../db/client";
import { EVENT_TYPES } from "../events/envelope";
import type { DispatcherConfig } from "./dispatcher";
import { createEndpoint, updateEndpoint } from "./endpoints";
import { checkUrl, resolveDestination } from "./destination";
import { InvalidFieldError, UnsafeDestinationError } from "./errors";

/** A JSON body as an object whose every field is one of `allowed` (else a 400 naming the field); none is `{}`. */
export function bodyObject(body: unknown, allowed: readonly string[]): Record<string, unknown> {
  if (body === undefined || body === null || body === "") return {};
  const proto = typeof body === "object" ? Object.getPrototypeOf(body) : undefined;
  if (proto !== Object.prototype && proto !== null) {
    throw new InvalidFieldError("body", "the body must be a JSON object");
  }
  for (const k of Object.keys(body)) {
    if (!allowed.includes(k)) {
      const known = allowed.length > 0 ? `allowed: ${allowed.join(", ")}` : "this route takes no body fields";
      throw new InvalidFieldError(k, `unknown field ${k}; ${known}`);
    }
  }
  return body as Record<string, unknown>;
}

/** A string field (`maxLength` characters at most); undefined when absent. */
export function stringField(b: Record<string, unknown>, name: string, maxLength: number): string | undefined {
  const v = b[name];
  if (v === undefined) return undefined;
  if (typeof v !== "string" || v.length > maxLength) {
    throw new InvalidFieldError(name, `${name} must be a string of at most ${maxLength} characters`);
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
    throw new InvalidFieldError(name, `${name} must be ["*"] or a list of: ${known.join(", ")}`);
  }
  return [...new Set(v as string[])];
}

/** The longest a rotated-out secret may keep signing (`expire_previous_in`, seconds): 7 days, as Stripe's key roll. */
export const MAX_EXPIRE_PREVIOUS_IN_S = 604_800;

/** `expire_previous_in` of a secret rotation: whole seconds, 0 (now) to 7 days; undefined when absent. */
export function expirePreviousInField(b: Record<string, unknown>): number | undefined {
  const v = b.expire_previous_in;
  if (v === undefined) return undefined;
  if (typeof v !== "number" || !Number.isInteger(v) || v < 0 || v > MAX_EXPIRE_PREVIOUS_IN_S) {
    throw new InvalidFieldError(
      "expire_previous_in",
      `expire_previous_in must be a whole number of seconds from 0 (the previous secret stops signing now) to ${MAX_EXPIRE_PREVIOUS_IN_S}`,
    );
  }
  return v;
}

/**
 * A destination URL allowed by the rules, checked after DNS resolution (a 400 naming `url` otherwise). With private
 * destinations allowed (development, tests) there is no address to refuse, so the name is not resolved: a host this
 * machine cannot resolve yet (no DNS in a sandbox, a name not created yet) is accepted, and each attempt resolves it.
 */
export async function urlField(b: Record<string, unknown>, allowPrivate: boolean, required: boolean) {
  const url = stringField(b, "url", 2048);
  if (url === undefined) {
    if (required) throw new InvalidFieldError("url", "url is required");
    return undefined;
  }
  try {
    if (allowPrivate) checkUrl(url, true);
    else await resolveDestination(url, false);
  } catch (err) {
    if (err instanceof UnsafeDestinationError) throw new InvalidFieldError("url", err.message);
    throw new InvalidFieldError("url", `url cannot be resolved: ${(err as Error).message}`);
  }
  return url;
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
 * Validates a change (`{url?, event_types?, description?, enabled?}`) and applies it; undefined when the merchant
 * has no such endpoint (or none in `chainId`'s scope, when given).
 */
export async function updateFromBody(
  sql: Sql,
  merchant: string,
  id: string,
  b: Record<string, unknown>,
  config: Pick<DispatcherConfig, "allowPrivate">,
  chainId?: number,
) {
  if (b.enabled !== undefined && typeof b.enabled !== "boolean") {
    throw new InvalidFieldError("enabled", "enabled must be true or false");
  }
  if (b.description !== undefined && b.description !== null) stringField(b, "description", 500);
  const patch = {
    url: await urlField(b, config.allowPrivate, false),
    eventTypes: eventTypesField(b),
    description: b.description === undefined ? undefined : (b.description as string | null),
    enabled: b.enabled as boolean | undefined,
  };
  return updateEndpoint(sql, merchant, id, patch, chainId);
}
