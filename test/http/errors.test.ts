import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { Elysia, t } from "elysia";
import type { Socket, TCPSocketListener } from "bun";
import { createApp } from "../../src/http/app";
import { errorHandler } from "../../src/http/plugins/error-handler";
import { createChainRegistry } from "../../src/chain/clients";
import { createDb, type Db } from "../../src/db/client";
import { CHAIN_A, M1, MOD, W } from "../../testkit/seed";
import { admin, request, startSeededApp, testConfig, type SeededApp } from "../../testkit/app";
import { until } from "../../testkit/cli";

let s: SeededApp;
beforeAll(async () => {
  s = await startSeededApp();
}, 60_000);
afterAll(async () => {
  await s?.close();
});

const ADDRESS_BAD = [
  "0x",
  "0x123",
  `0x${"g".repeat(40)}`,
  `0x${"a".repeat(41)}`,
  "a".repeat(42),
  `0X${"a".repeat(40)}`,
  "%zz",
  "%E0%A4%A",
];
const CHAIN_BAD = [
  "",
  "0",
  "-1",
  "1.5",
  "abc",
  "0x10",
  "1e3",
  "%201",
  "99999999999999999999",
  "9007199254740992",
  "%zz",
];
const LIMIT_BAD = ["", "0", "1001", "-1", "1.0", "abc", "1e2", "10000", "%201"];
const SINCE_BAD = [
  "",
  "yesterday",
  "2026-13-01T00:00:00Z",
  "2026-02-30T00:00:00Z",
  "2026-02-29T00:00:00Z",
  "2026-01-01",
  "2026-01-01T25:00:00Z",
  "2026-01-01T00:60:00Z",
  "2026-01-01T00:00:00",
  "2026-01-01T00:00:00%2B2400",
  "1700000000",
  "2026-1-1T00:00:00Z",
];
const TOKEN_BAD = ["", "%00", "a%0Ab", "x".repeat(65)];
const ORDER_BAD = ["", "ASC", "up", "desc%20"];
const TYPE_BAD = ["", "charge", "PAYMENT", "CHARGE,FAIL"];
const STATUS_BAD = ["", "active", "UNKNOWN"];
const EVENT_BAD = [
  "",
  "x",
  `${CHAIN_A}:0x12:0`,
  `${CHAIN_A}:0x${"1".repeat(64)}:-1`,
  `0:0x${"1".repeat(64)}:0`,
  `${CHAIN_A}:0x${"1".repeat(64)}:99999999999`,
];
const ALLOC_BAD = [
  "",
  "x",
  `${CHAIN_A}:0x12:1`,
  `${CHAIN_A}:${MOD.a1}:-1`,
  `${CHAIN_A}:${MOD.a1}:${(1n << 256n).toString()}`,
];
const ID_BAD = ["abc", "-1", "1.5", "0x10", (1n << 256n).toString(), "1e3", "%zz", "1%20"];
const PLANS_BAD = [
  ",",
  "1,",
  ",1",
  "1,,2",
  "a",
  "4294967296",
  "-1",
  "1%202",
  "1;2",
  "%zz",
  "1.0",
  Array.from({ length: 101 }, (_, i) => i).join(","),
];
const MODE_BAD = ["", "ONCHAIN", "chain", "indexed,onchain"];

/** Every parameter of every route with every malformed value, as (url, expected param). */
function cases(): { url: string; param: string; code: string }[] {
  const out: { url: string; param: string; code: string }[] = [];
  const merchantRoutes = ["activity", "payments", "failures", "subscriptions"];
  const add = (url: string, param: string, code = "invalid_parameter") => out.push({ url, param, code });
  for (const route of merchantRoutes) {
    for (const v of ADDRESS_BAD) add(`/v0/${route}/${v}`, "merchant");
    for (const v of CHAIN_BAD) add(`/v0/${route}/${M1}?chain_id=${v}`, "chain_id");
    for (const v of LIMIT_BAD) add(`/v0/${route}/${M1}?limit=${v}`, "limit");
  }
  for (const route of ["activity", "payments", "failures"]) {
    for (const v of SINCE_BAD) add(`/v0/${route}/${M1}?since=${v}`, "since");
    for (const v of TOKEN_BAD) add(`/v0/${route}/${M1}?token=${v}`, "token");
    for (const v of ORDER_BAD) add(`/v0/${route}/${M1}?order=${v}`, "order");
    for (const v of EVENT_BAD) add(`/v0/${route}/${M1}?starting_after=${encodeURIComponent(v)}`, "starting_after");
  }
  for (const v of TYPE_BAD) add(`/v0/activity/${M1}?type=${v}`, "type");
  for (const v of STATUS_BAD) add(`/v0/subscriptions/${M1}?status=${v}`, "status");
  for (const v of ALLOC_BAD) add(`/v0/subscriptions/${M1}?starting_after=${encodeURIComponent(v)}`, "starting_after");
  for (const v of ADDRESS_BAD) add(`/v0/subscriptions/${v}/1`, "merchant");
  for (const v of ID_BAD) add(`/v0/subscriptions/${M1}/${v}`, "id");
  for (const v of CHAIN_BAD) add(`/v0/subscriptions/${M1}/1?chain_id=${v}`, "chain_id");

  const ok = { module_address: MOD.a1, wallet: W.alice, plan_ids: "1" } as Record<string, string>;
  const checkUrl = (over: Record<string, string | undefined>) => {
    const params = { ...ok, ...over };
    const qs = Object.entries(params)
      .filter(([, v]) => v !== undefined)
      .map(([k, v]) => `${k}=${v}`)
      .join("&");
    return `/v0/auth/check?${qs}`;
  };
  for (const p of ["module_address", "wallet"]) {
    for (const v of ["", ...ADDRESS_BAD]) add(checkUrl({ [p]: v }), p);
    add(checkUrl({ [p]: undefined }), p, "missing_parameter");
  }
  for (const v of PLANS_BAD) add(checkUrl({ plan_ids: v }), "plan_ids");
  add(checkUrl({ plan_ids: undefined }), "plan_ids", "missing_parameter");
  add(checkUrl({ plan_ids: "" }), "plan_ids", "missing_parameter");
  for (const v of MODE_BAD) add(checkUrl({ mode: v }), "mode");
  for (const v of CHAIN_BAD) add(checkUrl({ chain_id: v }), "chain_id");
  return out;
}

describe("malformed input", () => {
  const table = cases();

  test(`every malformed parameter of every route is a 400 naming it (${table.length} cases)`, async () => {
    expect(table.length).toBeGreaterThan(250);
    const failures: string[] = [];
    for (const c of table) {
      const res = await s.get(c.url);
      const e = res.body?.error;
      if (res.status !== 400 || e?.code !== c.code || e?.param !== c.param || e?.type !== "invalid_request_error") {
        failures.push(`${c.url} -> ${res.status} ${JSON.stringify(res.body)}`);
      }
      expect(typeof e?.message).toBe("string");
      expect(e?.request_id).toMatch(/^req_/);
    }
    expect(failures).toEqual([]);
  });

  test("the first bad parameter is reported even without a credential", async () => {
    const res = await s.get(`/v0/activity/${M1}?limit=0`, {});
    expect(res.status).toBe(400);
    expect(res.body.error.param).toBe("limit");
  });

  test("no query string or header can produce a 5xx", async () => {
    const junk = [
      "%",
      "%%",
      "%00",
      "\u0000",
      "'; drop table activity; --",
      "😀",
      "a".repeat(5000),
      "[]",
      "{}",
      "null",
      "undefined",
      "NaN",
      "Infinity",
      "__proto__",
      "constructor",
      "-0",
      "0e0",
      "%F0%9F%98%80",
    ];
    const params = [
      "chain_id",
      "limit",
      "since",
      "token",
      "order",
      "starting_after",
      "type",
      "status",
      "mode",
      "plan_ids",
      "wallet",
      "module_address",
    ];
    const routes = [
      `/v0/activity/${M1}`,
      `/v0/payments/${M1}`,
      `/v0/subscriptions/${M1}`,
      `/v0/subscriptions/${M1}/1`,
      `/v0/auth/check`,
    ];
    for (const route of routes) {
      for (const p of params) {
        for (const v of junk) {
          const url = `${route}?${p}=${encodeURIComponent(v)}&${p}[x]=1`;
          const res = await s.get(url);
          if (res.status >= 500) throw new Error(`${url} -> ${res.status} ${JSON.stringify(res.body)}`);
          expect(res.body.error ?? res.body).toBeDefined();
        }
      }
    }
    const headers: Record<string, string>[] = [
      { authorization: "Bearer \u00ff" },
      { authorization: "Basic abc" },
      { cookie: "siwe_session=%zz" },
    ];
    for (const h of headers) {
      const res = await s.get(`/v0/activity/${M1}`, h);
      expect(res.status).toBe(401);
    }
  });
});

describe("unknown routes", () => {
  test("404 not_found envelope for unknown paths and methods", async () => {
    for (const path of [
      "/",
      "/v0",
      "/v0/nope",
      "/v0/activity",
      `/v0/activity/${M1}/extra`,
      "/v1/activity/x",
      "/docs/nope",
    ]) {
      const res = await s.get(path);
      expect(res.status).toBe(404);
      expect(res.body.error).toMatchObject({ type: "invalid_request_error", code: "not_found" });
      expect(res.body.error.request_id).toMatch(/^req_/);
    }
    const post = await s.app.handle(
      new Request(`http://localhost/v0/activity/${M1}`, { method: "POST", headers: admin }),
    );
    expect(post.status).toBe(404);
    expect((await post.json()).error.code).toBe("not_found");
  });
});

describe("error handler", () => {
  const app = new Elysia()
    .use(errorHandler)
    .get("/n", ({ query }) => query, { query: t.Object({ limit: t.Optional(t.Numeric({ minimum: 1, maximum: 5 })) }) })
    .post("/b", ({ body }) => body, {
      body: t.Object({ message: t.String(), signature: t.String({ pattern: "^0x" }) }),
    })
    .get("/boom", () => {
      throw new Error("secret stack detail");
    });

  test("Elysia validation errors become 400 envelopes naming the field (also for transformed numbers)", async () => {
    for (const v of ["0", "6", "abc"]) {
      const res = await request(app, `/n?limit=${v}`);
      expect(res.status).toBe(400);
      expect(res.body.error).toMatchObject({ code: "invalid_parameter", param: "limit" });
    }
    const post = (body: string) =>
      app.handle(
        new Request("http://localhost/b", { method: "POST", body, headers: { "content-type": "application/json" } }),
      );
    const missing = await post(JSON.stringify({ message: "m" }));
    expect(missing.status).toBe(400);
    expect((await missing.json()).error).toMatchObject({ code: "missing_parameter", param: "signature" });
    const invalid = await post(JSON.stringify({ message: "m", signature: "zz" }));
    expect((await invalid.json()).error).toMatchObject({ code: "invalid_parameter", param: "signature" });
    const unparsable = await post("{not json");
    expect(unparsable.status).toBe(400);
    expect((await unparsable.json()).error.param).toBe("body");
  });

  test("an unexpected error is a 500 envelope that leaks nothing", async () => {
    const original = console.error;
    console.error = () => {};
    try {
      const res = await request(app, "/boom");
      expect(res.status).toBe(500);
      expect(res.body.error).toMatchObject({ type: "api_error", code: "internal_error" });
      expect(JSON.stringify(res.body)).not.toContain("secret");
    } finally {
      console.error = original;
    }
  });
});

/** A TCP proxy in front of the database that can be cut and restored, to simulate an outage. */
async function startProxy(target: { host: string; port: number }) {
  const sockets = new Set<Socket<unknown>>();
  let listener: TCPSocketListener<unknown> | undefined;
  let port = 0;
  const open = () => {
    listener = Bun.listen<{ upstream?: Socket<unknown>; pending: Uint8Array[] }>({
      hostname: "127.0.0.1",
      port,
      socket: {
        open: async (client) => {
          client.data = { pending: [] };
          sockets.add(client as Socket<unknown>);
          try {
            const upstream = await Bun.connect({
              hostname: target.host,
              port: target.port,
              socket: {
                data: (_s, chunk) => void client.write(chunk),
                close: () => void client.end(),
                error: () => void client.end(),
              },
            });
            sockets.add(upstream as Socket<unknown>);
            client.data.upstream = upstream as Socket<unknown>;
            for (const c of client.data.pending) upstream.write(c);
          } catch {
            client.end();
          }
        },
        data: (client, chunk) => {
          if (client.data.upstream) client.data.upstream.write(chunk);
          else client.data.pending.push(new Uint8Array(chunk));
        },
        close: (client) => void client.data.upstream?.end(),
        error: (client) => void client.data.upstream?.end(),
      },
    });
    port = listener.port;
  };
  open();
  return {
    get port() {
      return port;
    },
    cut: () => {
      listener?.stop(true);
      for (const sock of sockets) sock.terminate();
      sockets.clear();
    },
    restore: open,
  };
}

describe("database outage", () => {
  test("a database that cannot be reached gives 503 unavailable; /healthz stays up", async () => {
    const config = testConfig();
    const dead = await createDb({ url: "postgres://postgres@127.0.0.1:9/none", max: 1 });
    try {
      const app = createApp({ sql: dead.sql, config, chains: await createChainRegistry(config) });
      for (const path of [
        `/v0/activity/${M1}`,
        `/v0/subscriptions/${M1}`,
        `/v0/subscriptions/${M1}/1`,
        `/v0/auth/check?module_address=${MOD.a1}&wallet=${W.alice}&plan_ids=1`,
        "/readyz",
      ]) {
        const res = await request(app, path);
        expect(res.status).toBe(503);
        expect(res.body.error).toMatchObject({ type: "api_error", code: "unavailable" });
        expect(res.headers.get("retry-after")).toBe("1");
      }
      expect((await request(app, "/healthz")).status).toBe(200);
    } finally {
      await dead.close();
    }
  });

  test("the app recovers by itself when the database comes back", async () => {
    const url = new URL(s.db.url);
    const proxy = await startProxy({ host: url.hostname, port: Number(url.port || 5432) });
    const viaProxy = new URL(s.db.url);
    viaProxy.port = String(proxy.port);
    // PGlite serves one connection: the seeded app's own client must let go of it while this one runs.
    if (s.db.kind === "pglite") await s.db.sql.end();
    const db = await createDb({ url: viaProxy.toString(), max: 1 });
    try {
      const config = testConfig();
      const app = createApp({ sql: db.sql, config, chains: await createChainRegistry(config) });
      const path = `/v0/subscriptions/${M1}/1`;
      expect((await request(app, path)).status).toBe(200);
      proxy.cut();
      const down = await request(app, path);
      expect(down.status).toBe(503);
      expect(down.body.error.code).toBe("unavailable");
      expect((await request(app, `/v0/auth/check?module_address=${MOD.a1}&wallet=${W.alice}&plan_ids=1`)).status).toBe(
        503,
      );
      proxy.restore();
      await until("the app to answer again", async () => (await request(app, path)).status === 200);
      expect((await request(app, path)).body.on_chain_id).toBe("1");
    } finally {
      await db.sql.end({ timeout: 1 });
      proxy.cut();
    }
  }, 30_000);
});
