import { Elysia, t } from "elysia";
import type { Sql } from "../../../db/client";
import type { Logger } from "../../../common/log";
import { createErrorHandler } from "../../plugins/error-handler";
import { bodyLimit, serveOptions } from "../../plugins/body-limit";
import { createApiKey, listApiKeys, normalizeMerchant, revokeApiKey } from "../../../auth/api-keys";
import { constantTimeEqual } from "../../../auth/hash";
import { InvalidParameterError, NotFoundError, UnauthenticatedError } from "../../errors";

/** A running control listener. */
export type ControlListener = { url: string; stop: () => Promise<void> };

/**
 * Serves the control routes on their own listener, on 127.0.0.1 at a random port, never on the public one: only
 * local processes reach it, and only with the token.
 */
export function startControlListener(deps: { sql: Sql; token: string; log: Logger }): ControlListener {
  const app = new Elysia({ serve: serveOptions })
    .use(createErrorHandler(deps.log))
    .use(bodyLimit())
    .use(controlRoutes(deps))
    .listen({ hostname: "127.0.0.1", port: 0 });
  return {
    url: `http://127.0.0.1:${app.server!.port}`,
    stop: async () => {
      await app.stop(true);
    },
  };
}

/**
 * Local control routes for `bun run apikey` while this process holds the embedded database (PGlite is
 * single-process, so the CLI cannot open it): key management over HTTP, authorized by a random token that only
 * the data directory's owner can read (`control.json`, mode 0600). Hidden from the public docs.
 */
function controlRoutes(deps: { sql: Sql; token: string }) {
  const guard = ({ request }: { request: Request }) => {
    const given = request.headers.get("authorization")?.match(/^Bearer (\S+)$/)?.[1] ?? "";
    if (!constantTimeEqual(given, deps.token)) throw new UnauthenticatedError();
  };
  const merchantOf = (raw: string) => {
    try {
      return normalizeMerchant(raw);
    } catch (err) {
      throw new InvalidParameterError("merchant", (err as Error).message);
    }
  };
  return new Elysia({ prefix: "/internal/api-keys", name: "control" })
    .onBeforeHandle(guard)
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
