/**
 * Verifying the service's webhook deliveries (Standard Webhooks): the signature over `<id>.<timestamp>.<body>` with
 * the endpoint's secret (HMAC-SHA256 through Web Crypto, so it runs in Node ≥ 20, Bun, Deno, workers and browsers),
 * a timestamp within the tolerance, then the body as a typed event. The event types are generated from the OpenAPI
 * document's `webhooks` section, like the API's.
 */
import type { webhooks as WebhookPaths } from "./generated/openapi.js";

/** One delivered event: a union over every event type, discriminated by `type`. */
export type WebhookEvent = {
  [K in keyof WebhookPaths]: WebhookPaths[K] extends {
    post: { requestBody: { content: { "application/json": infer B } } };
  }
    ? B
    : never;
}[keyof WebhookPaths];

/** Every event type. */
export type WebhookEventType = WebhookEvent["type"];

/** The event of one type, e.g. `WebhookEventOf<"charge.succeeded">`. */
export type WebhookEventOf<T extends WebhookEventType> = Extract<WebhookEvent, { type: T }>;

/** Why a delivery was refused: the body must not be trusted. */
export class WebhookVerificationError extends Error {
  override name = "WebhookVerificationError";
  constructor(
    message: string,
    /** `missing_header`, `invalid_timestamp`, `timestamp_out_of_tolerance`, `invalid_signature`, `invalid_body`. */
    readonly code: string,
  ) {
    super(message);
  }
}

/** Headers as a `Headers`, or a plain object (Node's `req.headers`, Express, a test). */
export type WebhookHeaders = Headers | Record<string, string | string[] | undefined>;

/** Options of {@link verifyWebhook}. */
export type VerifyOptions = {
  /** Largest distance between `webhook-timestamp` and now, in seconds (default 300). */
  toleranceSeconds?: number;
  /** The current time in ms (default `Date.now()`), for tests. */
  now?: number;
};

function header(headers: WebhookHeaders, name: string): string | undefined {
  if (headers instanceof Headers) return headers.get(name) ?? undefined;
  for (const [k, v] of Object.entries(headers)) {
    if (k.toLowerCase() === name) return Array.isArray(v) ? v.join(" ") : v;
  }
  return undefined;
}

/** The HMAC key of a secret: `whsec_` + base64 (the prefix optional). */
function keyBytes(secret: string): Uint8Array<ArrayBuffer> {
  const b64 = secret.startsWith("whsec_") ? secret.slice("whsec_".length) : secret;
  const bin = atob(b64);
  const out = new Uint8Array(bin.length);
  for (let i = 0; i < bin.length; i++) out[i] = bin.charCodeAt(i);
  return out;
}

function base64(bytes: ArrayBuffer): string {
  let bin = "";
  for (const b of new Uint8Array(bytes)) bin += String.fromCharCode(b);
  return btoa(bin);
}

/** Equal without an early exit, so the time taken says nothing about where two signatures differ. */
function constantTimeEqual(a: string, b: string): boolean {
  if (a.length !== b.length) return false;
  let diff = 0;
  for (let i = 0; i < a.length; i++) diff |= a.charCodeAt(i) ^ b.charCodeAt(i);
  return diff === 0;
}

/** The `v1,<base64>` signature of a delivery under `secret`. */
export async function signWebhook(secret: string, id: string, timestamp: number, body: string): Promise<string> {
  const key = await globalThis.crypto.subtle.importKey(
    "raw",
    keyBytes(secret),
    { name: "HMAC", hash: "SHA-256" },
    false,
    ["sign"],
  );
  const mac = await globalThis.crypto.subtle.sign("HMAC", key, new TextEncoder().encode(`${id}.${timestamp}.${body}`));
  return `v1,${base64(mac)}`;
}

/**
 * Verifies a delivery and returns its event, typed. `payload` is the raw body exactly as received (a string or its
 * bytes; never a re-serialized object), `secret` the endpoint's `whsec_…` secret, or several during a rotation. Throws
 * {@link WebhookVerificationError} when a header is missing, the timestamp is outside the tolerance (a replay), no
 * signature matches, or the body is not an event. Deduplicate on `webhook-id` (the event's `id`): a delivery can come
 * twice.
 */
export async function verifyWebhook(
  payload: string | Uint8Array,
  headers: WebhookHeaders,
  secret: string | string[],
  opts: VerifyOptions = {},
): Promise<WebhookEvent> {
  const id = header(headers, "webhook-id");
  const ts = header(headers, "webhook-timestamp");
  const signatures = header(headers, "webhook-signature");
  if (!id || !ts || !signatures) {
    throw new WebhookVerificationError(
      "missing webhook-id, webhook-timestamp or webhook-signature header",
      "missing_header",
    );
  }
  if (!/^\d{1,12}$/.test(ts.trim())) {
    throw new WebhookVerificationError("webhook-timestamp is not unix seconds", "invalid_timestamp");
  }
  const timestamp = Number(ts.trim());
  const tolerance = opts.toleranceSeconds ?? 300;
  if (Math.abs((opts.now ?? Date.now()) / 1000 - timestamp) > tolerance) {
    throw new WebhookVerificationError(
      `webhook-timestamp is more than ${tolerance} s away from now`,
      "timestamp_out_of_tolerance",
    );
  }
  const body = typeof payload === "string" ? payload : new TextDecoder().decode(payload);
  const offered = signatures
    .split(" ")
    .map((s) => s.trim())
    .filter((s) => s.startsWith("v1,"));
  let valid = false;
  for (const s of Array.isArray(secret) ? secret : [secret]) {
    let expected: string;
    try {
      expected = await signWebhook(s, id, timestamp, body);
    } catch {
      throw new WebhookVerificationError("the secret is not whsec_ followed by base64", "invalid_secret");
    }
    for (const candidate of offered) if (constantTimeEqual(candidate, expected)) valid = true;
  }
  if (!valid) throw new WebhookVerificationError("no signature matches the secret", "invalid_signature");
  let event: unknown;
  try {
    event = JSON.parse(body);
  } catch {
    throw new WebhookVerificationError("the body is not JSON", "invalid_body");
  }
  const e = event as { id?: unknown; type?: unknown; data?: unknown };
  if (!e || typeof e !== "object" || typeof e.type !== "string" || typeof e.id !== "string") {
    throw new WebhookVerificationError("the body is not an event", "invalid_body");
  }
  return event as WebhookEvent;
}

/** The webhook helpers: `webhooks.verify(payload, headers, secret)`. */
export const webhooks = { verify: verifyWebhook, sign: signWebhook };
