/**
 * The gate's webhook receiver: verifies Standard Webhooks signatures, drops each delivery seen before (by
 * `webhook-id`), and invalidates the answers an event may have made wrong — the subscriber of a `subscription.*`
 * event (a cancellation, pause, block or expiry closes the gate at once) and the subscriber of an `event.reverted`
 * (a reorg withdrew an event of theirs, maybe a payment this gate read through the API but was never sent). The
 * wallet's floor becomes the event's block: no answer of an index below it is served afterwards.
 */
import { Webhook, WebhookVerificationError } from "standardwebhooks";
import { Lru } from "./lru.js";

/** A verified event as delivered (Standard Webhooks body of the service). */
export type GateEvent = {
  id: string;
  type: string;
  timestamp?: string;
  chain_id?: number;
  merchant?: string;
  block_number?: string;
  data: Record<string, unknown>;
};

/** Options of `gate.webhooks`. */
export type WebhookOptions = {
  /** The endpoint's signing secret (`whsec_…`), or several during a rotation (any one verifying is enough). */
  secret: string | readonly string[];
  /**
   * Called with each verified event, once per `webhook-id`, after the gate's own invalidation: the merchant's
   * fulfilment on the same endpoint. A throw answers 500 (the service delivers the event again later).
   */
  onEvent?: (event: GateEvent) => void | Promise<void>;
};

/** What a delivery did. */
export type WebhookOutcome = { status: number; body: Record<string, unknown> };

type Invalidator = { invalidate: (wallet: string, block: string) => Promise<void> };

/** Deliveries remembered for de-duplication. */
const SEEN_IDS = 10_000;

const ADDRESS = /^0x[0-9a-fA-F]{40}$/;
const BLOCK = /^\d{1,78}$/;

/** The wallet and block an event invalidates, if any. */
function target(event: GateEvent): { wallet: string; block: string } | undefined {
  const data = event.data ?? {};
  if (event.type === "event.reverted") {
    const { user_address: wallet, block_number: block } = data as { user_address?: unknown; block_number?: unknown };
    if (typeof wallet === "string" && ADDRESS.test(wallet) && typeof block === "string" && BLOCK.test(block)) {
      return { wallet: wallet.toLowerCase(), block };
    }
    return undefined;
  }
  if (!event.type.startsWith("subscription.")) return undefined;
  const wallet = (data.object as { user_address?: unknown } | undefined)?.user_address;
  const block = event.block_number;
  if (typeof wallet === "string" && ADDRESS.test(wallet) && typeof block === "string" && BLOCK.test(block)) {
    return { wallet: wallet.toLowerCase(), block };
  }
  return undefined;
}

/** Verifies one delivery (raw body and its headers) and invalidates what it touches; 401 changes nothing. */
export function webhookReceiver(
  gate: Invalidator,
  opts: WebhookOptions,
): (raw: string, headers: Headers) => Promise<WebhookOutcome> {
  const secrets = (typeof opts.secret === "string" ? [opts.secret] : opts.secret).map((s) => new Webhook(s));
  if (secrets.length === 0) throw new Error("gate.webhooks: a secret is required");
  const seen = new Lru<string, true>(SEEN_IDS);
  return async (raw, headers) => {
    const id = headers.get("webhook-id") ?? "";
    const h = {
      "webhook-id": id,
      "webhook-timestamp": headers.get("webhook-timestamp") ?? "",
      "webhook-signature": headers.get("webhook-signature") ?? "",
    };
    let event: GateEvent | undefined;
    for (const wh of secrets) {
      try {
        event = wh.verify(raw, h) as GateEvent;
        break;
      } catch (err) {
        if (!(err instanceof WebhookVerificationError)) throw err;
      }
    }
    if (!event) return { status: 401, body: { error: "invalid_signature", message: "webhook signature not verified" } };
    if (seen.get(id)) return { status: 200, body: { received: true, duplicate: true, evicted: [] } };
    if (typeof event.type !== "string" || typeof event.data !== "object" || event.data === null) {
      return { status: 400, body: { error: "invalid_event", message: "the event has no type or data" } };
    }
    seen.set(id, true); // before any await: a copy delivered meanwhile is a duplicate
    const t = target(event);
    try {
      if (t) await gate.invalidate(t.wallet, t.block);
    } catch {
      seen.delete(id); // the store failed: the service's retry must invalidate again
      return { status: 503, body: { error: "store_unavailable", message: "the gate's store failed" } };
    }
    if (opts.onEvent) {
      try {
        await opts.onEvent(event);
      } catch {
        seen.delete(id); // the service retries; the retry must reach onEvent again
        return { status: 500, body: { error: "handler_failed", message: "the event handler failed" } };
      }
    }
    return { status: 200, body: { received: true, evicted: t ? [t.wallet] : [] } };
  };
}
