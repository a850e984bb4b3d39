/** `/v0/webhook_endpoints/:merchant…` and `POST /v0/events/:merchant/:id/redeliver` (webhooks.md §3). */
import { Elysia } from "elysia";
import { parseAddress, type RawParams } from "../../params";
import { authPlugin } from "../../plugins/auth";
import type { RouteDeps } from "../../deps";
import { NotFoundError } from "../../errors";
import { createKeyLimiter } from "../../rate-limit";
import type { Sql } from "../../../db/client";
import { dispatcherConfig, type DispatcherConfig } from "../../../webhooks/dispatcher";
import { deleteEndpoint, listEndpoints, rotateSecret } from "../../../webhooks/endpoints";
import { bodyObject, createFromBody, updateFromBody } from "../../../webhooks/input";
import { replayToEndpoint } from "../../../webhooks/resend";
import { sendTest } from "../../../webhooks/test-delivery";
import { deliveriesPage, endpointPath, redeliver, replayRequest, requireEndpoint } from "./service";
import { DeliveriesQueryDoc, details, EndpointParamsDoc, EventParamsDoc, MerchantParamsDoc } from "./model";

/** `POST …/test` calls allowed per endpoint per minute (each sends a request to the merchant's server at once). */
export const TESTS_PER_MINUTE = 10;

type Ctx = {
  params: unknown;
  query?: unknown;
  request: Request;
  set: { status?: number | string; headers: Record<string, unknown> };
};

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
const notFound = (id: string) => new NotFoundError(`no endpoint ${id}`, "id");

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
      async ({ params, fields, set }: BodyCtx) => {
        const endpoint = await createFromBody(sql, merchantOf(params), fields, config);
        set.status = 201;
        return endpoint;
      },
      {
        fields: ["url", "event_types", "description"],
        merchantWriter: true,
        params: MerchantParamsDoc,
        detail: details.create,
      },
    )
    .get("/:merchant", ({ params }: Ctx) => listEndpoints(sql, merchantOf(params)), {
      merchantReader: true,
      params: MerchantParamsDoc,
      detail: details.list,
    })
    .get(
      "/:merchant/:id",
      ({ params }: Ctx) => {
        const { merchant, id } = endpointPath(params);
        return requireEndpoint(sql, merchant, id);
      },
      { merchantReader: true, params: EndpointParamsDoc, detail: details.get },
    )
    .patch(
      "/:merchant/:id",
      async ({ params, fields }: BodyCtx) => {
        const { merchant, id } = endpointPath(params);
        const updated = await updateFromBody(sql, merchant, id, fields, config);
        if (!updated) throw notFound(id);
        return updated;
      },
      {
        fields: ["url", "event_types", "description", "enabled"],
        merchantWriter: true,
        params: EndpointParamsDoc,
        detail: details.update,
      },
    )
    .delete(
      "/:merchant/:id",
      async ({ params }: Ctx) => {
        const { merchant, id } = endpointPath(params);
        if (!(await deleteEndpoint(sql, merchant, id))) throw notFound(id);
        return { id, deleted: true as const };
      },
      { fields: [], merchantWriter: true, params: EndpointParamsDoc, detail: details.remove },
    )
    .post(
      "/:merchant/:id/rotate_secret",
      async ({ params }: Ctx) => {
        const { merchant, id } = endpointPath(params);
        const rotated = await rotateSecret(sql, merchant, id, config.secretKey);
        if (!rotated) throw notFound(id);
        return rotated;
      },
      { fields: [], merchantWriter: true, params: EndpointParamsDoc, detail: details.rotate },
    );
}

/** Send a test event (TESTS_PER_MINUTE per endpoint), read the delivery log, replay events. */
function endpointActionRoutes({ deps, sql, config, auth }: Shared) {
  const tests = createKeyLimiter({ perMinute: TESTS_PER_MINUTE });
  return new Elysia({ prefix: "/v0/webhook_endpoints", name: "webhook-endpoint-actions" })
    .use(bodyFields)
    .use(auth)
    .post(
      "/:merchant/:id/test",
      async ({ params }: Ctx) => {
        const { merchant, id } = endpointPath(params);
        await requireEndpoint(sql, merchant, id);
        tests.hit(id);
        return sendTest(sql, { id, merchant, chainId: deps.chains.defaultChainId }, config);
      },
      { fields: [], merchantWriter: true, params: EndpointParamsDoc, detail: details.test },
    )
    .get(
      "/:merchant/:id/deliveries",
      async ({ params, query, request, set }: Ctx) => {
        const { page, link } = await deliveriesPage(sql, request.url, params, query);
        if (link) set.headers["link"] = link;
        return page;
      },
      { merchantReader: true, params: EndpointParamsDoc, query: DeliveriesQueryDoc, detail: details.deliveries },
    )
    .post(
      "/:merchant/:id/replay",
      async ({ params, fields }: BodyCtx) => {
        const { merchant, id } = endpointPath(params);
        const req = replayRequest(fields);
        return replayToEndpoint(sql, merchant, await requireEndpoint(sql, merchant, id), req);
      },
      { fields: ["since", "until", "types"], merchantWriter: true, params: EndpointParamsDoc, detail: details.replay },
    );
}

/** `POST /v0/events/:merchant/:id/redeliver`. */
function redeliverRoute({ sql, auth }: Shared) {
  return new Elysia({ name: "event-redeliver" })
    .use(bodyFields)
    .use(auth)
    .post("/v0/events/:merchant/:id/redeliver", ({ params, fields }: BodyCtx) => redeliver(sql, params, fields), {
      fields: ["endpoint_id"],
      merchantWriter: true,
      params: EventParamsDoc,
      detail: details.redeliver,
    });
}
