/**
 * Credential macros. `merchantReader: true` authenticates the request (Bearer API key or SIWE session, or the
 * session cookie), checks it may read the `:merchant` of the path on the `chain_id` of the query (default: the
 * default chain), and puts the `principal` in the context; `merchantReader: "anyChain"` checks the `chain_id` only
 * when the query names one (routes that span chains, where a chain-scoped credential is narrowed to its own).
 * `merchantWriter` is the same for changes: the `Authorization` header only, and never the admin key (403
 * `admin_read_only`). `siweSession: true` requires a SIWE session. Both mark the response
 * `Cache-Control: private, no-store`. Every authenticated request spends a token of its credential's own bucket
 * (RATE_LIMIT_PER_KEY_PER_MINUTE, kept under the key's or session's id) and one of its merchant's bucket
 * (RATE_LIMIT_PER_MERCHANT_PER_MINUTE, over all its keys and sessions, shared by the API processes: the admin key
 * has none); a client whose credential is refused (401)
 * spends a token of its address's rate limit, so guessing keys is rate limited; a client with no tokens left is
 * refused before its credential is looked up.
 *
 * A route's own `resolve` runs before these, so routes parse their parameters there: malformed input is a 400
 * before any credential check.
 */
import { Elysia } from "elysia";
import type { Server } from "bun";
import type { Sql } from "../../db/client";
import type { Config } from "../../common/config";
import {
  ADMIN_READ_ONLY,
  assertCanRead,
  assertCanWrite,
  authenticate,
  principalId,
  type Principal,
} from "../../auth/principal";
import { InvalidCredentialError, ReadOnlyCredentialError } from "../../auth/errors";
import type { ClientLimiter, KeyLimiter } from "../rate-limit";
import type { MerchantLimiter } from "../merchant-limit";
import { parseAddress, parseChainId, type RawParams } from "../params";

/** What the credential macros need. */
export type AuthPluginDeps = {
  sql: Sql;
  config: Config;
  defaultChainId: number;
  limiter: ClientLimiter;
  credentialLimiter: KeyLimiter;
  merchantLimiter: MerchantLimiter;
};

/** The request as the authenticator reads it. */
export type RequestCtx = { request: Request; server: unknown; set: { headers: Record<string, unknown> } };

/** Authenticates a request under both rate limits; `cookies: false` reads only the `Authorization` header. */
export type Authenticator = (ctx: RequestCtx, cookies?: boolean) => Promise<Principal>;

/** The one way a route authenticates: the client's limit, the credential lookup, then the credential's limit. */
export function createAuthenticator(deps: Omit<AuthPluginDeps, "defaultChainId">): Authenticator {
  return async ({ request, server, set }, cookies = true) => {
    set.headers["cache-control"] = "private, no-store";
    const srv = server as Server<unknown> | null;
    deps.limiter.assertOpen(request, srv);
    let principal: Principal;
    try {
      principal = await authenticate(deps.sql, deps.config, {
        authorization: request.headers.get("authorization"),
        cookie: cookies ? request.headers.get("cookie") : null,
      });
    } catch (err) {
      if (err instanceof InvalidCredentialError) deps.limiter.hit(request, srv);
      throw err;
    }
    deps.credentialLimiter.hit(principalId(principal));
    if (principal.merchant !== null) {
      const leasing = deps.merchantLimiter.hit(principal.merchant);
      if (leasing) await leasing;
    }
    return principal;
  };
}

/** Adds the `merchantReader`, `merchantWriter` and `siweSession` route options. */
export function authPlugin(deps: AuthPluginDeps) {
  const principalOf = createAuthenticator(deps);

  /** The chain a request names: `chain_id` or the default chain; with "anyChain", only what the query names. */
  const chainOf = (query: unknown, mode: ChainMode): number | undefined =>
    mode === "anyChain" && (query as RawParams).chain_id === undefined
      ? undefined
      : parseChainId(query as RawParams, deps.defaultChainId);

  return new Elysia().macro({
    merchantReader: (mode: ChainMode) => ({
      async resolve(ctx) {
        const merchant = parseAddress(ctx.params as RawParams, "merchant");
        const chainId = chainOf(ctx.query, mode);
        const principal = await principalOf(ctx);
        assertCanRead(principal, merchant, chainId);
        return { principal };
      },
    }),
    /** As `merchantReader` for a change, from the `Authorization` header only: a cross-site request cannot carry it. */
    merchantWriter: (mode: ChainMode) => ({
      async resolve(ctx) {
        const merchant = parseAddress(ctx.params as RawParams, "merchant");
        const chainId = chainOf(ctx.query, mode);
        const principal = await principalOf(ctx, false);
        assertCanWrite(principal, merchant, chainId);
        return { principal };
      },
    }),
    siweSession: {
      async resolve(ctx) {
        const principal = await principalOf(ctx);
        if (principal.kind === "admin" && ctx.request.method !== "GET")
          throw new ReadOnlyCredentialError(ADMIN_READ_ONLY);
        if (principal.kind !== "session") {
          deps.limiter.hit(ctx.request, ctx.server as Server<unknown> | null);
          throw new InvalidCredentialError("this route needs a SIWE session token or cookie");
        }
        return { session: principal };
      },
    },
  });
}

/** `true`: the request's chain is its `chain_id` or the default chain; "anyChain": only a `chain_id` it names. */
type ChainMode = true | "anyChain";
