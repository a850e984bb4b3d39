import { Elysia, t } from "elysia";
import type { Sql } from "../../../db/client";
import type { Logger } from "../../../common/log";
import { createErrorHandler } from "../../plugins/error-handler";
import { bodyLimit, serveOptions } from "../../plugins/body-limit";
import { textGuard } from "../../plugins/text-guard";
import { createApiKey, listApiKeys, normalizeMerchant, revokeApiKey } from "../../../auth/api-keys";
import { constantTimeEqual } from "../../../auth/hash";
import { InvalidParameterError, NotFoundError, UnauthenticatedError } from "../../errors";
import type { DispatcherConfig } from "../../../webhooks/dispatcher";
import { deleteEndpoint, endpointMerchant, listAllEndpoints } from "../../../webhooks/endpoints";
import { sendTest } from "../../../webhooks/test-delivery";
import { bodyObject, createFromBody, stringField } from "../../../webhooks/input";
import type { Config } from "../../../common/config";
import { gatherStatus } from "./status";

/** What the control routes need: the database, the token, the webhook rules and (for the status) the config. */
export type ControlDeps = {
  sql: Sql;
  token: string;
  webhooks: DispatcherConfig;
  defaultChainId: number;
  config?: Config;
};

/** A running control listener. */
export type ControlListener = { url: string; stop: () => Promise<void> };

/**
 * Serves the control routes on their own listener, on 127.0.0.1 at a random port, never on the public one: only
 * local processes reach it, and only with the token.
 */
export function startControlListener(deps: ControlDeps & { log: Logger }): ControlListener {
  const app = new Elysia({ serve: serveOptions })
    .use(createErrorHandler(deps.log))
    .use(bodyLimit())
    .use(textGuard())
    .use(controlRoutes(deps))
    .use(webhookControlRoutes(deps))
    .use(statusControlRoute(deps))
    .listen({ hostname: "127.0.0.1", port: 0 });
  return {
    url: `http://127.0.0.1:${app.server!.port}`,
    stop: async () => {
      await app.stop(true);
    },
  };
}

/** Only callers with the control token get through. */
const guard =
  (token: string) =>
  ({ request }: { request: Request }) => {
    const given = request.headers.get("authorization")?.match(/^Bearer (\S+)$/)?.[1] ?? "";
    if (!constantTimeEqual(given, token)) throw new UnauthenticatedError();
  };

/** A merchant address of the body or query (a 400 naming it otherwise). */
function merchantOf(raw: string): string {
  try {
    return normalizeMerchant(raw);
  } catch (err) {
    throw new InvalidParameterError("merchant", (err as Error).message);
  }
}

/**
 * Local control routes for `bun run apikey` while this process holds the embedded database (PGlite is
 * single-process, so the CLI cannot open it): key management over HTTP, authorized by a random token that only
 * the data directory's owner can read (`control.json`, mode 0600). Hidden from the public docs.
 */
function controlRoutes(deps: ControlDeps) {
  return new Elysia({ prefix: "/internal/api-keys", name: "control" })
    .onBeforeHandle(guard(deps.token))
    .post("/", ({ body }) => createApiKey(deps.sql, { merchant: merchantOf(body.merchant), label: body.label }), {
      body: t.Object({ merchant: t.String(), label: t.Optional(t.String()) }),
      detail: { hide: true },
    })
    .get("/", ({ query }) => listApiKeys(deps.sql, query.merchant ? merchantOf(query.merchant) : undefined), {
      query: t.Object({ merchant: t.Optional(t.String()) }),
      detail: { hide: true },
    })
    .post(
      "/:id/revoke",
      async ({ params }) => {
        if (!(await revokeApiKey(deps.sql, params.id)))
          throw new NotFoundError(`no active API key with id ${params.id}`);
        return { id: params.id, revoked: true };
      },
      { detail: { hide: true } },
    );
}

/** `bun run webhook` against the process that holds the embedded database: same rules as the public routes. */
function webhookControlRoutes(deps: ControlDeps) {
  const notFound = (id: string) => new NotFoundError(`no webhook endpoint with id ${id}`, "id");
  return new Elysia({ prefix: "/internal/webhook-endpoints", name: "control-webhooks" })
    .onBeforeHandle(guard(deps.token))
    .post(
      "/",
      async ({ body, set }) => {
        const b = bodyObject(body, ["merchant", "url", "event_types", "description"]);
        const merchant = merchantOf(stringField(b, "merchant", 100) ?? "");
        const endpoint = await createFromBody(deps.sql, merchant, b, deps.webhooks, ["merchant"]);
        set.status = 201;
        return endpoint;
      },
      { detail: { hide: true } },
    )
    .get("/", ({ query }) => listAllEndpoints(deps.sql, query.merchant ? merchantOf(query.merchant) : null), {
      query: t.Object({ merchant: t.Optional(t.String()) }),
      detail: { hide: true },
    })
    .delete(
      "/:id",
      async ({ params }) => {
        if (!(await deleteEndpoint(deps.sql, null, params.id))) throw notFound(params.id);
        return { id: params.id, deleted: true };
      },
      { detail: { hide: true } },
    )
    .post(
      "/:id/test",
      async ({ params }) => {
        const merchant = await endpointMerchant(deps.sql, params.id);
        if (!merchant) throw notFound(params.id);
        return sendTest(deps.sql, { id: params.id, merchant, chainId: deps.defaultChainId }, deps.webhooks);
      },
      { detail: { hide: true } },
    );
}

/** `bun run status` against the process that holds the embedded database: the report computed here. */
function statusControlRoute(deps: ControlDeps) {
  return new Elysia({ prefix: "/internal/status", name: "control-status" }).onBeforeHandle(guard(deps.token)).get(
    "/",
    () => {
      if (!deps.config) throw new NotFoundError("this control endpoint has no status");
      return gatherStatus(deps.sql, deps.config);
    },
    { detail: { hide: true } },
  );
}
