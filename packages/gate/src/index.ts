/**
 * `@subscription-indexer/gate`: "is this wallet paid up?" for a merchant's own server, backed by the Subscription
 * Payments Indexer's `GET /v0/auth/check`. Adapters for Hono, Express, Elysia and plain fetch handlers answer 401
 * (no wallet), 402 (not paid up), 503 (the service cannot answer and `failOpen` is false), or pass the result on.
 */
import { createChecker, type CheckerOptions, type CheckResult } from "./check.js";
import { elysiaAdapter, expressAdapter, fetchAdapter, honoAdapter, decide, type MaybeWallet } from "./adapters.js";
import { webhookReceiver, type WebhookOptions } from "./webhooks.js";

export { GateRequestError, GateUnavailableError, type CheckMode, type CheckResult } from "./check.js";
export type { MaybeWallet, Verdict } from "./adapters.js";
export type { WebhookOptions } from "./webhooks.js";

/** Options of {@link createGate}. */
export type GateOptions = CheckerOptions;

/** A wallet source of a framework: reads the signed-in wallet from the request (session, verified token…). */
export type WalletOf<C> = { wallet: (ctx: C) => MaybeWallet };

/**
 * The webhook endpoint, usable as it is by each framework: `app.post(path, handler)` in Hono and Elysia (give the
 * Elysia route `{ parse: "none" }`), `app.post(path, handler)` in Express (before any body parser, or after
 * `express.raw`/`express.text`), and `handler.fetch` as a fetch handler. Signatures are checked on the raw body.
 */
export type WebhookHandler = ((ctx: any, res?: any, next?: any) => Promise<Response | void>) & {
  fetch: (req: Request) => Promise<Response>;
};

/** The gate. */
export type Gate = {
  /** The wallet's answer (cache, service, or the last known one when the service is down and `failOpen`). */
  check: (wallet: string) => Promise<CheckResult>;
  /** Drops the cached answer of `wallet` (what a webhook does). */
  evict: (wallet: string) => boolean;
  /** Hono middleware; the route reads `c.get("subscription")`. */
  hono: (o: WalletOf<any>) => ReturnType<typeof honoAdapter>;
  /** Express middleware; the route reads `req.subscription`. */
  express: (o: WalletOf<any>) => ReturnType<typeof expressAdapter>;
  /** Elysia plugin (`app.use(...)`); later routes read `subscription` from their context. */
  elysia: (o: WalletOf<any>) => ReturnType<typeof elysiaAdapter>;
  /** Wraps a fetch handler: `handler(req, subscription, ...rest)` runs only for a paid-up wallet. */
  fetch: <A extends unknown[]>(
    o: { wallet: (req: Request, ...args: A) => MaybeWallet },
    handler: (req: Request, subscription: CheckResult, ...args: A) => Response | Promise<Response>,
  ) => (req: Request, ...args: A) => Promise<Response>;
  /** The webhook endpoint that evicts what `subscription.*` and `event.reverted` events touch. */
  webhooks: (o: WebhookOptions) => WebhookHandler;
};

/** Creates a gate for one module and set of plans. */
export function createGate(opts: GateOptions): Gate {
  const checker = createChecker(opts);
  const describe = { module: opts.module.toLowerCase(), plans: opts.plans.map(String), chainId: opts.chainId };
  const run = (wallet: string | null | undefined) => decide(checker.check, describe, wallet);
  return {
    check: checker.check,
    evict: checker.evict,
    hono: (o) => honoAdapter(run, checker.peek, o.wallet),
    express: (o) => expressAdapter(run, checker.peek, o.wallet),
    elysia: (o) => elysiaAdapter(run, o.wallet),
    fetch: (o, handler) => fetchAdapter(run, checker.peek, o.wallet, handler),
    webhooks: (o) => webhookHandler(webhookReceiver(checker, o)),
  };
}

function webhookHandler(receive: ReturnType<typeof webhookReceiver>): WebhookHandler {
  const onRequest = async (req: Request): Promise<Response> => {
    const out = receive(await req.text(), req.headers);
    return Response.json(out.body, { status: out.status });
  };
  const handler = async (ctx: any, res?: any, next?: any): Promise<Response | void> => {
    if (ctx instanceof Request) return onRequest(ctx);
    if (ctx?.req?.raw instanceof Request) return onRequest(ctx.req.raw); // Hono
    if (ctx?.request instanceof Request) return onRequest(ctx.request); // Elysia
    if (res && typeof res.status === "function") {
      // Express: the raw body from express.raw/text, else from the stream itself.
      try {
        const raw = await expressBody(ctx);
        const headers = new Headers();
        for (const k of ["webhook-id", "webhook-timestamp", "webhook-signature"]) {
          const v = ctx.headers?.[k];
          if (typeof v === "string") headers.set(k, v);
        }
        if (raw === undefined) {
          res
            .status(400)
            .json({ error: "raw_body_required", message: "mount the webhook route before express.json()" });
          return;
        }
        const out = receive(raw, headers);
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

async function expressBody(req: any): Promise<string | undefined> {
  if (typeof req.body === "string") return req.body;
  if (req.body instanceof Uint8Array) return new TextDecoder().decode(req.body);
  if (req.body !== undefined && req.body !== null && Object.keys(req.body).length > 0) return undefined;
  const chunks: Uint8Array[] = [];
  for await (const chunk of req as AsyncIterable<Uint8Array | string>) {
    chunks.push(typeof chunk === "string" ? new TextEncoder().encode(chunk) : chunk);
  }
  return new TextDecoder().decode(Buffer.concat(chunks));
}
