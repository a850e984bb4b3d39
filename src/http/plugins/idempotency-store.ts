/**
 * The `idempotency_keys` table: claims of an `Idempotency-Key` per merchant and the answers they produced. The key is
 * stored as a hash and the answer encrypted under a key derived from it (AES-256-GCM), so the table alone never
 * reveals a secret an answer carried (a new API key's, shown once).
 */
import { createCipheriv, createDecipheriv, createHash, randomBytes } from "node:crypto";
import type { Sql } from "../../db/client";

/** How long an answer is kept and replayed. */
export const IDEMPOTENCY_TTL_HOURS = 24;

/** A claim still in flight after this long is taken over by the next request (its process died mid-request). */
export const IDEMPOTENCY_LOCK_SECONDS = 60;

/** A stored answer. */
export type StoredAnswer = { status: number; contentType: string; body: string };

/** What claiming a key found. */
export type Claim =
  { kind: "claimed" } | { kind: "replay"; answer: StoredAnswer } | { kind: "in_flight" } | { kind: "mismatch" };

/** The hash under which `key` is stored for `merchant`. */
export function keyHash(merchant: string, key: string): string {
  return createHash("sha256").update(`idempotency-key\0${merchant}\0${key}`).digest("hex");
}

const cipherKey = (merchant: string, key: string) =>
  createHash("sha256").update(`idempotency-answer\0${merchant}\0${key}`).digest();

/** `answer` encrypted under the Idempotency-Key: base64 of iv ‖ tag ‖ ciphertext. */
export function sealAnswer(merchant: string, key: string, answer: StoredAnswer): string {
  const iv = randomBytes(12);
  const cipher = createCipheriv("aes-256-gcm", cipherKey(merchant, key), iv);
  const data = Buffer.concat([cipher.update(JSON.stringify(answer), "utf8"), cipher.final()]);
  return Buffer.concat([iv, cipher.getAuthTag(), data]).toString("base64");
}

/** The answer {@link sealAnswer} sealed; throws when it was sealed under another key or altered. */
export function openAnswer(merchant: string, key: string, sealed: string): StoredAnswer {
  const raw = Buffer.from(sealed, "base64");
  const decipher = createDecipheriv("aes-256-gcm", cipherKey(merchant, key), raw.subarray(0, 12));
  decipher.setAuthTag(raw.subarray(12, 28));
  return JSON.parse(Buffer.concat([decipher.update(raw.subarray(28)), decipher.final()]).toString("utf8"));
}

/**
 * Claims `key` for a request whose fingerprint is `fingerprint`: a new (or expired, or abandoned in-flight) key is
 * claimed; a key whose request answered is replayed when the fingerprints match; otherwise the conflict is named.
 */
export async function claimKey(
  sql: Sql,
  merchant: string,
  key: string,
  fingerprint: string,
  tries = 3,
): Promise<Claim> {
  const hash = keyHash(merchant, key);
  const [claimed] = await sql<{ claimed: boolean }[]>`
    insert into idempotency_keys (merchant, key_hash, fingerprint)
    values (${merchant}, ${hash}, ${fingerprint})
    on conflict (merchant, key_hash) do update
      set fingerprint = excluded.fingerprint, status = null, response = null, locked_at = now(), created_at = now()
      where idempotency_keys.created_at < now() - make_interval(hours => ${IDEMPOTENCY_TTL_HOURS})
         or (idempotency_keys.status is null
             and idempotency_keys.fingerprint = excluded.fingerprint
             and idempotency_keys.locked_at < now() - make_interval(secs => ${IDEMPOTENCY_LOCK_SECONDS}))
    returning true as claimed`;
  if (claimed) return { kind: "claimed" };
  const [row] = await sql<{ fingerprint: string; status: number | null; response: string | null }[]>`
    select fingerprint, status, response from idempotency_keys where merchant = ${merchant} and key_hash = ${hash}`;
  // Released between the two statements (its request failed retryably): claim again, a few times at most.
  if (!row) return tries > 1 ? claimKey(sql, merchant, key, fingerprint, tries - 1) : { kind: "in_flight" };
  if (row.fingerprint !== fingerprint) return { kind: "mismatch" };
  if (row.status === null || row.response === null) return { kind: "in_flight" };
  return { kind: "replay", answer: openAnswer(merchant, key, row.response) };
}

/** Records the answer of a claimed key. */
export async function storeAnswer(sql: Sql, merchant: string, key: string, answer: StoredAnswer): Promise<void> {
  await sql`
    update idempotency_keys set status = ${answer.status}, response = ${sealAnswer(merchant, key, answer)}
    where merchant = ${merchant} and key_hash = ${keyHash(merchant, key)} and status is null`;
}

/** Gives a claimed key up (its request failed in a way a retry may fix), so a retry runs the request. */
export async function releaseKey(sql: Sql, merchant: string, key: string): Promise<void> {
  await sql`
    delete from idempotency_keys
    where merchant = ${merchant} and key_hash = ${keyHash(merchant, key)} and status is null`;
}

/** Deletes the answers older than the retention; returns how many. */
export async function pruneIdempotencyKeys(sql: Sql): Promise<number> {
  const rows = await sql`
    delete from idempotency_keys where created_at < now() - make_interval(hours => ${IDEMPOTENCY_TTL_HOURS})
    returning 1`;
  return rows.length;
}
