import { Elysia } from "elysia";
import type { Hex } from "viem";
import type { AppDeps } from "../../deps";
import { createAppLimiter, createAppMerchantLimiter, createCredentialLimiter } from "../../deps";
import type { Config } from "../../../common/config";
import { clearedSessionCookie, revokeSession, sessionCookie } from "../../../auth/sessions";
import { InvalidParameterError, MissingParameterError } from "../../errors";
import { createClientLimiter, type ClientLimiter, type KeyLimiter } from "../../rate-limit";
import type { MerchantLimiter } from "../../merchant-limit";
import { rateLimitPlugin } from "../../plugins/rate-limit";
import { authPlugin } from "../../plugins/auth";
import {
  LogoutResponse,
  logoutDetail,
  MeResponse,
  meDetail,
  NonceResponse,
  nonceDetail,
  SessionResponse,
  VerifyBody,
  verifyDetail,
} from "./model";
import { issueNonce, purgeExpired, signIn } from "./service";

/** Expired nonces and sessions are purged at most this often per process. */
const PURGE_INTERVAL_MS = 60_000;

/** Nonces a client may take per minute (each is a row until it is spent or purged). */
export const NONCE_PER_MINUTE = 60;

/**
 * True when the client reached the service over https: the request itself, or `X-Forwarded-Proto: https` when the
 * service is configured to sit behind a proxy (TRUSTED_PROXY_HOPS or CLIENT_IP_HEADER); otherwise that header is the
 * client's own word and is ignored.
 */
export function isHttps(request: Request, config: Pick<Config, "TRUSTED_PROXY_HOPS" | "CLIENT_IP_HEADER">): boolean {
  if (new URL(request.url).protocol === "https:") return true;
  if (config.TRUSTED_PROXY_HOPS === 0 && !config.CLIENT_IP_HEADER) return false;
  return request.headers.get("x-forwarded-proto")?.split(",")[0]?.trim().toLowerCase() === "https";
}

/** The request's host (`host[:port]`): its Host header, else the host of its URL. */
export function requestHost(request: Request): string {
  return request.headers.get("host") ?? new URL(request.url).host;
}

/** Before validation: a missing field is `missing_parameter`, a wrong one (left to the schema) `invalid_parameter`. */
function requireVerifyFields({ body }: { body: unknown }): void {
  if (typeof body !== "object" || body === null || Array.isArray(body)) {
    throw new InvalidParameterError("body", 'the body must be a JSON object {"message", "signature"}');
  }
  for (const field of ["message", "signature"]) {
    if ((body as Record<string, unknown>)[field] === undefined) throw new MissingParameterError(field);
  }
}

/**
 * SIWE sign-in routes under /v0/siwe. The unauthenticated ones write to the database, so they are rate limited per
 * client (the app's store in `deps.limiter`, else one of their own), and `GET /nonce` also to NONCE_PER_MINUTE per
 * client. Messages must name SIWE_DOMAIN, or without it the request's host (service.md's default).
 */
export function siweRoutes(
  deps: AppDeps & { limiter?: ClientLimiter; credentialLimiter?: KeyLimiter; merchantLimiter?: MerchantLimiter },
) {
  const { sql, config, chains } = deps;
  const pinned = config.SIWE_DOMAIN;
  const limiter = deps.limiter ?? createAppLimiter(config, deps.now);
  const credentialLimiter = deps.credentialLimiter ?? createCredentialLimiter(config, deps.now);
  const merchantLimiter = deps.merchantLimiter ?? createAppMerchantLimiter(deps);
  const nonceLimiter = createClientLimiter({
    now: deps.now,
    perMinute: NONCE_PER_MINUTE,
    trustedProxyHops: config.TRUSTED_PROXY_HOPS,
    clientIpHeader: config.CLIENT_IP_HEADER,
  });
  let lastPurge = 0;

  return new Elysia({ prefix: "/v0/siwe", name: "siwe" })
    .use(rateLimitPlugin(limiter))
    .use(
      authPlugin({ sql, config, defaultChainId: chains.defaultChainId, limiter, credentialLimiter, merchantLimiter }),
    )
    .get(
      "/nonce",
      async ({ request, server, set }) => {
        nonceLimiter.hit(request, server);
        if (Date.now() - lastPurge > PURGE_INTERVAL_MS) {
          lastPurge = Date.now();
          await purgeExpired(sql);
        }
        set.headers["cache-control"] = "no-store";
        return issueNonce(sql);
      },
      { rateLimit: true, response: NonceResponse, detail: nonceDetail },
    )
    .post(
      "/verify",
      async ({ request, body, set }) => {
        const { token, session } = await signIn(
          { sql, chains, sessionTtlSeconds: config.SESSION_TTL_S },
          { message: body.message, signature: body.signature as Hex, domain: pinned ?? requestHost(request) },
        );
        const maxAgeSeconds = (Date.parse(session.expiresAt) - Date.now()) / 1000;
        set.headers["set-cookie"] = sessionCookie(token, { maxAgeSeconds, secure: isHttps(request, config) });
        set.headers["cache-control"] = "private, no-store";
        return { token, address: session.address, expires_at: session.expiresAt };
      },
      {
        rateLimit: true,
        transform: requireVerifyFields,
        body: VerifyBody,
        response: SessionResponse,
        detail: verifyDetail,
      },
    )
    .get(
      "/me",
      ({ session }) => ({ address: session.merchant, chain_id: session.chainId, expires_at: session.expiresAt }),
      { siweSession: true, response: MeResponse, detail: meDetail },
    )
    .post(
      "/logout",
      async ({ request, set, session }) => {
        await revokeSession(sql, session.sessionId);
        set.headers["set-cookie"] = clearedSessionCookie({ secure: isHttps(request, config) });
        return { ok: true as const };
      },
      { siweSession: true, response: LogoutResponse, detail: logoutDetail },
    );
}
