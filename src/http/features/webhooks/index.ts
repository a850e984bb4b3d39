/** `/v0/webhook_endpoints/:merchant…` and `POST /v0/events/:merchant/:id/redeliver` (webhooks.md §3). */
import { Elysia } from "elysia";
import { parseAddress, type RawParams } from "../../params";
import { authPlugin } from "../../plugins/auth";
import type { RouteDeps } from "../../deps";
import { createKeyLimiter } from "../../rate-limit";
import type { Sql } from "../../../db/client";
import { dispatcherConfig, type DispatcherConfig } from "../../../webhooks/dispatcher";
import { deleteEndpoint, listEndpoints, rotateSecret } from "../../../webhooks/endpoints";
import { bodyObject, createFromBody, expirePreviousInField } from "../../../webhooks/input";
import { replayToEndpoint } from "../../../webhooks/resend";
import { sendTest } from "../../../webhooks/test-delivery";
import {
  deliveriesPage,
  endpointNotFound,
  endpointPath,
  patchEndpoint,
  redeliver,
  replayRequest,
  requireEndpoint,
} from "./service";
import { DeliveriesQueryDoc, details, EndpointParamsDoc, EventParamsDoc, MerchantParamsDoc } from "./model";
import { assertCanChange, chainScope, type Principal } from "../../../auth/principal";

/** `POST …/test` calls allowed per endpoint per minute (each sends a request to the merchant's server at once). */
export const TESTS_PER_MINUTE = 10;

type Ctx = {
  params: unknown;
  query?: unknown;
  request: Request;
  set: { status?: number | string; headers: Record<string, unknown> };
  principal: Principal;
};

/** The chain a chain-scoped credential acts on (undefined: every chain): it sees endpoints of that chain or all. */
const scope = (ctx: { principal: Principal }) => chainScope(ctx.principal) ?? undefined;

/**
 * The endpoint a change names, as the credential sees it (a 404 otherwise), refused (403) unless the credential may
 * change it: a chain-scoped credential reads all-chain endpoints but changes only its own chain's (assertCanChange).
 */
async function changeable(sql: Sql, ctx: { params: unknown; principal: Principal }) {
  const { merchant, id } = endpointPath(ctx.params);
  const endpoint = await requireEndpoint(sql, merchant, id, scope(ctx));
  assertCanChange(ctx.principal, endpoint.chain_id);
  return endpoint;
}

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

const merchantOf = (params: unknown) => parseAddress(params as RawParams, "merchant");
/** What the route groups share: the database, the dispatcher's settings and the credential macros. */
type Shared = { deps: RouteDeps; sql: Sql; config: DispatcherConfig; auth: ReturnType<typeof authPlugin> };

/** The webhook routes. */
export function webhookRoutes(deps: RouteDeps) {
  const auth = authPlugin({ ...deps, defaultChainId: deps.chains.defaultChainId });
  const shared: Shared = { deps, sql: deps.sql, config: dispatcherConfig(deps.config), auth };
  return new Elysia({ name: "webhooks" })
    .use(endpointRoutes(shared))
    .use(endpointActionRoutes(shared))
    .use(redeliverRoute(shared));
}

/** Create, list, read, change, delete an endpoint and rotate its secret. */
function endpointRoutes({ sql, config, auth }: Shared) {
  return new Elysia({ prefix: "/v0/webhook_endpoints", name: "webhook-endpoints" })
    .use(bodyFields)
    .use(auth)
    .post(
      "/:merchant",
      async ({ params, fields, set, principal }: BodyCtx) => {
        // Made by a chain-scoped credential, the endpoint receives that chain's events only.
        const endpoint = await createFromBody(sql, merchantOf(params), fields, config, [], chainScope(principal));
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
    .get("/:merchant", (ctx: Ctx) => listEndpoints(sql, merchantOf(ctx.params), scope(ctx)), {
      merchantReader: "anyChain",
      params: MerchantParamsDoc,
      detail: details.list,
    })
    .get(
      "/:merchant/:id",
      (ctx: Ctx) => {
        const { merchant, id } = endpointPath(ctx.params);
        return requireEndpoint(sql, merchant, id, scope(ctx));
      },
      { merchantReader: "anyChain", params: EndpointParamsDoc, detail: details.get },
    )
    .patch(
      "/:merchant/:id",
      async (ctx: BodyCtx) => {
        const { merchant, id } = endpointPath(ctx.params);
        await changeable(sql, ctx);
        return patchEndpoint(sql, merchant, id, ctx.fields, config, scope(ctx));
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
        const { merchant, id } = endpointPath(ctx.params);
        await changeable(sql, ctx);
        if (!(await deleteEndpoint(sql, merchant, id, scope(ctx)))) throw endpointNotFound(id);
        return { id, deleted: true as const };
      },
      { fields: [], merchantWriter: "anyChain", params: EndpointParamsDoc, detail: details.remove },
    )
    .post(
      "/:merchant/:id/rotate_secret",
      async (ctx: BodyCtx) => {
        const { merchant, id } = endpointPath(ctx.params);
        await changeable(sql, ctx);
        const expireIn = expirePreviousInField(ctx.fields);
        const rotated = await rotateSecret(sql, merchant, id, config.secretKey, scope(ctx), expireIn);
        if (!rotated) throw endpointNotFound(id);
        return rotated;
      },
      {
        fields: ["expire_previous_in"],
        merchantWriter: "anyChain",
        params: EndpointParamsDoc,
        detail: details.rotate,
      },
    );
}

/** Send a test event (TESTS_PER_MINUTE per endpoint), read the delivery log, replay events. */
function endpointActionRoutes({ deps, sql, config, auth }: Shared) {
  const tests = createKeyLimiter({ perMinute: TESTS_PER_MINUTE, now: deps.now });
  return new Elysia({ prefix: "/v0/webhook_endpoints", name: "webhook-endpoint-actions" })
    .use(bodyFields)
    .use(auth)
    .post(
      "/:merchant/:id/test",
      async (ctx: Ctx) => {
        const { merchant, id } = endpointPath(ctx.params);
        const endpoint = await changeable(sql, ctx);
        tests.hit(id);
        const chainId = endpoint.chain_id ?? scope(ctx) ?? deps.chains.defaultChainId;
        return sendTest(sql, { id, merchant, chainId }, config);
      },
      { fields: [], merchantWriter: "anyChain", params: EndpointParamsDoc, detail: details.test },
    )
    .get(
      "/:merchant/:id/deliveries",
      async (ctx: Ctx) => {
        const { params, query, request, set } = ctx;
        const { page, link } = await deliveriesPage(sql, request.url, params, query, scope(ctx));
        if (link) set.headers["link"] = link;
        return page;
      },
      { merchantReader: "anyChain", params: EndpointParamsDoc, query: DeliveriesQueryDoc, detail: details.deliveries },
    )
    .post(
      "/:merchant/:id/replay",
      async (ctx: BodyCtx) => {
        const { merchant, id } = endpointPath(ctx.params);
        const req = replayRequest(ctx.fields);
        const endpoint = await changeable(sql, ctx);
        return replayToEndpoint(sql, merchant, endpoint, req, endpoint.chain_id ?? scope(ctx));
      },
      {
        fields: ["since", "until", "types"],
        merchantWriter: "anyChain",
        params: EndpointParamsDoc,
        detail: details.replay,
      },
    );
}

/** `POST /v0/events/:merchant/:id/redeliver`. */
function redeliverRoute({ sql, auth }: Shared) {
  return new Elysia({ name: "event-redeliver" })
    .use(bodyFields)
    .use(auth)
    .post("/v0/events/:merchant/:id/redeliver", (ctx: BodyCtx) => redeliver(sql, ctx.params, ctx.fields, scope(ctx)), {
      fields: ["endpoint_id"],
      merchantWriter: "anyChain",
      params: EventParamsDoc,
      detail: details.redeliver,
    });
}
