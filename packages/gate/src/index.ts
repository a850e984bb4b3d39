/**
 * `@subscription-indexer/gate`: "is this wallet paid up?" for a merchant's own server, backed by the Subscription
 * Payments Indexer's `GET /v0/auth/check`. Adapters for Hono, Express, Elysia and plain fetch handlers answer 401
 * (no wallet), 402 (not paid up), 503 (the service cannot answer and `failOpen` is false), or pass the result on.
 */
import type { Context } from "hono";
import { createChecker, type CheckerOptions, type CheckResult } from "./check.js";
import {
  elysiaAdapter,
  expressAdapter,
  fetchAdapter,
  honoAdapter,
  honoRouteAdapter,
  decide,
  type MaybeWallet,
} from "./adapters.js";
import { webhookReceiver, type WebhookOptions } from "./webhooks.js";
import { webhookHandler, type WebhookHandler } from "./webhook-handler.js";

export { GateRequestError, GateUnavailableError, type CheckMode, type CheckResult } from "./check.js";
export type { MaybeWallet, Verdict } from "./adapters.js";
export type { WebhookOptions } from "./webhooks.js";
export type { WebhookHandler } from "./webhook-handler.js";

/** Options of {@link createGate}. */
export type GateOptions = CheckerOptions;

/** A wallet source of a framework: reads the signed-in wallet from the request (session, verified token…). */
export type WalletOf<C> = { wallet: (ctx: C) => MaybeWallet };

/** The gate. */
export type Gate = {
  /** The wallet's answer (cache, service, or the last known one when the service is down and `failOpen`). */
  check: (wallet: string) => Promise<CheckResult>;
  /** Drops the cached answer of `wallet` (what a webhook does). */
  evict: (wallet: string) => boolean;
  /** Hono middleware; the route reads `c.get("subscription")`. */
  hono: (o: WalletOf<any>) => ReturnType<typeof honoAdapter>;
  /**
   * A gated Hono route handler (`app.get("/premium", gate.honoRoute({ wallet }, (c) => …))`): the same answers as
   * `hono()`, without a middleware in front of the route (Hono keeps its synchronous path for a cached answer).
   */
  honoRoute: <C extends Context>(
    o: { wallet: (c: C) => MaybeWallet },
    handler: (c: C) => Response | Promise<Response>,
  ) => (c: C) => Response | Promise<Response>;
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
    honoRoute: (o, handler) => honoRouteAdapter(run, checker.peek, o.wallet, handler),
    express: (o) => expressAdapter(run, checker.peek, o.wallet),
    elysia: (o) => elysiaAdapter(run, o.wallet),
    fetch: (o, handler) => fetchAdapter(run, checker.peek, o.wallet, handler),
    webhooks: (o) => webhookHandler(webhookReceiver(checker, o)),
  };
}
