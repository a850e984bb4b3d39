/**
 * The gate's webhook receiver: verifies Standard Webhooks signatures and drops the cached answers that an event may
 * have made wrong — the subscriber of any `subscription.*` event (a cancellation, pause, block or expiry closes the
 * gate at once, not at `validUntil`), and every answer on `event.reverted` (a reorg withdrew an event; its body
 * names only the event, so no wallet is trusted to be unaffected).
 */
import { Webhook, WebhookVerificationError } from "standardwebhooks";

/** Options of `gate.webhooks`. */
export type WebhookOptions = {
  /** The endpoint's signing secret (`whsec_…`), or several during a rotation (any one verifying is enough). */
  secret: string | readonly string[];
};

/** What a delivery did to the cache. */
export type WebhookOutcome = { status: number; body: Record<string, unknown> };

type Evictor = { evict: (wallet: string) => boolean; evictAll: () => void };

type Delivered = { type?: unknown; data?: { object?: { user_address?: unknown } } };

/** Verifies one delivery (raw body and its headers) and evicts what it touches; 401 evicts nothing. */
export function webhookReceiver(
  evictor: Evictor,
  opts: WebhookOptions,
): (raw: string, headers: Headers) => WebhookOutcome {
  const secrets = (typeof opts.secret === "string" ? [opts.secret] : opts.secret).map((s) => new Webhook(s));
  if (secrets.length === 0) throw new Error("gate.webhooks: a secret is required");
  return (raw, headers) => {
    const h = {
      "webhook-id": headers.get("webhook-id") ?? "",
      "webhook-timestamp": headers.get("webhook-timestamp") ?? "",
      "webhook-signature": headers.get("webhook-signature") ?? "",
    };
    let event: Delivered | undefined;
    for (const wh of secrets) {
      try {
        event = wh.verify(raw, h) as Delivered;
        break;
      } catch (err) {
        if (!(err instanceof WebhookVerificationError)) throw err;
      }
    }
    if (!event) return { status: 401, body: { error: "invalid_signature", message: "webhook signature not verified" } };
    const type = typeof event.type === "string" ? event.type : "";
    if (type === "event.reverted") {
      evictor.evictAll();
      return { status: 200, body: { received: true, evicted: "all" } };
    }
    const wallet = event.data?.object?.user_address;
    if (type.startsWith("subscription.") && typeof wallet === "string") {
      evictor.evict(wallet);
      return { status: 200, body: { received: true, evicted: [wallet.toLowerCase()] } };
    }
    return { status: 200, body: { received: true, evicted: [] } };
  };
}
