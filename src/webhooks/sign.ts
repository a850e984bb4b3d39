/** Standard Webhooks signatures: `v1,<base64 HMAC-SHA256 of "<id>.<timestamp>.<body>">`, one per active secret. */
import { createHmac } from "node:crypto";

/** The `webhook-signature` header value for `secrets` (space-separated when two are active). */
export function signatureHeader(id: string, timestamp: number, body: string, secrets: string[]): string {
  return secrets
    .map((secret) => {
      const key = Buffer.from(secret.startsWith("whsec_") ? secret.slice(6) : secret, "base64");
      return `v1,${createHmac("sha256", key).update(`${id}.${timestamp}.${body}`).digest("base64")}`;
    })
    .join(" ");
}

/** The three Standard Webhooks headers of one attempt, plus the content type. */
export function deliveryHeaders(id: string, body: string, secrets: string[], now = Date.now()): Record<string, string> {
  const timestamp = Math.floor(now / 1000);
  return {
    "content-type": "application/json",
    "user-agent": "subscription-indexer-webhooks/1",
    "webhook-id": id,
    "webhook-timestamp": String(timestamp),
    "webhook-signature": signatureHeader(id, timestamp, body, secrets),
  };
}
