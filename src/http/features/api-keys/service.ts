/** Self-serve API keys of a merchant signed in with its wallet (the same hashing as the CLI: src/auth/api-keys.ts). */
import type { Sql } from "../../../db/client";
import { ADMIN_READ_ONLY, type Principal } from "../../../auth/principal";
import { createApiKey, InvalidLabelError, listApiKeys, revokeMerchantApiKey } from "../../../auth/api-keys";
import type { Authenticator, RequestCtx } from "../../plugins/auth";
import { DEADLINE_FAST_MS, withDeadline } from "../../deadline";
import { ApiError, ForbiddenError, InvalidParameterError, UnauthenticatedError } from "../../errors";
import type { CreatedKey, KeyRecord } from "./model";

/** The 403 message for API keys and the admin key. */
export const SESSION_ONLY_MESSAGE =
  "an API key cannot mint, list or revoke keys: sign in with the merchant's wallet (SIWE) and send the session token";

/**
 * The SIWE session of `merchant`, or a 401/403, through the app's authenticator (both rate limits). Writes take the
 * session only from `Authorization: Bearer`, never from the cookie alone, so a cross-site request (which carries the
 * cookie) cannot mint or revoke keys.
 */
export async function requireMerchantSession(
  principalOf: Authenticator,
  ctx: RequestCtx,
  merchant: string,
  write: boolean,
): Promise<Extract<Principal, { kind: "session" }>> {
  if (write && !ctx.request.headers.get("authorization")?.trim()) {
    throw new UnauthenticatedError(
      "send the session token as 'Authorization: Bearer <session token>': the session cookie alone is not accepted for writes",
    );
  }
  const principal = await principalOf(ctx, !write);
  if (principal.kind === "admin" && write) throw new ForbiddenError(ADMIN_READ_ONLY, "admin_read_only");
  if (principal.kind !== "session") throw new ForbiddenError(SESSION_ONLY_MESSAGE);
  if (principal.merchant !== merchant) throw new ForbiddenError("this session cannot manage another merchant's keys");
  return principal;
}

/** The optional `label` of a create body (absent body, `{}` or `{label}`); 400 for anything else, naming it. */
export function parseLabel(body: unknown): string | undefined {
  if (body === undefined || body === null || body === "") return undefined;
  if (typeof body !== "object" || Array.isArray(body)) {
    throw new InvalidParameterError("body", 'the body must be a JSON object such as {"label": "production server"}');
  }
  // As the webhook routes do: a misspelt field is an error, not silently a key without it.
  const unknown = Object.keys(body).find((k) => k !== "label");
  if (unknown !== undefined) throw new InvalidParameterError(unknown, `unknown field ${unknown}; allowed: label`);
  const label = (body as Record<string, unknown>).label;
  if (label === undefined || label === null) return undefined;
  if (typeof label !== "string") throw new InvalidParameterError("label", "label must be a string");
  return label;
}

/** Creates a key for the merchant reading only the session's chain; the response is the only copy of the secret. */
export async function createKey(
  sql: Sql,
  merchant: string,
  label: string | undefined,
  chainId: number,
): Promise<CreatedKey> {
  let created;
  try {
    created = await withDeadline(createApiKey(sql, { merchant, label, chainId }), DEADLINE_FAST_MS);
  } catch (err) {
    if (err instanceof InvalidLabelError) throw new InvalidParameterError("label", err.message);
    throw err;
  }
  const [row] = await withDeadline(
    sql<{ label: string | null; created_at: Date }[]>`select label, created_at from api_keys where id = ${created.id}`,
    DEADLINE_FAST_MS,
  );
  return { ...created, label: row!.label, created_at: new Date(row!.created_at).toISOString() };
}

/** The merchant's keys of the session's chain, oldest first, without secrets or hashes. */
export async function listKeys(sql: Sql, merchant: string, chainId: number): Promise<KeyRecord[]> {
  const keys = await withDeadline(listApiKeys(sql, merchant, chainId), DEADLINE_FAST_MS);
  return keys.map(({ merchant: _m, ...k }) => k);
}

/** Revokes one of the merchant's keys of the session's chain; false when it has none with that id there. */
export function revokeKey(sql: Sql, merchant: string, id: string, chainId: number): Promise<boolean> {
  return withDeadline(revokeMerchantApiKey(sql, merchant, id, chainId), DEADLINE_FAST_MS);
}

/** How young a session must be to mint a key: a stolen session token cannot mint long-lived keys for long. */
export const MINT_MAX_SESSION_AGE_MS = 10 * 60 * 1000;

/** 403 `reauthentication_required`: minting a key needs a session signed in the last ten minutes. */
export class ReauthenticationRequiredError extends ApiError {
  constructor() {
    super(
      403,
      "permission_error",
      "reauthentication_required",
      "minting an API key needs a session signed in within the last 10 minutes: sign in with the wallet again",
    );
  }
}

/** Throws ReauthenticationRequiredError unless `session` was signed less than ten minutes before `now`. */
export function assertFreshSession(session: { createdAt: string }, now = Date.now()): void {
  if (now - Date.parse(session.createdAt) >= MINT_MAX_SESSION_AGE_MS) throw new ReauthenticationRequiredError();
}
