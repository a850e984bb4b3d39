/**
 * Endpoint secrets: `whsec_` + base64 of 32 random bytes (Standard Webhooks). With WEBHOOK_SECRET_KEY set they are
 * stored sealed with AES-256-GCM (`enc2:<iv>:<ciphertext+tag>`, base64) under a key derived from it with HKDF-SHA256,
 * the endpoint id as associated data (a sealed secret copied to another endpoint does not open); plain otherwise.
 * The first format (`enc:`, key = SHA-256 of WEBHOOK_SECRET_KEY, no associated data) still opens, and start-up
 * reseals it, and any secret stored in clear, in the current format (sealStoredSecrets).
 */
import { createCipheriv, createDecipheriv, createHash, hkdfSync, randomBytes } from "node:crypto";
import type { Sql } from "../db/client";
import type { Logger } from "../common/log";
import { SecretKeyError } from "./errors";

/** The current stored format. */
const SEALED = "enc2:";
/** The first format: still opened, resealed at start. */
const LEGACY = "enc:";

/** A new endpoint secret. */
export function newSecret(): string {
  return `whsec_${randomBytes(32).toString("base64")}`;
}

const derived = new Map<string, Buffer>();

/** The AES key of a WEBHOOK_SECRET_KEY: HKDF-SHA256 with a fixed salt and this purpose as info. */
function keyOf(secretKey: string): Buffer {
  let key = derived.get(secretKey);
  if (!key) {
    key = Buffer.from(hkdfSync("sha256", secretKey, "subscription-indexer", "webhook endpoint secret v2", 32));
    derived.set(secretKey, key);
  }
  return key;
}

const legacyKeyOf = (secretKey: string) => createHash("sha256").update(secretKey).digest();

/** The stored form of endpoint `endpointId`'s secret. */
export function sealSecret(secret: string, secretKey: string | undefined, endpointId: string): string {
  if (!secretKey) return secret;
  const iv = randomBytes(12);
  const cipher = createCipheriv("aes-256-gcm", keyOf(secretKey), iv);
  cipher.setAAD(Buffer.from(endpointId, "utf8"));
  const body = Buffer.concat([cipher.update(secret, "utf8"), cipher.final(), cipher.getAuthTag()]);
  return `${SEALED}${iv.toString("base64")}:${body.toString("base64")}`;
}

/** Whether a stored form is in the current sealed format. */
export const isSealed = (stored: string) => stored.startsWith(SEALED);

/** The secret of a stored form; throws SecretKeyError when it is sealed under another (or no) key or endpoint. */
export function openSecret(stored: string, secretKey: string | undefined, endpointId: string): string {
  const sealed = stored.startsWith(SEALED);
  if (!sealed && !stored.startsWith(LEGACY)) return stored;
  if (!secretKey) throw new SecretKeyError(endpointId, "it is sealed and WEBHOOK_SECRET_KEY is not set");
  const [, iv, data] = stored.split(":");
  try {
    const raw = Buffer.from(data!, "base64");
    const key = sealed ? keyOf(secretKey) : legacyKeyOf(secretKey);
    const decipher = createDecipheriv("aes-256-gcm", key, Buffer.from(iv!, "base64"));
    if (sealed) decipher.setAAD(Buffer.from(endpointId, "utf8"));
    decipher.setAuthTag(raw.subarray(raw.length - 16));
    return Buffer.concat([decipher.update(raw.subarray(0, raw.length - 16)), decipher.final()]).toString("utf8");
  } catch (err) {
    throw new SecretKeyError(
      endpointId,
      "it was sealed with another WEBHOOK_SECRET_KEY (or for another endpoint)",
      err,
    );
  }
}

// Arbitrary constant: processes starting together reseal one after the other.
const RESEAL_LOCK = 7_413_902_377;

/**
 * Reseals every secret (and previous secret) stored in clear or in the first format under `secretKey`, in one
 * transaction behind an advisory lock: idempotent, and two processes starting at once do it once. A secret that
 * does not open with this key is left as it is and counted. Returns how many endpoints were resealed.
 */
export async function sealStoredSecrets(sql: Sql, secretKey: string): Promise<{ sealed: number; unreadable: number }> {
  return sql.begin(async (tx) => {
    await tx`select pg_advisory_xact_lock(${RESEAL_LOCK})`;
    const rows = await tx<{ id: string; secret: string; previous_secret: string | null }[]>`
      select id, secret, previous_secret from webhook_endpoints
      where secret not like 'enc2:%' or previous_secret not like 'enc2:%'
      for update`;
    let sealed = 0;
    let unreadable = 0;
    for (const r of rows) {
      const reseal = (s: string | null) =>
        s === null || isSealed(s) ? s : sealSecret(openSecret(s, secretKey, r.id), secretKey, r.id);
      let next: { secret: string; previous: string | null };
      try {
        next = { secret: reseal(r.secret)!, previous: reseal(r.previous_secret) };
      } catch (err) {
        if (!(err instanceof SecretKeyError)) throw err;
        unreadable++;
        continue;
      }
      await tx`update webhook_endpoints set secret = ${next.secret}, previous_secret = ${next.previous} where id = ${r.id}`;
      sealed++;
    }
    return { sealed, unreadable };
  });
}

/** Ids of the endpoints whose secret, or previous secret still signing, is sealed and does not open with `secretKey`. */
export async function unopenableSecrets(sql: Sql, secretKey: string | undefined): Promise<string[]> {
  const rows = await sql<{ id: string; secret: string; previous_secret: string | null }[]>`
    select id, secret, case when previous_secret_expires_at > clock_timestamp() then previous_secret end as previous_secret
    from webhook_endpoints where secret like 'enc%:%' or previous_secret like 'enc%:%'
    order by id`;
  const opens = (r: (typeof rows)[number]) => {
    try {
      for (const s of [r.secret, r.previous_secret]) if (s !== null) openSecret(s, secretKey, r.id);
      return true;
    } catch (err) {
      if (err instanceof SecretKeyError) return false;
      throw err;
    }
  };
  return rows.filter((r) => !opens(r)).map((r) => r.id);
}

/**
 * Start-up: with WEBHOOK_SECRET_KEY, reseals what is stored in clear or the first format; without it in production,
 * warns (on every start) that secrets are stored in clear. Either way, logs an error naming the endpoints whose
 * sealed secrets this process cannot open (another or no key): their deliveries will fail until it is fixed.
 */
export async function secureStoredSecrets(
  sql: Sql,
  opts: { secretKey?: string; production: boolean; log: Logger },
): Promise<void> {
  if (!opts.secretKey && opts.production) {
    opts.log("warn", "WEBHOOK_SECRET_KEY is not set: webhook signing secrets are stored in clear in the database", {});
  }
  if (opts.secretKey) {
    const { sealed } = await sealStoredSecrets(sql, opts.secretKey);
    if (sealed > 0) opts.log("info", "webhook secrets encrypted with WEBHOOK_SECRET_KEY", { endpoints: sealed });
  }
  const unopenable = await unopenableSecrets(sql, opts.secretKey);
  if (unopenable.length > 0) {
    opts.log("error", "webhook secrets that cannot be opened with WEBHOOK_SECRET_KEY: their deliveries will fail", {
      endpoints: unopenable.length,
      endpoint_ids: unopenable.slice(0, 20),
      key_set: opts.secretKey !== undefined,
    });
  }
}
