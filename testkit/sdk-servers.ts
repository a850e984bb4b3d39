/**
 * The same merchant server in each framework the gate supports — express, hono, elysia and a plain Bun.serve fetch
 * handler — on real ports: `GET /premium` gated (the wallet comes from the `x-wallet` header, standing in for the
 * merchant's own sign-in), answering the gate's result as JSON (hono also `GET /premium-route`, gated by
 * `gate.honoRoute`); `GET /free` not gated; `POST /webhooks` the gate's
 * webhook endpoint, recording each delivery's outcome.
 */
import express from "express";
import { Hono } from "hono";
import { Elysia } from "elysia";
import type { Gate } from "../packages/gate/src/index";

/** The frameworks. */
export const FRAMEWORKS = ["express", "hono", "elysia", "fetch"] as const;
/** One of them. */
export type Framework = (typeof FRAMEWORKS)[number];

/** A running merchant server. */
export type MerchantServer = {
  url: string;
  /** `{status, body}` of every webhook delivery it answered. */
  deliveries: { status: number; body: any; type: string }[];
  stop: () => Promise<void>;
};

/** Starts the server of `framework` in front of `gate` on `port`; `secret` is its webhook endpoint's. */
export async function startMerchantServer(
  framework: Framework,
  gate: Gate,
  opts: { port: number; secret: string },
): Promise<MerchantServer> {
  const { port } = opts;
  const deliveries: MerchantServer["deliveries"] = [];
  const hook = gate.webhooks({ secret: opts.secret });
  const record = async (res: Response, type: string) => {
    deliveries.push({ status: res.status, body: await res.clone().json(), type });
    return res;
  };
  const typeOf = (raw: string) => {
    try {
      return String(JSON.parse(raw).type);
    } catch {
      return "";
    }
  };
  const onWebhook = async (req: Request) => {
    const raw = await req.clone().text();
    return record(await hook.fetch(req), typeOf(raw));
  };

  if (framework === "express") {
    const app = express();
    app.get("/free", (_req, res) => void res.json({ free: true }));
    app.get("/premium", gate.express({ wallet: (req) => req.get("x-wallet") }), (req, res) => {
      res.json((req as unknown as { subscription: unknown }).subscription);
    });
    // The raw body for the signature, as the gate's README says for Express.
    app.post("/webhooks", express.text({ type: "*/*" }), (req, res, next) => {
      const json = res.json.bind(res);
      res.json = (body: any) => {
        deliveries.push({ status: res.statusCode, body, type: typeOf(req.body) });
        return json(body);
      };
      return hook(req, res, next);
    });
    const server = await new Promise<ReturnType<typeof app.listen>>((resolve) => {
      const s = app.listen(port, "127.0.0.1", () => resolve(s));
    });
    return { url: `http://127.0.0.1:${port}`, deliveries, stop: () => new Promise((r) => server.close(() => r())) };
  }

  if (framework === "hono") {
    const app = new Hono<{ Variables: { subscription: unknown } }>();
    app.get("/free", (c) => c.json({ free: true }));
    app.use("/premium/*", gate.hono({ wallet: (c) => c.req.header("x-wallet") }));
    app.get("/premium", (c) => c.json(c.get("subscription")));
    // The same route gated as one handler (no middleware in front of it).
    app.get(
      "/premium-route",
      gate.honoRoute({ wallet: (c) => c.req.header("x-wallet") }, (c) => c.json(c.get("subscription"))),
    );
    app.post("/webhooks", async (c) => {
      const raw = await c.req.raw.clone().text();
      return record((await hook(c)) as Response, typeOf(raw));
    });
    const server = Bun.serve({ port, hostname: "127.0.0.1", fetch: app.fetch });
    return { url: `http://127.0.0.1:${server.port}`, deliveries, stop: async () => void server.stop(true) };
  }

  if (framework === "elysia") {
    const app = new Elysia()
      .get("/free", () => ({ free: true }))
      .post(
        "/webhooks",
        async (ctx) => {
          const type = typeOf(await ctx.request.clone().text());
          return record((await hook(ctx)) as Response, type);
        },
        { parse: "none" },
      )
      .use(gate.elysia({ wallet: ({ request }: { request: Request }) => request.headers.get("x-wallet") }))
      .get("/premium", ({ subscription }) => subscription)
      .listen({ port, hostname: "127.0.0.1" });
    return {
      url: `http://127.0.0.1:${app.server!.port}`,
      deliveries,
      stop: async () => void (await app.stop(true)),
    };
  }

  const premium = gate.fetch({ wallet: (req) => req.headers.get("x-wallet") }, (_req, subscription) =>
    Response.json(subscription),
  );
  const server = Bun.serve({
    port,
    hostname: "127.0.0.1",
    routes: {
      "/free": () => Response.json({ free: true }),
      "/premium": premium,
      "/webhooks": { POST: onWebhook },
    },
    fetch: () => new Response("not found", { status: 404 }),
  });
  return { url: `http://127.0.0.1:${server.port}`, deliveries, stop: async () => void server.stop(true) };
}
