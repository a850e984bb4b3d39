/** Framework adapters: the same decision (401, 402, 503 or pass with the result) for Hono, Express, Elysia and fetch. */
import { GateRequestError, GateUnavailableError, type CheckResult } from "./check.js";

/** A wallet source's answer: an address, or nothing when the request carries no signed-in wallet. */
export type MaybeWallet = string | null | undefined | Promise<string | null | undefined>;

/** The gate's verdict on one request: pass with the result, or an answer to send. */
export type Verdict =
  | { ok: true; subscription: CheckResult }
  | { ok: false; status: number; body: Record<string, unknown>; headers: Record<string, string> };

const ADDRESS = /^0x[0-9a-fA-F]{40}$/;

/** One way to pay for access, in the 402 body (`x402`-style payment requirements, scheme `subscription`). */
export type PaymentOption = {
  scheme: "subscription";
  /** CAIP-2 chain id, `eip155:<chain_id>`. */
  network: string;
  chain_id: number;
  /** The subscription module (lowercase). */
  module: string;
  /** The on-chain plan id (decimal). */
  plan_id: string;
  /** The token charged (lowercase address). */
  asset: string;
  /** Its symbol and decimals as the chain reports them (null when unknown). */
  symbol: string | null;
  decimals: number | null;
  /** Charged each interval, in the token's smallest unit (decimal string). */
  amount: string;
  /** Seconds between charges. */
  interval_s: number;
  /** Where a user subscribes (the `subscribeUrl` option), when given. */
  subscribe_url?: string;
};

/** The body of a 402: what is missing and how to get it. */
export type PaymentRequiredBody = {
  error: "subscription_required";
  message: string;
  wallet: string;
  module: string;
  plans: string[];
  chain_id?: number;
  /** The plans' prices, token and interval; absent when the service could not describe them just now. */
  accepts?: PaymentOption[];
  subscribe_url?: string;
};

/** What a 402 says about the gate's plans. */
export type Describe = {
  module: string;
  plans: string[];
  chainId?: number;
  subscribeUrl?: string;
  /** The plans as the service describes them (undefined when it cannot now); rejects when misconfigured. */
  options: () => Promise<PaymentOption[] | undefined>;
};

/** Decides a request from the wallet it carries (shared by every adapter). */
export async function decide(
  check: (wallet: string) => Promise<CheckResult>,
  describe: Describe,
  wallet: string | null | undefined,
): Promise<Verdict> {
  if (!wallet || !ADDRESS.test(wallet)) {
    return {
      ok: false,
      status: 401,
      body: { error: "wallet_required", message: "sign in with a wallet to use this route" },
      headers: {},
    };
  }
  try {
    const subscription = await check(wallet);
    if (subscription.authorized) return { ok: true, subscription };
    const accepts = await describe.options();
    const body: PaymentRequiredBody = {
      error: "subscription_required",
      message: "an active subscription to one of these plans is required",
      wallet: wallet.toLowerCase(),
      module: describe.module,
      plans: describe.plans,
      ...(describe.chainId === undefined ? {} : { chain_id: describe.chainId }),
      ...(accepts ? { accepts } : {}),
      ...(describe.subscribeUrl === undefined ? {} : { subscribe_url: describe.subscribeUrl }),
    };
    return { ok: false, status: 402, body, headers: {} };
  } catch (err) {
    if (err instanceof GateUnavailableError) {
      return {
        ok: false,
        status: 503,
        body: { error: "subscription_check_unavailable", message: "the subscription status cannot be checked now" },
        headers: { "retry-after": "5" },
      };
    }
    if (err instanceof GateRequestError) {
      // The gate's own options are wrong (module, plans, chain): no user can fix that, and none is told "pay".
      return {
        ok: false,
        status: 500,
        body: { error: "gate_misconfigured", message: "the subscription gate is misconfigured" },
        headers: {},
      };
    }
    throw err;
  }
}

type Decide = (wallet: string | null | undefined) => Promise<Verdict>;

// The framework types below are written here, not imported: the published declarations must type-check in a
// project that has none of hono, express or elysia installed. Each is what that framework accepts.

/** A Hono middleware (`app.use(path, gate.hono(...))`); type the app `new Hono<{ Variables: GateVariables }>()`. */
export type HonoMiddleware = (c: any, next: () => Promise<void>) => Promise<Response | void>;

/** The Hono context variables the gate sets: `c.get("subscription")`. */
export type GateVariables = { subscription: CheckResult };

/** An Express middleware; the route reads `req.subscription` (typed by the gate's `Express.Request` augmentation). */
export type ExpressMiddleware = (req: any, res: any, next: (err?: unknown) => void) => void;

/** The synchronous cached answer of a wallet, when there is one (no promise on the hot path). */
export type Peek = (wallet: string) => CheckResult | undefined;

const json = (v: Extract<Verdict, { ok: false }>) =>
  new Response(JSON.stringify(v.body), {
    status: v.status,
    headers: { "content-type": "application/json", ...v.headers },
  });

/** Hono middleware: `c.get("subscription")` in the route. */
export function honoAdapter(run: Decide, peek: Peek, wallet: (c: any) => MaybeWallet): HonoMiddleware {
  return (c, next) => {
    const w = wallet(c);
    // Hot path: a cached positive answer passes with no promise of ours.
    const hit = typeof w === "string" ? peek(w) : undefined;
    if (hit?.authorized) {
      c.set("subscription", hit);
      return next();
    }
    return (async () => {
      const v = await run(await w);
      if (!v.ok) return json(v);
      c.set("subscription", v.subscription);
      await next();
    })();
  };
}

/**
 * A Hono route handler gated as a whole: `handler(c)` runs only for a paid-up wallet, with `c.get("subscription")`.
 * One handler instead of a middleware and a handler: a cached answer keeps Hono's synchronous single-handler path.
 */
export function honoRouteAdapter<C = any>(
  run: Decide,
  peek: Peek,
  wallet: (c: C) => MaybeWallet,
  handler: (c: C) => Response | Promise<Response>,
): (c: C) => Response | Promise<Response> {
  return (c) => {
    const w = wallet(c);
    const hit = typeof w === "string" ? peek(w) : undefined;
    if (hit?.authorized) {
      (c as any).set("subscription", hit);
      return handler(c);
    }
    return (async () => {
      const v = await run(await w);
      if (!v.ok) return json(v);
      (c as any).set("subscription", v.subscription);
      return handler(c);
    })();
  };
}

/** Express middleware: `req.subscription` in the route. */
export function expressAdapter(run: Decide, peek: Peek, wallet: (req: any) => MaybeWallet): ExpressMiddleware {
  return (req, res, next) => {
    const w = wallet(req);
    const hit = typeof w === "string" ? peek(w) : undefined;
    if (hit?.authorized) {
      (req as { subscription?: CheckResult }).subscription = hit;
      return next();
    }
    Promise.resolve(w)
      .then(run)
      .then((v) => {
        if (v.ok) {
          (req as { subscription?: CheckResult }).subscription = v.subscription;
          return next();
        }
        res.status(v.status).set(v.headers).json(v.body);
      })
      .catch(next);
  };
}

/**
 * An Elysia plugin (`app.use(...)`): routes registered after it get `subscription` in their context. Typed loosely
 * here (so that the main entry needs no elysia types); `@subscription-indexer/gate/elysia` types the context.
 */
export function elysiaAdapter(run: Decide, wallet: (ctx: any) => MaybeWallet): (app: any) => any {
  return (app: any) =>
    app.resolve(async (ctx: any) => {
      const v = await run(await wallet(ctx));
      if (!v.ok) {
        Object.assign(ctx.set.headers, v.headers);
        return ctx.status(v.status, v.body);
      }
      return { subscription: v.subscription };
    });
}

/** A fetch handler (Bun.serve, Next.js route handlers, workers) that runs `handler` only for a paid-up wallet. */
export function fetchAdapter<A extends unknown[]>(
  run: Decide,
  peek: Peek,
  wallet: (req: Request, ...args: A) => MaybeWallet,
  handler: (req: Request, subscription: CheckResult, ...args: A) => Response | Promise<Response>,
): (req: Request, ...args: A) => Promise<Response> {
  return async (req, ...args) => {
    const w = wallet(req, ...args);
    const hit = typeof w === "string" ? peek(w) : undefined;
    if (hit?.authorized) return handler(req, hit, ...args);
    const v = await run(await w);
    return v.ok ? handler(req, v.subscription, ...args) : json(v);
  };
}
