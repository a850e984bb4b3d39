/** The HTTP side of the webhook receiver: the raw body (at most 64 KiB) and headers of each framework's request. */
import type { WebhookOutcome } from "./webhooks.js";

/**
 * The webhook endpoint, usable as it is by each framework: `app.post(path, handler)` in Hono and Elysia (give the
 * Elysia route `{ parse: "none" }`), `app.post(path, handler)` in Express (before any body parser, or after
 * `express.raw`/`express.text`), and `handler.fetch` as a fetch handler. Signatures are checked on the raw body.
 */
export type WebhookHandler = ((ctx: any, res?: any, next?: any) => Promise<Response | void>) & {
  fetch: (req: Request) => Promise<Response>;
};

/** Deliveries are small JSON events (the service caps them far below): a bigger body is refused unread. */
export const MAX_WEBHOOK_BYTES = 64 * 1024;

type Body = { raw: string } | { status: 400 | 413; body: Record<string, string> };

const tooLarge: Body = {
  status: 413,
  body: { error: "payload_too_large", message: "webhook bodies are at most 64 KiB" },
};
const parsedAlready: Body = {
  status: 400,
  body: { error: "raw_body_required", message: "mount the webhook route before express.json()" },
};

/** Reads chunks up to the limit, counting bytes; stops reading (and says so) past it. */
async function readBounded(chunks: AsyncIterable<Uint8Array | string>, stop: () => void): Promise<Body> {
  const parts: Uint8Array[] = [];
  let size = 0;
  const enc = new TextEncoder();
  for await (const chunk of chunks) {
    const bytes = typeof chunk === "string" ? enc.encode(chunk) : chunk;
    size += bytes.byteLength;
    if (size > MAX_WEBHOOK_BYTES) {
      stop();
      return tooLarge;
    }
    parts.push(bytes);
  }
  return { raw: decode(parts, size) };
}

/** The UTF-8 text of `parts` (`size` bytes in all). */
function decode(parts: Uint8Array[], size: number): string {
  const all = new Uint8Array(size);
  let at = 0;
  for (const p of parts) {
    all.set(p, at);
    at += p.byteLength;
  }
  return new TextDecoder().decode(all);
}

async function fetchBody(req: Request): Promise<Body> {
  if (Number(req.headers.get("content-length") ?? 0) > MAX_WEBHOOK_BYTES) return tooLarge;
  if (!req.body) return { raw: "" };
  const reader = req.body.getReader();
  const chunks = {
    async *[Symbol.asyncIterator]() {
      for (;;) {
        const { done, value } = await reader.read();
        if (done) return;
        yield value;
      }
    },
  };
  return readBounded(chunks, () => void reader.cancel().catch(() => {}));
}

const byteLength = (s: string) => new TextEncoder().encode(s).byteLength;

/** Express: the body from express.raw/express.text, else read from the request stream (bounded). */
async function expressBody(req: any): Promise<Body> {
  if (typeof req.body === "string") return byteLength(req.body) > MAX_WEBHOOK_BYTES ? tooLarge : { raw: req.body };
  if (req.body instanceof Uint8Array) {
    return req.body.byteLength > MAX_WEBHOOK_BYTES ? tooLarge : { raw: new TextDecoder().decode(req.body) };
  }
  if (req.body !== undefined && req.body !== null && Object.keys(req.body).length > 0) return parsedAlready;
  if (Number(req.headers?.["content-length"] ?? 0) > MAX_WEBHOOK_BYTES) return tooLarge;
  // Events rather than `for await`: leaving that loop early destroys the socket before the 413 is sent.
  return new Promise((resolve, reject) => {
    const parts: Uint8Array[] = [];
    let size = 0;
    const done = (b: Body) => {
      req.off("data", onData);
      req.off("end", onEnd);
      req.off("error", reject);
      resolve(b);
    };
    const onData = (chunk: Uint8Array | string) => {
      const bytes = typeof chunk === "string" ? new TextEncoder().encode(chunk) : chunk;
      size += bytes.byteLength;
      if (size > MAX_WEBHOOK_BYTES) {
        req.pause();
        return done(tooLarge);
      }
      parts.push(bytes);
    };
    const onEnd = () => done({ raw: decode(parts, size) });
    req.on("data", onData);
    req.on("end", onEnd);
    req.on("error", reject);
  });
}

/** Wraps `receive` (verify, dedupe, invalidate, onEvent) as a handler for every framework. */
export function webhookHandler(receive: (raw: string, headers: Headers) => Promise<WebhookOutcome>): WebhookHandler {
  const answer = (b: Body, headers: Headers): Promise<WebhookOutcome> =>
    "raw" in b ? receive(b.raw, headers) : Promise.resolve(b);
  const onRequest = async (req: Request): Promise<Response> => {
    const out = await answer(await fetchBody(req), req.headers);
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
        const out = await answer(await expressBody(ctx), headers);
        // A body left unread: the connection cannot carry another request.
        if (out.status === 413) res.set("connection", "close");
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
