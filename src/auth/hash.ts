/** Hashing and random tokens for credentials: secrets are stored only as SHA-256 digests. */
import { createHash, randomBytes, timingSafeEqual } from "node:crypto";

const BASE58 = "123456789ABCDEFGHJKLMNPQRSTUVWXYZabcdefghijkmnopqrstuvwxyz";

/** Base58 (Bitcoin alphabet): no `0/O/I/l`, no punctuation, so a key copies with one double-click. */
export function base58(bytes: Uint8Array): string {
  let n = 0n;
  for (const b of bytes) n = (n << 8n) | BigInt(b);
  let out = "";
  while (n > 0n) {
    out = BASE58[Number(n % 58n)] + out;
    n /= 58n;
  }
  for (const b of bytes) {
    if (b !== 0) break;
    out = "1" + out;
  }
  return out;
}

/** A random secret: `prefix` + base58 of `bytes` random bytes (32 bytes = 256 bits by default). */
export function randomSecret(prefix: string, bytes = 32): string {
  return prefix + base58(randomBytes(bytes));
}

/** A random, non-secret row id: `prefix` + 20 hex characters. */
export function randomId(prefix: string): string {
  return prefix + randomBytes(10).toString("hex");
}

/**
 * SHA-256 of a secret, hex. A plain fast hash is right here: the secrets are 256-bit random values, so
 * there is nothing to brute-force, and the digest is the lookup key of an index.
 */
export function hashSecret(secret: string): string {
  return createHash("sha256").update(secret).digest("hex");
}

/** Compares two strings in time independent of where they differ (both are hashed to equal length first). */
export function constantTimeEqual(a: string, b: string): boolean {
  return timingSafeEqual(createHash("sha256").update(a).digest(), createHash("sha256").update(b).digest());
}
