import type { Sql } from "../db/client";
import type { Config } from "../common/config";
import { ForbiddenCredentialError, InvalidCredentialError, ReadOnlyCredentialError } from "./errors";
import { findApiKey } from "./api-keys";
import { constantTimeEqual } from "./hash";
import { findSession, readCookie, SECURE_SESSION_COOKIE, SESSION_COOKIE, SESSION_PREFIX } from "./sessions";

/**
 * Who is calling: a merchant-scoped API key or SIWE session, or the admin key (every merchant, read only). A session
 * acts on the chain it was signed for; a key minted by a session on that chain too (`chainId`), a CLI key on all.
 */
export type Principal =
  | { kind: "api_key"; merchant: string; keyId: string; chainId: number | null }
  | { kind: "session"; merchant: string; sessionId: string; chainId: number; expiresAt: string; createdAt: string }
  | { kind: "admin"; merchant: null };

/** The one message for unknown, revoked and expired credentials, so a caller cannot tell which. */
export const INVALID_CREDENTIAL = "invalid, revoked or expired credential";

/** Longest token worth looking up: every real credential is far shorter. */
const MAX_TOKEN_LENGTH = 256;

/**
 * The credential of a request: the Bearer token, else the session cookie (`__Host-siwe_session` first, as set over
 * https). Throws on a malformed header.
 */
export function credentialOf(headers: { authorization?: string | null; cookie?: string | null }): string | undefined {
  const auth = headers.authorization?.trim();
  if (auth) {
    const m = /^Bearer +(\S+)$/i.exec(auth);
    if (!m) {
      throw new InvalidCredentialError("malformed Authorization header: expected 'Bearer <API key or session token>'");
    }
    return m[1];
  }
  return readCookie(headers.cookie, SECURE_SESSION_COOKIE) ?? readCookie(headers.cookie, SESSION_COOKIE);
}

/** Resolves the credential of a request (Bearer header, or the session cookie); throws InvalidCredentialError. */
export async function authenticate(
  sql: Sql,
  config: Config,
  headers: { authorization?: string | null; cookie?: string | null },
): Promise<Principal> {
  const token = credentialOf(headers);
  if (!token) throw new InvalidCredentialError("missing credential: send 'Authorization: Bearer <API key>'");
  if (config.ADMIN_API_KEY && constantTimeEqual(token, config.ADMIN_API_KEY)) return { kind: "admin", merchant: null };
  if (token.length <= MAX_TOKEN_LENGTH) {
    if (token.startsWith("sk_")) {
      const key = await findApiKey(sql, token);
      if (key) return { kind: "api_key", merchant: key.merchant, keyId: key.id, chainId: key.chainId };
    } else if (token.startsWith(SESSION_PREFIX)) {
      const s = await findSession(sql, token);
      if (s) {
        const { address, id, chainId, expiresAt, createdAt } = s;
        return { kind: "session", merchant: address, sessionId: id, chainId, expiresAt, createdAt };
      }
    }
  }
  throw new InvalidCredentialError(INVALID_CREDENTIAL);
}

/** What a credential may not read: the message of every 403 for another merchant's data. */
const FORBIDDEN_MERCHANT = "this credential cannot read that merchant's data";

/** The one chain a principal acts on (a session's, or a key minted by one), or null: every chain. */
export function chainScope(principal: Principal): number | null {
  return principal.kind === "admin" ? null : principal.chainId;
}

/**
 * Throws ForbiddenCredentialError unless the principal may read `merchant` (any case) on `chainId`: a CLI API key
 * reads its merchant on every chain; a SIWE session, and a key it minted, only on the session's chain; the admin
 * everything.
 */
export function assertCanRead(principal: Principal, merchant: string, chainId?: number): void {
  if (principal.kind === "admin") return;
  if (principal.merchant !== merchant.toLowerCase()) throw new ForbiddenCredentialError(FORBIDDEN_MERCHANT);
  const scope = chainScope(principal);
  if (scope !== null && chainId !== undefined && chainId !== scope) {
    const what = principal.kind === "session" ? "this session was signed" : "this API key was made by a session";
    throw new ForbiddenCredentialError(
      `${what} for chain ${scope} and cannot read chain ${chainId}: sign in on that chain`,
    );
  }
}

/**
 * Throws ForbiddenCredentialError unless the principal may change (update, rotate, test, delete, replay, revoke) a
 * resource of `resourceChainId` (null: an all-chain resource). A chain-scoped credential (a SIWE session, a key it
 * minted) changes only its own chain's resources; all-chain ones need an all-chain credential (a CLI key). Reading
 * is assertCanRead's rule: a chain-scoped credential may read all-chain resources.
 */
export function assertCanChange(principal: Principal, resourceChainId: number | null): void {
  if (principal.kind === "admin") throw new ReadOnlyCredentialError(ADMIN_READ_ONLY);
  const scope = chainScope(principal);
  if (scope === null || scope === resourceChainId) return;
  const what = principal.kind === "session" ? "this session was signed" : "this API key was made by a session";
  const target =
    resourceChainId === null
      ? "an all-chain resource (use an all-chain API key)"
      : `chain ${resourceChainId}'s resources`;
  throw new ForbiddenCredentialError(`${what} for chain ${scope} and cannot change ${target}`);
}

/** The identity a credential's rate limit is kept under: the key's or session's id, never the secret. */
export function principalId(principal: Principal): string {
  if (principal.kind === "api_key") return `key:${principal.keyId}`;
  if (principal.kind === "session") return `session:${principal.sessionId}`;
  return "admin";
}

/** The message of every write refused to the admin key. */
export const ADMIN_READ_ONLY = "the admin key reads every merchant and changes nothing: use the merchant's credential";

/** As assertCanRead for a change: the admin key is refused (ReadOnlyCredentialError) whatever it names. */
export function assertCanWrite(principal: Principal, merchant: string, chainId?: number): void {
  if (principal.kind === "admin") throw new ReadOnlyCredentialError(ADMIN_READ_ONLY);
  assertCanRead(principal, merchant, chainId);
}
