/**
 * The demo receiver of `bun run dev`: a local HTTP server that checks each delivery's Standard Webhooks signature
 * (as a merchant's server would, with a 5-minute tolerance) and prints one line per delivery.
 */
import { timingSafeEqual } from "node:crypto";
import { formatUnits } from "viem";
import { signatureHeader } from "../../webhooks/sign";

/** One delivery as received. */
export type DemoDelivery = { id: string; type: string; verified: boolean; summary: string };

/** A running demo receiver; `secret` is set once the endpoint exists. */
export type DemoReceiver = { url: string; secret: string | null; stop: () => Promise<void> };

/** True when one of the header's `v1,` signatures matches the body under `secret` and the timestamp is recent. */
export function verifyDelivery(secret: string, headers: Headers, body: string, now = Date.now()): boolean {
  const id = headers.get("webhook-id") ?? "";
  const timestamp = Number(headers.get("webhook-timestamp"));
  if (!Number.isInteger(timestamp) || Math.abs(now / 1000 - timestamp) > 300) return false;
  const expected = Buffer.from(signatureHeader(id, timestamp, body, [secret]));
  return (headers.get("webhook-signature") ?? "")
    .split(" ")
    .some((s) => s.length === expected.length && timingSafeEqual(Buffer.from(s), expected));
}

/** A renewal event's part of the line: what the outlook says, or the upcoming charge. */
function renewalSummary(data: Record<string, unknown>): string | null {
  const r = data.renewal as Record<string, unknown> | undefined;
  const units = (base: unknown, decimals: unknown, currency: unknown) =>
    typeof base !== "string"
      ? ""
      : `${typeof decimals === "number" ? formatUnits(BigInt(base), decimals) : base} ${currency ?? "(base units)"}`;
  if (r) {
    const due = `due ${String(r.due_at)}`;
    if (r.outlook === "will_renew") return `will renew, ${due}`;
    return `at risk: ${String(r.reason)}, short ${units(r.shortfall, r.token_decimals, r.currency)}, ${due}`;
  }
  if (typeof data.due_at === "string")
    return `${units(data.amount, data.token_decimals, data.currency)} due ${data.due_at}`;
  return null;
}

/** What a line says about an event's object: the subscription, amount or status change. */
function summarize(event: { type?: string; data?: { object?: Record<string, unknown>; previous_status?: string } }) {
  const o = event.data?.object ?? {};
  const parts: string[] = [];
  const renewal = event.type?.startsWith("subscription.renewal_") ? renewalSummary(event.data ?? {}) : null;
  if (renewal) {
    if (typeof o.allocation_id === "string") parts.push(`subscription ${o.allocation_id.split(":").pop()}`);
    parts.push(renewal);
    return parts.join(", ");
  }
  if (typeof o.allocation_id === "string") parts.push(`subscription ${o.allocation_id.split(":").pop()}`);
  if (event.data?.previous_status) parts.push(`${event.data.previous_status} → ${o.status}`);
  else if (o.status !== undefined) parts.push(String(o.status));
  if (typeof o.amount_charged === "string") {
    const decimals = typeof o.token_decimals === "number" ? o.token_decimals : null;
    const amount = decimals === null ? o.amount_charged : formatUnits(BigInt(o.amount_charged), decimals);
    parts.push(`${amount} ${o.currency ?? "(base units)"}`);
  }
  if (o.reason) parts.push(String(o.reason));
  return parts.join(", ");
}

/** Starts the receiver on 127.0.0.1 (a random port); `print` gets one line per delivery. */
export function startDemoReceiver(print: (line: string, d: DemoDelivery) => void): DemoReceiver {
  const receiver: DemoReceiver = {
    url: "",
    secret: null,
    stop: async () => {
      await server.stop(true);
    },
  };
  const server = Bun.serve({
    hostname: "127.0.0.1",
    port: 0,
    async fetch(req) {
      const body = await req.text();
      const verified = receiver.secret !== null && verifyDelivery(receiver.secret, req.headers, body);
      let event: { type?: string } = {};
      try {
        event = JSON.parse(body);
      } catch {}
      const d = {
        id: req.headers.get("webhook-id") ?? "",
        type: event.type ?? "?",
        verified,
        summary: summarize(event),
      };
      const mark = verified ? "signature ok" : "SIGNATURE INVALID";
      print(`webhook ← ${d.type} ${d.id} (${mark})${d.summary ? `: ${d.summary}` : ""}`, d);
      return new Response(null, { status: verified ? 204 : 400 });
    },
  });
  receiver.url = `http://127.0.0.1:${server.port}/webhooks`;
  return receiver;
}
