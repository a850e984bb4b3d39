/**
 * `@subscription-indexer/gate`: "is this wallet paid up?" for a merchant's own server, backed by the Subscription
 * Payments Indexer's `GET /v0/auth/check`. Adapters for Hono, Express, Elysia and plain fetch handlers answer 401
 * (no wallet), 402 (not paid up), 503 (the service cannot answer and `failOpen` is false), or pass the result on.
 */
import {
  createChecker,
  GateRequestError,
  GateUnavailableError,
  type CheckerOptions,
  type CheckResult,
} from "./check.js";
import {
  elysiaAdapter,
  expressAdapter,
  fetchAdapter,
  honoAdapter,
  honoRouteAdapter,
  decide,
  type MaybeWallet,
  type PaymentOption,
} from "./adapters.js";
import { webhookReceiver, type WebhookOptions } from "./webhooks.js";
import { webhookHandler, type WebhookHandler } from "./webhook-handler.js";

export { GateRequestError, GateUnavailableError, type CheckMode, type CheckResult } from "./check.js";
export type {
  ExpressMiddleware,
  GateVariables,
  HonoMiddleware,
  MaybeWallet,
  PaymentOption,
  PaymentRequiredBody,
  Verdict,
} from "./adapters.js";
export type { GateEvent, WebhookOptions } from "./webhooks.js";
export { memoryStore, type GateStore, type StoredAnswer, type StoredEntry } from "./store.js";
export type { WebhookHandler } from "./webhook-handler.js";

/** Options of {@link createGate}. */
export type GateOptions = CheckerOptions & {
  /** Where a user subscribes, sent in every 402 (`subscribe_url`). */
  subscribeUrl?: string;
  /** Where a misconfiguration found by {@link Gate.ready} is reported (default `console.error`). */
  onError?: (err: Error) => void;
};

/** The plans as `GET /v0/auth/plans` describes them. */
type PlansBody = {
  chain_id: number;
  module_address: string;
  plans: {
    plan_id: string;
    token: string;
    symbol: string | null;
    decimals: number | null;
    amount: string;
    interval_s: number;
  }[];
};

/** A wallet source of a framework: reads the signed-in wallet from the request (session, verified token…). */
export type WalletOf<C> = { wallet: (ctx: C) => MaybeWallet };

/** The gate. */
export type Gate = {
  /** The wallet's answer (cache, service, or the last known one when the service is down and `failOpen`). */
  check: (wallet: string) => Promise<CheckResult>;
  /** Drops the cached answer of `wallet`. */
  evict: (wallet: string) => Promise<void>;
  /**
   * Resolves with the plans once the service has confirmed the module, plans and chain exist; rejects with a
   * GateRequestError when it refused them (then every gated request answers 500 `gate_misconfigured`, never 402).
   * Asked once at creation; asked again later when the service could not answer.
   */
  ready: () => Promise<PaymentOption[]>;
  /** Hono middleware; the route reads `c.get("subscription")`. */
  hono: (o: WalletOf<any>) => ReturnType<typeof honoAdapter>;
  /**
   * A gated Hono route handler (`app.get("/premium", gate.honoRoute({ wallet }, (c) => …))`): the same answers as
   * `hono()`, without a middleware in front of the route (Hono keeps its synchronous path for a cached answer).
   */
  honoRoute: <C = any>(
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
  /** The webhook endpoint: invalidates what `subscription.*` and `event.reverted` events touch, then `onEvent`. */
  webhooks: (o: WebhookOptions) => WebhookHandler;
};

/** Creates a gate for one module and set of plans. */
export function createGate(opts: GateOptions): Gate {
  const checker = createChecker(opts);
  const module = opts.module.toLowerCase();
  const plans = opts.plans.map(String);
  let described: Promise<PaymentOption[]> | undefined;
  const ready = (): Promise<PaymentOption[]> => {
    if (described) return described;
    const q = new URLSearchParams({ module_address: module, plan_ids: plans.join(",") });
    if (opts.chainId !== undefined) q.set("chain_id", String(opts.chainId));
    const p = checker.getJson("v0/auth/plans", q).then((raw) => {
      const body = raw as PlansBody;
      if (!body || !Array.isArray(body.plans)) throw new GateUnavailableError("the service did not describe the plans");
      return body.plans.map((p): PaymentOption => ({
        scheme: "subscription",
        network: `eip155:${body.chain_id}`,
        chain_id: body.chain_id,
        module: body.module_address,
        plan_id: p.plan_id,
        asset: p.token,
        symbol: p.symbol,
        decimals: p.decimals,
        amount: p.amount,
        interval_s: p.interval_s,
        ...(opts.subscribeUrl === undefined ? {} : { subscribe_url: opts.subscribeUrl }),
      }));
    });
    described = p;
    p.catch((err: Error) => {
      if (err instanceof GateRequestError) (opts.onError ?? console.error)(err);
      else if (described === p) described = undefined; // unavailable: asked again on the next 402
    });
    return p;
  };
  ready().catch(() => {});
  const describe = {
    module,
    plans,
    chainId: opts.chainId,
    subscribeUrl: opts.subscribeUrl,
    options: () =>
      ready().catch((err) => {
        if (err instanceof GateRequestError) throw err;
        return undefined;
      }),
  };
  const run = (wallet: string | null | undefined) => decide(checker.check, describe, wallet);
  return {
    check: checker.check,
    evict: checker.evict,
    ready,
    hono: (o) => honoAdapter(run, checker.peek, o.wallet),
    honoRoute: (o, handler) => honoRouteAdapter(run, checker.peek, o.wallet, handler),
    express: (o) => expressAdapter(run, checker.peek, o.wallet),
    elysia: (o) => elysiaAdapter(run, o.wallet),
    fetch: (o, handler) => fetchAdapter(run, checker.peek, o.wallet, handler),
    webhooks: (o) => webhookHandler(webhookReceiver(checker, o)),
  };
}

declare global {
  // Express's own declarations merge their Request with this interface: `req.subscription` after `gate.express()`.
  // Without express installed it is an empty namespace of no consequence.
  namespace Express {
    interface Request {
      /** The gate's answer, set by `gate.express()` for a request it passed. */
      subscription?: CheckResult;
    }
  }
}
