/** The HTTP side of the webhook receiver: the raw body (bounded) and headers of each framework's request. */
import type { WebhookOutcome } from "./webhooks.js";

/**
 * The webhook endpoint, usable as it is by each framework: `app.post(path, handler)` in Hono and Elysia (give the
 * Elysia route `{ parse: "none" }`), `app.post(path, handler)` in Express (before any body parser, or after
 * `express.raw`/`express.text`), and `handler.fetch` as a fetch handler. Signatures are checked on the raw body.
 */
export type WebhookHandler = ((ctx: any, res?: any, next?: any) => Promise<Response | void>) & {
  fetch: (req: Request) => Promise<Response>;
};

/** Deliveries are small JSON events; a bigger body is refused before it is verified or parsed. */
const MAX_WEBHOOK_BYTES = 1024 * 1024;

type Body = { raw: string } | { status: 400 | 413; body: Record<string, string> };

const tooLarge: Body = {
  status: 413,
  body: { error: "payload_too_large", message: "webhook bodies are at most 1 MiB" },
};
const parsedAlready: Body = {
  status: 400,
  body: { error: "raw_body_required", message: "mount the webhook route before express.json()" },
};

async function fetchBody(req: Request): Promise<Body> {
  if (Number(req.headers.get("content-length") ?? 0) > MAX_WEBHOOK_BYTES) return tooLarge;
  const raw = await req.text();
  return raw.length > MAX_WEBHOOK_BYTES ? tooLarge : { raw };
}

/** Express: the body from express.raw/express.text, else read from the request stream (bounded). */
async function expressBody(req: any): Promise<Body> {
  if (typeof req.body === "string" || req.body instanceof Uint8Array) {
    const raw = typeof req.body === "string" ? req.body : new TextDecoder().decode(req.body);
    return raw.length > MAX_WEBHOOK_BYTES ? tooLarge : { raw };
  }
  if (req.body !== undefined && req.body !== null && Object.keys(req.body).length > 0) return parsedAlready;
  const chunks: Uint8Array[] = [];
  let size = 0;
  for await (const chunk of req as AsyncIterable<Uint8Array | string>) {
    const bytes = typeof chunk === "string" ? new TextEncoder().encode(chunk) : chunk;
    size += bytes.length;
    if (size > MAX_WEBHOOK_BYTES) return tooLarge;
    chunks.push(bytes);
  }
  return { raw: new TextDecoder().decode(Buffer.concat(chunks)) };
}

/** Wraps `receive` (verify + evict) as a handler for every framework. */
export function webhookHandler(receive: (raw: string, headers: Headers) => WebhookOutcome): WebhookHandler {
  const answer = (b: Body, headers: Headers): WebhookOutcome => ("raw" in b ? receive(b.raw, headers) : b);
  const onRequest = async (req: Request): Promise<Response> => {
    const out = answer(await fetchBody(req), req.headers);
    return Response.json(out.body, { status: out.status });
  };
  const handler = async (ctx: any, res?: any, next?: any): Promise<Response | void> => {
    if (ctx instanceof Request) return onRequest(ctx);
    if (ctx?.req?.raw instanceof Request) return onRequest(ctx.req.raw); // Hono
    if (ctx?.request instanceof Request) return onRequest(ctx.request); // Elysia
    if (res && typeof res.status === "function") {
      try {
        const headers = new Headers();
        for (const k of ["webhook-id", "webhook-timestamp", "webhook-signature"]) {
          const v = ctx.headers?.[k];
          if (typeof v === "string") headers.set(k, v);
        }
        const out = answer(await expressBody(ctx), headers);
        res.status(out.status).json(out.body);
      } catch (err) {
        next?.(err);
      }
      return;
    }
    throw new TypeError("gate.webhooks: unsupported request object");
  };
  return Object.assign(handler, { fetch: onRequest });
}
