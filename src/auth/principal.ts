import type { Sql } from "../db/client";
import type { Config } from "../common/config";
import { ForbiddenError, UnauthenticatedError } from "../http/errors";
import { findApiKey } from "./api-keys";
import { constantTimeEqual } from "./hash";
import { findSession, readCookie, SESSION_COOKIE, SESSION_PREFIX } from "./sessions";

/** Who is calling: a merchant-scoped API key or SIWE session, or the admin key (every merchant). */
export type Principal =
  | { kind: "api_key"; merchant: string; keyId: string }
  | { kind: "session"; merchant: string; sessionId: string; chainId: number; expiresAt: string }
  | { kind: "admin"; merchant: null };

/** The one message for unknown, revoked and expired credentials, so a caller cannot tell which. */
export const INVALID_CREDENTIAL = "invalid, revoked or expired credential";

/** Longest token worth looking up: every real credential is far shorter. */
const MAX_TOKEN_LENGTH = 256;

/** The credential of a request: the Bearer token, else the session cookie. Throws on a malformed header. */
export function credentialOf(headers: { authorization?: string | null; cookie?: string | null }): string | undefined {
  const auth = headers.authorization?.trim();
  if (auth) {
    const m = /^Bearer +(\S+)$/i.exec(auth);
    if (!m)
      throw new UnauthenticatedError("malformed Authorization header: expected 'Bearer <API key or session token>'");
    return m[1];
  }
  return readCookie(headers.cookie, SESSION_COOKIE);
}

/** Resolves the credential of a request (Bearer header, or the session cookie); throws UnauthenticatedError. */
export async function authenticate(
  sql: Sql,
  config: Config,
  headers: { authorization?: string | null; cookie?: string | null },
): Promise<Principal> {
  const token = credentialOf(headers);
  if (!token) throw new UnauthenticatedError("missing credential: send 'Authorization: Bearer <API key>'");
  if (config.ADMIN_API_KEY && constantTimeEqual(token, config.ADMIN_API_KEY)) return { kind: "admin", merchant: null };
  if (token.length <= MAX_TOKEN_LENGTH) {
    if (token.startsWith("sk_")) {
      const key = await findApiKey(sql, token);
      if (key) return { kind: "api_key", merchant: key.merchant, keyId: key.id };
    } else if (token.startsWith(SESSION_PREFIX)) {
      const s = await findSession(sql, token);
      if (s)
        return { kind: "session", merchant: s.address, sessionId: s.id, chainId: s.chainId, expiresAt: s.expiresAt };
    }
  }
  throw new UnauthenticatedError(INVALID_CREDENTIAL);
}

/** Throws ForbiddenError unless the principal may read `merchant` (lowercase address). */
export function assertCanRead(principal: Principal, merchant: string): void {
  if (principal.kind === "admin") return;
  if (principal.merchant !== merchant.toLowerCase()) throw new ForbiddenError();
}
