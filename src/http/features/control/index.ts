import { Elysia, t } from "elysia";
import type { Sql } from "../../../db/client";
import { createApiKey, listApiKeys, normalizeMerchant, revokeApiKey } from "../../../auth/api-keys";
import { constantTimeEqual } from "../../../auth/hash";
import { InvalidParameterError, NotFoundError, UnauthenticatedError } from "../../errors";

/**
 * Local control routes for `bun run apikey` while this process holds the embedded database (PGlite is
 * single-process, so the CLI cannot open it): key management over HTTP, authorized by a random token that only
 * the data directory's owner can read (`control.json`, mode 0600). Hidden from the public docs.
 */
export function controlRoutes(deps: { sql: Sql; token: string }) {
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
