import type { Server } from "bun";
import { Elysia } from "elysia";
import type { Hex } from "viem";
import type { AppDeps } from "../../deps";
import { authenticate, type Principal } from "../../../auth/principal";
import { clearedSessionCookie, revokeSession, sessionCookie } from "../../../auth/sessions";
import { InvalidParameterError, MissingParameterError, RateLimitedError, UnauthenticatedError } from "../../errors";
import { clientKey, createRateLimiter } from "../../rate-limit";
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

/** True when the client reached the service over https (directly or through a proxy that says so). */
function isHttps(request: Request): boolean {
  if (new URL(request.url).protocol === "https:") return true;
  return request.headers.get("x-forwarded-proto")?.split(",")[0]?.trim().toLowerCase() === "https";
}

/** The request's `Host` (what SIWE messages must name when SIWE_DOMAIN is unset). */
function hostOf(request: Request): string {
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

function requireSession(p: Principal): Extract<Principal, { kind: "session" }> {
  if (p.kind !== "session") throw new UnauthenticatedError("this route needs a SIWE session token or cookie");
  return p;
}

/** SIWE sign-in routes under /v0/siwe. */
export function siweRoutes(deps: AppDeps) {
  const { sql, config, chains } = deps;
  // Unauthenticated routes that write to the database: limited per client address.
  const limiter = createRateLimiter({ perMinute: config.RATE_LIMIT_PER_MINUTE });
  let lastPurge = 0;

  const limit = (request: Request, server: Server<unknown> | null | undefined) => {
    const decision = limiter.check(clientKey(request, server));
    if (!decision.ok) throw new RateLimitedError(decision.retryAfterSeconds);
  };

  const principalOf = (request: Request) =>
    authenticate(sql, config, {
      authorization: request.headers.get("authorization"),
      cookie: request.headers.get("cookie"),
    });

  return new Elysia({ prefix: "/v0/siwe", name: "siwe" })
    .get(
      "/nonce",
      async ({ request, server, set }) => {
        limit(request, server);
        if (Date.now() - lastPurge > PURGE_INTERVAL_MS) {
          lastPurge = Date.now();
          await purgeExpired(sql);
        }
        set.headers["cache-control"] = "no-store";
        return issueNonce(sql);
      },
      {
        response: NonceResponse,
        detail: nonceDetail,
      },
    )
    .post(
      "/verify",
      async ({ request, server, body, set }) => {
        limit(request, server);
        const { token, session } = await signIn(
          { sql, chains, sessionTtlSeconds: config.SESSION_TTL_S },
          { message: body.message, signature: body.signature as Hex, domain: config.SIWE_DOMAIN ?? hostOf(request) },
        );
        const maxAgeSeconds = (Date.parse(session.expiresAt) - Date.now()) / 1000;
        set.headers["set-cookie"] = sessionCookie(token, { maxAgeSeconds, secure: isHttps(request) });
        set.headers["cache-control"] = "no-store";
        return { token, address: session.address, expires_at: session.expiresAt };
      },
      {
        transform: requireVerifyFields,
        body: VerifyBody,
        response: SessionResponse,
        detail: verifyDetail,
      },
    )
    .get(
      "/me",
      async ({ request, set }) => {
        const s = requireSession(await principalOf(request));
        set.headers["cache-control"] = "no-store";
        return { address: s.merchant, chain_id: s.chainId, expires_at: s.expiresAt };
      },
      { response: MeResponse, detail: meDetail },
    )
    .post(
      "/logout",
      async ({ request, set }) => {
        const s = requireSession(await principalOf(request));
        await revokeSession(sql, s.sessionId);
        set.headers["set-cookie"] = clearedSessionCookie({ secure: isHttps(request) });
        return { ok: true as const };
      },
      { response: LogoutResponse, detail: logoutDetail },
    );
}
