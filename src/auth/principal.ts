import type { Sql } from "../db/client";
import type { Config } from "../config";
import { ForbiddenError, UnauthenticatedError } from "../api/errors";

/** Who is calling: a merchant-scoped API key or SIWE session, or the admin key (every merchant). */
export type Principal =
  | { kind: "api_key"; merchant: string; keyId: string }
  | { kind: "session"; merchant: string; sessionId: string }
  | { kind: "admin"; merchant: null };

/** Resolves the credential of a request (Bearer header, or the session cookie); throws UnauthenticatedError. */
export async function authenticate(
  sql: Sql,
  config: Config,
  headers: { authorization?: string | null; cookie?: string | null },
): Promise<Principal> {
  // Placeholder until the auth work lands: only the admin key is accepted.
  const token = headers.authorization?.match(/^Bearer\s+(.+)$/i)?.[1]?.trim();
  if (token && config.ADMIN_API_KEY && token === config.ADMIN_API_KEY) return { kind: "admin", merchant: null };
  throw new UnauthenticatedError();
}

/** Throws ForbiddenError unless the principal may read `merchant` (lowercase address). */
export function assertCanRead(principal: Principal, merchant: string): void {
  if (principal.kind === "admin") return;
  if (principal.merchant !== merchant) throw new ForbiddenError();
}
