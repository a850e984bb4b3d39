/** `/v0/webhook_endpoints/:merchant…` and `POST /v0/events/:merchant/:id/redeliver` (webhooks.md §3). */
import { Elysia } from "elysia";
import { parseAddress, parseEnum, parseLimit, type RawParams } from "../../params";
import { authPlugin } from "../../plugins/auth";
import { nextLink } from "../../paging";
import type { RouteDeps } from "../../deps";
import { InvalidParameterError, NotFoundError } from "../../errors";
import { dispatcherConfig } from "../../../webhooks/dispatcher";
import {
  deleteEndpoint,
  enqueue,
  findDelivery,
  getEndpoint,
  listDeliveries,
  listEndpoints,
  rotateSecret,
  toDelivery,
  updateEndpoint,
} from "../../../webhooks/endpoints";
import { sendTest } from "../../../webhooks/test-delivery";
import {
  bodyObject,
  createFromBody,
  endpointsSent,
  EventWithdrawnError,
  eventTypesField,
  replayable,
  replayTypes,
  stringField,
  timeField,
  urlField,
} from "./service";
import { findEvent } from "../events/service";
import { standing } from "../../../events/queries";
import { DeliveriesQueryDoc, details, EndpointParamsDoc, EventParamsDoc, MerchantParamsDoc } from "./model";
import { EVENT_ID_PATTERN } from "../../../events/ids";
import { chainScope, type Principal } from "../../../auth/principal";

const ENDPOINT_ID = /^we_[0-9a-f]{24}$/;
const DELIVERY_ID = /^wd_[0-9a-f]{24}$/;

type Ctx = {
  params: unknown;
  query?: unknown;
  set: { status?: number | string; headers: Record<string, unknown> };
  principal: Principal;
};

/** The chain a chain-scoped credential acts on (undefined: every chain): it sees endpoints of that chain or all. */
const scope = (ctx: { principal: Principal }) => chainScope(ctx.principal) ?? undefined;

/** The context of a route with the `fields` option: its body's fields. */
type BodyCtx = Ctx & { fields: Record<string, unknown> };

/**
 * The `fields` route option, every route's body rule (webhooks.md §3): the JSON body must be an object of those
 * fields only (`[]`: no body, an empty one or `{}`), else a 400 naming the field. It is checked before the
 * credential and the handler, so a refused body changes nothing; the route reads it as `fields`.
 */
const bodyFields = new Elysia({ name: "webhook-body-fields" }).macro({
  fields: (allowed: readonly string[]) => ({
    resolve: ({ body }: { body: unknown }) => ({ fields: bodyObject(body, allowed) }),
  }),
});

/** Merchant and endpoint id of the path (a 400 for a malformed id). */
function path(params: unknown): { merchant: string; id: string } {
  const p = params as RawParams;
  const merchant = parseAddress(p, "merchant");
  const id = String(p.id ?? "");
  if (!ENDPOINT_ID.test(id)) throw new InvalidParameterError("id", "id must be an endpoint id (we_…)");
  return { merchant, id };
}

/** The webhook routes. */
export function webhookRoutes(deps: RouteDeps) {
  const config = dispatcherConfig(deps.config);
  const allowPrivate = config.allowPrivate;
  const mustExist = async (merchant: string, id: string, chainId?: number) => {
    const endpoint = await getEndpoint(deps.sql, merchant, id, chainId);
    if (!endpoint) throw new NotFoundError(`no endpoint ${id}`, "id");
    return endpoint;
  };
  const auth = authPlugin({ ...deps, defaultChainId: deps.chains.defaultChainId });
  const endpoints = new Elysia({ prefix: "/v0/webhook_endpoints", name: "webhook-endpoints" })
    .use(bodyFields)
    .use(auth)
    .post(
      "/:merchant",
      async ({ params, fields, set, principal }: BodyCtx) => {
        const merchant = parseAddress(params as RawParams, "merchant");
        // Made by a chain-scoped credential, the endpoint receives that chain's events only.
        const endpoint = await createFromBody(deps.sql, merchant, fields, config, [], chainScope(principal));
        set.status = 201;
        return endpoint;
      },
      {
        fields: ["url", "event_types", "description"],
        merchantWriter: "anyChain",
        params: MerchantParamsDoc,
        detail: details.create,
      },
    )
    .get(
      "/:merchant",
      (ctx: Ctx) => listEndpoints(deps.sql, parseAddress(ctx.params as RawParams, "merchant"), scope(ctx)),
      {
        merchantReader: "anyChain",
        params: MerchantParamsDoc,
        detail: details.list,
      },
    )
    .get(
      "/:merchant/:id",
      (ctx: Ctx) => {
        const { merchant, id } = path(ctx.params);
        return mustExist(merchant, id, scope(ctx));
      },
      {
        merchantReader: "anyChain",
        params: EndpointParamsDoc,
        detail: details.get,
      },
    )
    .patch(
      "/:merchant/:id",
      async ({ params, fields: b, principal }: BodyCtx) => {
        const { merchant, id } = path(params);
        if (b.enabled !== undefined && typeof b.enabled !== "boolean") {
          throw new InvalidParameterError("enabled", "enabled must be true or false");
        }
        if (b.description !== undefined && b.description !== null) stringField(b, "description", 500);
        const patch = {
          url: await urlField(b, allowPrivate, false),
          eventTypes: eventTypesField(b),
          description: b.description === undefined ? undefined : (b.description as string | null),
          enabled: b.enabled as boolean | undefined,
        };
        await mustExist(merchant, id, scope({ principal }));
        const updated = await updateEndpoint(deps.sql, merchant, id, patch);
        if (!updated) throw new NotFoundError(`no endpoint ${id}`, "id");
        return updated;
      },
      {
        fields: ["url", "event_types", "description", "enabled"],
        merchantWriter: "anyChain",
        params: EndpointParamsDoc,
        detail: details.update,
      },
    )
    .delete(
      "/:merchant/:id",
      async (ctx: Ctx) => {
        const { merchant, id } = path(ctx.params);
        await mustExist(merchant, id, scope(ctx));
        if (!(await deleteEndpoint(deps.sql, merchant, id))) throw new NotFoundError(`no endpoint ${id}`, "id");
        return { id, deleted: true as const };
      },
      { fields: [], merchantWriter: "anyChain", params: EndpointParamsDoc, detail: details.remove },
    )
    .post(
      "/:merchant/:id/rotate_secret",
      async (ctx: Ctx) => {
        const { merchant, id } = path(ctx.params);
        await mustExist(merchant, id, scope(ctx));
        const rotated = await rotateSecret(deps.sql, merchant, id, config.secretKey);
        if (!rotated) throw new NotFoundError(`no endpoint ${id}`, "id");
        return rotated;
      },
      { fields: [], merchantWriter: "anyChain", params: EndpointParamsDoc, detail: details.rotate },
    )
    .post(
      "/:merchant/:id/test",
      async (ctx: Ctx) => {
        const { merchant, id } = path(ctx.params);
        const endpoint = await mustExist(merchant, id, scope(ctx));
        const chainId = endpoint.chain_id ?? scope(ctx) ?? deps.chains.defaultChainId;
        return sendTest(deps.sql, { id, merchant, chainId }, config);
      },
      { fields: [], merchantWriter: "anyChain", params: EndpointParamsDoc, detail: details.test },
    )
    .get(
      "/:merchant/:id/deliveries",
      async (ctx: Ctx & { request: Request }) => {
        const { merchant, id } = path(ctx.params);
        const q = ctx.query as RawParams;
        const status = parseEnum(q, "status", ["pending", "succeeded", "failed"] as const, undefined);
        const limit = parseLimit(q) ?? 100;
        const startingAfter = q.starting_after === undefined ? undefined : String(q.starting_after);
        if (startingAfter !== undefined && !DELIVERY_ID.test(startingAfter)) {
          throw new InvalidParameterError("starting_after", "starting_after must be a delivery id (wd_…)");
        }
        await mustExist(merchant, id, scope(ctx));
        const after = startingAfter ? await findDelivery(deps.sql, id, startingAfter) : undefined;
        if (startingAfter && !after)
          throw new InvalidParameterError("starting_after", "no such delivery of this endpoint");
        const rows = await listDeliveries(deps.sql, id, {
          status,
          limit,
          after: after && { createdAt: after.created_at, id: after.id },
        });
        const page = rows.slice(0, limit).map(toDelivery);
        if (rows.length > limit) ctx.set.headers["link"] = nextLink(ctx.request.url, page.at(-1)!.id);
        return page;
      },
      { merchantReader: "anyChain", params: EndpointParamsDoc, query: DeliveriesQueryDoc, detail: details.deliveries },
    )
    .post(
      "/:merchant/:id/replay",
      async ({ params, fields: b, principal }: BodyCtx) => {
        const { merchant, id } = path(params);
        const since = timeField(b, "since", true)!;
        const until = timeField(b, "until", false);
        const requested = eventTypesField(b, "types");
        const endpoint = await mustExist(merchant, id, scope({ principal }));
        const types = replayTypes(endpoint.event_types, requested);
        if (types.length === 0) return { enqueued: 0 };
        const sql = deps.sql;
        const chainId = endpoint.chain_id ?? scope({ principal });
        const where = sql`e.merchant = ${merchant} and e.ts >= ${since} ${until ? sql`and e.ts < ${until}` : sql``}
          ${chainId === undefined ? sql`` : sql`and e.chain_id = ${chainId}`}
          and ${replayable(sql)} ${types.includes("*") ? sql`` : sql`and e.type = any(${types})`}`;
        return { enqueued: await enqueue(sql, "replay", { endpointId: id, where }) };
      },
      {
        fields: ["since", "until", "types"],
        merchantWriter: "anyChain",
        params: EndpointParamsDoc,
        detail: details.replay,
      },
    );

  const redeliver = new Elysia({ name: "event-redeliver" })
    .use(bodyFields)
    .use(auth)
    .post(
      "/v0/events/:merchant/:id/redeliver",
      async ({ params, fields: b, principal }: BodyCtx) => {
        const p = params as RawParams;
        const merchant = parseAddress(p, "merchant");
        const eventId = String(p.id ?? "");
        if (!EVENT_ID_PATTERN.test(eventId)) throw new InvalidParameterError("id", "id must be an event id (evt_…)");
        const endpointId = stringField(b, "endpoint_id", 64);
        if (endpointId !== undefined && !ENDPOINT_ID.test(endpointId)) {
          throw new InvalidParameterError("endpoint_id", "endpoint_id must be an endpoint id (we_…)");
        }
        const sql = deps.sql;
        const event = await findEvent(sql, merchant, eventId, scope({ principal }));
        if (!event) throw new NotFoundError(`no event ${eventId}`, "id");
        if (event.revertedBy) throw new EventWithdrawnError(eventId, event.revertedBy);
        // A webhook.test belongs to the endpoint it was written for, an event.reverted to those that were sent it
        // (the ones sent the event it withdraws); any other event goes to the endpoints it matches.
        const testOf =
          event.type === "webhook.test" ? (event.data.object as { endpoint_id?: string })?.endpoint_id : null;
        const sentTo = event.type === "event.reverted" ? await endpointsSent(sql, eventId) : null;
        const matches = (w: { id: string; event_types: string[] }) =>
          testOf !== null
            ? w.id === testOf
            : sentTo !== null
              ? sentTo.has(w.id)
              : w.event_types.includes("*") || w.event_types.includes(event.type);
        // An endpoint of one chain never gets another chain's event.
        const ofChain = (w: { chain_id: number | null }) => w.chain_id === null || w.chain_id === event.chain_id;
        const named = endpointId ? await mustExist(merchant, endpointId, scope({ principal })) : undefined;
        if (named && !ofChain(named)) {
          throw new InvalidParameterError(
            "endpoint_id",
            `endpoint ${endpointId} receives only chain ${named.chain_id}'s events`,
          );
        }
        const targets = named
          ? [named]
          : (await listEndpoints(sql, merchant, scope({ principal }))).filter(
              (w) => w.enabled && matches(w) && ofChain(w),
            );
        let enqueued = 0;
        for (const w of targets) {
          const where = sql`e.merchant = ${merchant} and e.seq = ${event.seq} and ${standing(sql)}`;
          enqueued += await enqueue(sql, "redeliver", { endpointId: w.id, where });
        }
        return { enqueued };
      },
      {
        fields: ["endpoint_id"],
        merchantWriter: "anyChain",
        params: EventParamsDoc,
        detail: details.redeliver,
      },
    );
  return new Elysia({ name: "webhooks" }).use(endpoints).use(redeliver);
}
