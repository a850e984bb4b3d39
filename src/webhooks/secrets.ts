/**
 * Endpoint secrets: `whsec_` + base64 of 32 random bytes (Standard Webhooks). Stored sealed with AES-256-GCM under
 * a key derived from WEBHOOK_SECRET_KEY when it is set (`enc:<iv>:<ciphertext+tag>`, base64), plain otherwise.
 */
import { createCipheriv, createDecipheriv, createHash, randomBytes } from "node:crypto";
import { SecretKeyError } from "./errors";

/** A new endpoint secret. */
export function newSecret(): string {
  return `whsec_${randomBytes(32).toString("base64")}`;
}

const keyOf = (secretKey: string) => createHash("sha256").update(secretKey).digest();

/** The stored form of a secret. */
export function sealSecret(secret: string, secretKey: string | undefined): string {
  if (!secretKey) return secret;
  const iv = randomBytes(12);
  const cipher = createCipheriv("aes-256-gcm", keyOf(secretKey), iv);
  const body = Buffer.concat([cipher.update(secret, "utf8"), cipher.final(), cipher.getAuthTag()]);
  return `enc:${iv.toString("base64")}:${body.toString("base64")}`;
}

/** The secret of a stored form; throws SecretKeyError when it is sealed under another (or no) key. */
export function openSecret(stored: string, secretKey: string | undefined): string {
  if (!stored.startsWith("enc:")) return stored;
  if (!secretKey) throw new SecretKeyError("a webhook secret is encrypted but WEBHOOK_SECRET_KEY is not set");
  const [, iv, data] = stored.split(":");
  try {
    const raw = Buffer.from(data!, "base64");
    const decipher = createDecipheriv("aes-256-gcm", keyOf(secretKey), Buffer.from(iv!, "base64"));
    decipher.setAuthTag(raw.subarray(raw.length - 16));
    return Buffer.concat([decipher.update(raw.subarray(0, raw.length - 16)), decipher.final()]).toString("utf8");
  } catch (err) {
    throw new SecretKeyError("a webhook secret cannot be decrypted with WEBHOOK_SECRET_KEY", err);
  }
}
