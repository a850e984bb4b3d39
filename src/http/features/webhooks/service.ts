/** Route input of the webhook routes (paths, the replay and redeliver bodies, the delivery log's query) and their errors. */
import type { Sql } from "../../../db/client";
import { ApiError, ForbiddenError, InvalidParameterError, NotFoundError } from "../../errors";
import { nextLink } from "../../paging";
import { parseEnum, parseLimit, parseSince, parseAddress, type RawParams } from "../../params";
import { findDelivery, getEndpoint, listDeliveries, toDelivery } from "../../../webhooks/endpoints";
import { InvalidFieldError } from "../../../webhooks/errors";
import { eventTypesField, stringField, updateFromBody } from "../../../webhooks/input";
import type { DispatcherConfig } from "../../../webhooks/dispatcher";
import type { ReplayRequest } from "../../../webhooks/resend";
import { redeliverTargets, redeliverTo } from "../../../webhooks/resend";
import { EVENT_ID_PATTERN } from "../../../events/ids";
import { findEvent } from "../events/service";

const ENDPOINT_ID = /^we_[0-9a-f]{24}$/;
const DELIVERY_ID = /^wd_[0-9a-f]{24}$/;

/** The 404 of an endpoint the merchant does not have (or not in the credential's chain scope). */
export const endpointNotFound = (id: string) => new NotFoundError(`no endpoint ${id}`, "id");

/**
 * Merchant and endpoint id of the path. An id that is not of the `we_…` form names no endpoint: a 404, as any
 * unknown id (webhooks.md §3: "404 when unknown"); callers run after the credential check, so it is never a probe.
 */
export function endpointPath(params: unknown): { merchant: string; id: string } {
  const p = params as RawParams;
  const merchant = parseAddress(p, "merchant");
  const id = String(p.id ?? "");
  if (!ENDPOINT_ID.test(id)) throw endpointNotFound(id.slice(0, 80));
  return { merchant, id };
}

/** The merchant's endpoint `id` (of `chainId` or of every chain, when given), or a 404. */
export async function requireEndpoint(sql: Sql, merchant: string, id: string, chainId?: number) {
  const endpoint = await getEndpoint(sql, merchant, id, chainId);
  if (!endpoint) throw endpointNotFound(id);
  return endpoint;
}

/**
 * `PATCH …/:id`: the change in one UPDATE scoped to the merchant and `chainId` (no window between a check and the
 * write), a 404 when it matches nothing. A refused body on an endpoint the credential cannot see stays the 404 it
 * always was: the endpoint is read on that error path only.
 */
export async function patchEndpoint(
  sql: Sql,
  merchant: string,
  id: string,
  fields: Record<string, unknown>,
  config: Pick<DispatcherConfig, "allowPrivate">,
  chainId?: number,
) {
  const updated = await updateFromBody(sql, merchant, id, fields, config, chainId).catch(async (err) => {
    if (err instanceof InvalidFieldError && !(await getEndpoint(sql, merchant, id, chainId))) {
      throw endpointNotFound(id);
    }
    throw err;
  });
  if (!updated) throw endpointNotFound(id);
  return updated;
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

/** The body of a replay: `{since, until?, types?}`. */
export function replayRequest(b: Record<string, unknown>): ReplayRequest {
  return {
    since: timeField(b, "since", true)!,
    until: timeField(b, "until", false),
    types: eventTypesField(b, "types"),
  };
}

/** One page of an endpoint's delivery log (`status`, `limit`, `starting_after`) and the `Link` of the next one. */
export async function deliveriesPage(sql: Sql, url: string, params: unknown, query: unknown, chainId?: number) {
  const { merchant, id } = endpointPath(params);
  const q = query as RawParams;
  const status = parseEnum(q, "status", ["pending", "succeeded", "failed"] as const, undefined);
  const limit = parseLimit(q) ?? 100;
  const startingAfter = q.starting_after === undefined ? undefined : String(q.starting_after);
  if (startingAfter !== undefined && !DELIVERY_ID.test(startingAfter)) {
    throw new InvalidParameterError("starting_after", "starting_after must be a delivery id (wd_…)");
  }
  await requireEndpoint(sql, merchant, id, chainId);
  const after = startingAfter ? await findDelivery(sql, id, startingAfter) : undefined;
  if (startingAfter && !after) throw new InvalidParameterError("starting_after", "no such delivery of this endpoint");
  const rows = await listDeliveries(sql, id, { status, limit, after: startingAfter });
  const page = rows.slice(0, limit).map(toDelivery);
  return { page, link: rows.length > limit ? nextLink(url, page.at(-1)!.id) : undefined };
}

/**
 * `POST /v0/events/:merchant/:id/redeliver` `{endpoint_id?}`: the event again to that endpoint, or to every enabled
 * endpoint it matches; a 409 for an event a reorg withdrew. `chainId`: a chain-scoped credential's chain.
 */
export async function redeliver(
  sql: Sql,
  params: unknown,
  b: Record<string, unknown>,
  chainId?: number,
): Promise<{ enqueued: number }> {
  const p = params as RawParams;
  const merchant = parseAddress(p, "merchant");
  const eventId = String(p.id ?? "");
  if (!EVENT_ID_PATTERN.test(eventId)) throw new NotFoundError(`no event ${eventId.slice(0, 80)}`, "id");
  const endpointId = stringField(b, "endpoint_id", 64);
  if (endpointId !== undefined && !ENDPOINT_ID.test(endpointId)) {
    throw new InvalidParameterError("endpoint_id", "endpoint_id must be an endpoint id (we_…)");
  }
  const event = await findEvent(sql, merchant, eventId, chainId);
  if (!event) throw new NotFoundError(`no event ${eventId}`, "id");
  if (event.revertedBy) throw new EventWithdrawnError(eventId, event.revertedBy);
  // An endpoint of one chain never gets another chain's event.
  const ofChain = (w: { chain_id: number | null }) => w.chain_id === null || w.chain_id === event.chain_id;
  const named = endpointId ? await requireEndpoint(sql, merchant, endpointId, chainId) : undefined;
  // A chain-scoped credential sends again only to its own chain's endpoints (all-chain ones need an all-chain key).
  if (named && chainId !== undefined && named.chain_id !== chainId) {
    throw new ForbiddenError(
      `this credential acts on chain ${chainId} and cannot send to an all-chain endpoint: use an all-chain API key`,
    );
  }
  if (named && !ofChain(named)) {
    throw new InvalidParameterError(
      "endpoint_id",
      `endpoint ${endpointId} receives only chain ${named.chain_id}'s events`,
    );
  }
  const mine = (w: { chain_id: number | null }) => chainId === undefined || w.chain_id === chainId;
  const targets = named
    ? [named]
    : (await redeliverTargets(sql, merchant, event, chainId)).filter(ofChain).filter(mine);
  return { enqueued: await redeliverTo(sql, merchant, event, targets) };
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
