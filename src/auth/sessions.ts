/** SIWE sessions: random bearer tokens stored only as SHA-256 hashes, so every API replica accepts them. */
import type postgres from "postgres";
import type { Sql } from "../db/client";
import { hashSecret, randomId, randomSecret } from "./hash";

/** Every session token starts with this. */
export const SESSION_PREFIX = "sess_";

/** Name of the HttpOnly cookie that carries the session token for browsers (over plain http). */
export const SESSION_COOKIE = "siwe_session";

/**
 * Its name over https: a browser keeps a `__Host-` cookie only if it is Secure, has Path=/ and no Domain, so no
 * sibling subdomain or plain-http page can plant or overwrite it.
 */
export const SECURE_SESSION_COOKIE = `__Host-${SESSION_COOKIE}`;

/** An active session. */
export type Session = { id: string; address: string; chainId: number; expiresAt: string; createdAt: string };

/** Creates a session for `address` (lowercased) expiring after `ttlSeconds` or at `notAfter`, whichever is first. */
export async function createSession(
  tx: postgres.TransactionSql<{}>,
  opts: { address: string; chainId: number; ttlSeconds: number; notAfter?: Date },
): Promise<{ token: string; session: Session }> {
  const id = randomId("ses_");
  const token = randomSecret(SESSION_PREFIX);
  const ttl = positiveSeconds(opts.ttlSeconds);
  const [row] = await tx<{ expires_at: Date; created_at: Date }[]>`
    insert into sessions (id, token_hash, address, chain_id, expires_at)
    values (
      ${id}, ${hashSecret(token)}, ${opts.address.toLowerCase()}, ${opts.chainId},
      least(now() + make_interval(secs => ${ttl}), coalesce(${opts.notAfter ?? null}::timestamptz, 'infinity'))
    )
    returning expires_at, created_at`;
  return {
    token,
    session: {
      id,
      address: opts.address.toLowerCase(),
      chainId: opts.chainId,
      expiresAt: row!.expires_at.toISOString(),
      createdAt: row!.created_at.toISOString(),
    },
  };
}

function positiveSeconds(seconds: number): number {
  if (!Number.isInteger(seconds) || seconds <= 0)
    throw new RangeError(`session ttl must be a positive integer: ${seconds}`);
  return seconds;
}

/** The active (not revoked, not expired) session of a token, or null. One indexed lookup. */
export async function findSession(sql: Sql, token: string): Promise<Session | null> {
  const [row] = await sql<{ id: string; address: string; chain_id: string; expires_at: Date; created_at: Date }[]>`
    select id, address, chain_id, expires_at, created_at
    from sessions
    where token_hash = ${hashSecret(token)} and revoked_at is null and expires_at > now()`;
  if (!row) return null;
  return {
    id: row.id,
    address: row.address,
    chainId: Number(row.chain_id),
    expiresAt: row.expires_at.toISOString(),
    createdAt: row.created_at.toISOString(),
  };
}

/** Revokes a session; true when it was active. */
export async function revokeSession(sql: Sql, id: string): Promise<boolean> {
  const rows = await sql`update sessions set revoked_at = now() where id = ${id} and revoked_at is null returning id`;
  return rows.length > 0;
}

/** Deletes sessions that expired or were revoked more than a day ago (they can never authenticate again). */
export async function purgeSessions(sql: Sql): Promise<number> {
  const rows = await sql`
    delete from sessions
    where expires_at < now() - interval '1 day' or revoked_at < now() - interval '1 day'
    returning id`;
  return rows.length;
}

const cookieName = (secure: boolean) => (secure ? SECURE_SESSION_COOKIE : SESSION_COOKIE);

/**
 * `Set-Cookie` value carrying a session token: HttpOnly, SameSite=Lax, Path=/; over https `__Host-siwe_session` and
 * Secure.
 */
export function sessionCookie(token: string, opts: { maxAgeSeconds: number; secure: boolean }): string {
  const maxAge = Math.max(0, Math.floor(opts.maxAgeSeconds));
  return `${cookieName(opts.secure)}=${token}; Path=/; Max-Age=${maxAge}; HttpOnly; SameSite=Lax${opts.secure ? "; Secure" : ""}`;
}

/** `Set-Cookie` value that deletes the session cookie. */
export function clearedSessionCookie(opts: { secure: boolean }): string {
  return `${cookieName(opts.secure)}=; Path=/; Max-Age=0; Expires=Thu, 01 Jan 1970 00:00:00 GMT; HttpOnly; SameSite=Lax${
    opts.secure ? "; Secure" : ""
  }`;
}

/** The value of cookie `name` in a `Cookie` header, or undefined. */
export function readCookie(header: string | null | undefined, name: string): string | undefined {
  if (!header) return undefined;
  for (const part of header.split(";")) {
    const eq = part.indexOf("=");
    if (eq < 0) continue;
    if (part.slice(0, eq).trim() === name) return part.slice(eq + 1).trim() || undefined;
  }
  return undefined;
}
