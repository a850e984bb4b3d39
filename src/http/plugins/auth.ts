/**
 * Credential macros. `merchantReader: true` authenticates the request (Bearer API key or SIWE session, or the
 * session cookie), checks it may read the `:merchant` of the path on the `chain_id` of the query, and puts the
 * `principal` in the context; `siweSession: true` requires a SIWE session. Both mark the response
 * `Cache-Control: private, no-store`, and a client whose credential is refused (401) spends a token of its rate
 * limit, so guessing keys is rate limited; a client with no tokens left is refused before its credential is looked up.
 *
 * A route's own `resolve` runs before these, so routes parse their parameters there: malformed input is a 400
 * before any credential check.
 */
import { Elysia } from "elysia";
import type { Server } from "bun";
import type { Sql } from "../../db/client";
import type { Config } from "../../common/config";
import { assertCanRead, authenticate, type Principal } from "../../auth/principal";
import { InvalidCredentialError } from "../../auth/errors";
import type { ClientLimiter } from "../rate-limit";
import { parseAddress, parseChainId, type RawParams } from "../params";

/** What the credential macros need. */
export type AuthPluginDeps = { sql: Sql; config: Config; defaultChainId: number; limiter: ClientLimiter };

type RequestCtx = { request: Request; server: unknown; set: { headers: Record<string, unknown> } };

/** Adds the `merchantReader`, `merchantWriter` and `siweSession` route options. */
export function authPlugin(deps: AuthPluginDeps) {
  const principalOf = async ({ request, server, set }: RequestCtx, cookies = true): Promise<Principal> => {
    set.headers["cache-control"] = "private, no-store";
    const srv = server as Server<unknown> | null;
    deps.limiter.assertOpen(request, srv);
    try {
      return await authenticate(deps.sql, deps.config, {
        authorization: request.headers.get("authorization"),
        cookie: cookies ? request.headers.get("cookie") : null,
      });
    } catch (err) {
      if (err instanceof InvalidCredentialError) deps.limiter.hit(request, srv);
      throw err;
    }
  };

  return new Elysia().macro({
    merchantReader: {
      async resolve(ctx) {
        const merchant = parseAddress(ctx.params as RawParams, "merchant");
        const chainId = parseChainId(ctx.query as RawParams, deps.defaultChainId);
        const principal = await principalOf(ctx);
        assertCanRead(principal, merchant, chainId);
        return { principal };
      },
    },
    /** As `merchantReader`, from the `Authorization` header only: a cross-site request cannot carry it. */
    merchantWriter: {
      async resolve(ctx) {
        const merchant = parseAddress(ctx.params as RawParams, "merchant");
        const chainId = parseChainId(ctx.query as RawParams, deps.defaultChainId);
        const principal = await principalOf(ctx, false);
        assertCanRead(principal, merchant, chainId);
        return { principal };
      },
    },
    siweSession: {
      async resolve(ctx) {
        const principal = await principalOf(ctx);
        if (principal.kind !== "session") {
          deps.limiter.hit(ctx.request, ctx.server as Server<unknown> | null);
          throw new InvalidCredentialError("this route needs a SIWE session token or cookie");
        }
        return { session: principal };
      },
    },
  });
}
