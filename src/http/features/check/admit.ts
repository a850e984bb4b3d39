/** Who is asking: the rate limit a check request spends, and the client its on-chain share is counted for. */
import type { Server } from "bun";
import { createAuthenticator, type RequestCtx } from "../../plugins/auth";
import { principalId } from "../../../auth/principal";
import { clientAddress, clientKey } from "../../rate-limit";
import type { RouteDeps } from "../../deps";

/**
 * Spends the request's rate limit and names its client. With an Authorization header: the credential is looked up
 * (a bad one is a 401 that spends the address's bucket) and the credential's bucket is spent — the request is the
 * merchant's, not its address's (a per-merchant limit is spent here too); the client is the credential. Without
 * one: the client address's bucket, synchronously; the client is that address's rate-limit key.
 */
export function createCheckAdmission(deps: RouteDeps): (ctx: RequestCtx) => string | Promise<string> {
  const authenticate = createAuthenticator(deps);
  const opts = { trustedProxyHops: deps.config.TRUSTED_PROXY_HOPS, clientIpHeader: deps.config.CLIENT_IP_HEADER };
  return (ctx) => {
    if (ctx.request.headers.has("authorization")) return authenticate(ctx, false).then(principalId);
    const server = ctx.server as Server<unknown> | null;
    deps.limiter.hit(ctx.request, server);
    return clientKey(clientAddress(ctx.request, server, opts));
  };
}
