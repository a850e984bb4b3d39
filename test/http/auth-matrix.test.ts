/**
 * The credential matrix on the real app (createApp over the seeded database): every protected route against no,
 * malformed, unknown, revoked, foreign, own and admin API keys and against live, foreign, expired and logged-out SIWE
 * sessions (signed in through the real /v0/siwe routes). /v0/auth/check stays public whatever is sent. No error
 * response ever carries a secret.
 */
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { createApiKey, revokeApiKey } from "../../src/auth/api-keys";
import { createSession } from "../../src/auth/sessions";
import { hashSecret } from "../../src/auth/hash";
import { createEndpoint } from "../../src/webhooks/endpoints";
import { accounts } from "../../testkit/accounts";
import { CHAIN_A, M1, M2, M_NONE, MOD, W } from "../../testkit/seed";
import { postJson, signIn } from "../../testkit/siwe";
import { ADMIN_KEY, startSeededApp, type SeededApp } from "../../testkit/app";

let s: SeededApp;
/** Every secret handed out in this file: none may appear in an error response. */
const secrets: string[] = [ADMIN_KEY];
/** Every error response seen, with the credential that was sent. */
const errors: { what: string; sent: string | null; body: string; headers: string }[] = [];

/** A merchant's modules on chain A (its data) and one of its subscription ids there. */
const OWN = {
  [M1]: { modules: [MOD.a1, MOD.a2], subscriptionId: "" },
  [M2]: { modules: [MOD.a3], subscriptionId: "" },
};

/** The protected routes, as a function of the merchant in the path. */
const ROUTES: { name: string; path: (m: string) => string; list: boolean }[] = [
  { name: "activity", path: (m) => `/v0/activity/${m}`, list: true },
  { name: "payments", path: (m) => `/v0/payments/${m}`, list: true },
  { name: "failures", path: (m) => `/v0/failures/${m}`, list: true },
  { name: "subscriptions", path: (m) => `/v0/subscriptions/${m}`, list: true },
  {
    name: "subscription by id",
    path: (m) => `/v0/subscriptions/${m}/${OWN[m as keyof typeof OWN]?.subscriptionId ?? "1"}`,
    list: false,
  },
];

type Res = { status: number; headers: Headers; body: any; text: string };

/** Sends a request through the real app, recording every error response for the secret check. */
async function send(path: string, headers: Record<string, string> = {}, method = "GET"): Promise<Res> {
  const res = await s.app.handle(new Request(`http://localhost${path}`, { method, headers }));
  const text = await res.text();
  let body: unknown = text;
  try {
    body = JSON.parse(text);
  } catch {
    // not JSON: the assertions below say so
  }
  if (res.status >= 400) {
    errors.push({
      what: `${method} ${path} -> ${res.status}`,
      sent: headers.authorization ?? headers.cookie ?? null,
      body: text,
      headers: JSON.stringify([...res.headers]),
    });
  }
  return { status: res.status, headers: res.headers, body, text };
}

const bearer = (token: string) => ({ authorization: `Bearer ${token}` });

/** A 401 with `WWW-Authenticate: Bearer` and the error envelope. */
function expectUnauthenticated(res: Res, what: string) {
  expect(res.status, what).toBe(401);
  expect(res.headers.get("www-authenticate"), what).toBe("Bearer");
  expect(res.headers.get("content-type"), what).toContain("application/json");
  expect(res.body?.error?.type, what).toBe("authentication_error");
  expect(res.body?.error?.code, what).toBe("unauthenticated");
  expect(res.body?.error?.message?.length ?? 0, what).toBeGreaterThan(5);
  expect(res.body?.error?.request_id, what).toMatch(/^req_[0-9a-f]{32}$/);
  expect(res.headers.get("x-request-id"), what).toBe(res.body.error.request_id);
}

function expectForbidden(res: Res, what: string) {
  expect(res.status, what).toBe(403);
  expect(res.body?.error?.type, what).toBe("permission_error");
  expect(res.body?.error?.code, what).toBe("forbidden");
  expect(res.body?.error?.request_id, what).toMatch(/^req_/);
  expect(res.headers.get("www-authenticate"), what).toBeNull();
}

/** A 200 carrying `merchant`'s data (and nothing of another merchant's). */
function expectOwnData(res: Res, merchant: string, list: boolean, what: string) {
  expect(res.status, what).toBe(200);
  const modules = OWN[merchant as keyof typeof OWN]?.modules ?? [];
  const rows: { module_address: string }[] = list ? res.body : [res.body];
  expect(Array.isArray(rows), what).toBe(true);
  // M1 has data on every route: an empty answer would prove nothing.
  if (merchant === M1) expect(rows.length, what).toBeGreaterThan(0);
  for (const r of rows) expect(modules, what).toContain(r.module_address);
  if (!list) expect(res.body.on_chain_id, what).toBe(OWN[merchant as keyof typeof OWN].subscriptionId);
}

/** Runs `fn` on every protected route for `merchant`. */
async function eachRoute(merchant: string, headers: Record<string, string>, fn: (res: Res, what: string) => void) {
  for (const r of ROUTES) {
    const path = r.path(merchant);
    fn(await send(path, headers), `${r.name}: GET ${path}`);
  }
}

/** A fresh API key of `merchant`. */
async function newKey(merchant: string) {
  const created = await createApiKey(s.db.sql, { merchant, label: "auth matrix" });
  secrets.push(created.key);
  return created;
}

/** Signs `account` in through the real GET /v0/siwe/nonce + POST /v0/siwe/verify. */
async function newSession(account: (typeof accounts)[keyof typeof accounts]) {
  const token = await signIn(s.app, account);
  secrets.push(token);
  return token;
}

beforeAll(async () => {
  s = await startSeededApp();
  for (const m of [M1, M2] as const) {
    OWN[m].subscriptionId = s.fixture.subscriptions.find(
      (x) => x.chain_id === CHAIN_A && x.merchant === m && OWN[m].modules.includes(x.module),
    )!.subscription_id;
  }
});
afterAll(async () => {
  await s?.close();
});

describe("no usable credential: 401 with WWW-Authenticate: Bearer on every protected route", () => {
  test("no credential at all", async () => {
    await eachRoute(M1, {}, (res, what) => {
      expectUnauthenticated(res, what);
      expect(res.body.error.message, what).toContain("missing credential");
    });
  });

  test("an empty Authorization header counts as none", async () => {
    await eachRoute(M1, { authorization: "" }, expectUnauthenticated);
  });

  test.each([
    ["Basic scheme", "Basic dXNlcjpwYXNz"],
    ["scheme without token", "Bearer"],
    ["scheme and blank", "Bearer    "],
    ["two tokens", "Bearer abc def"],
    ["token without scheme", "sk_live_3yQ8n4Zp"],
    ["another scheme's name", "Token sk_live_3yQ8n4Zp"],
  ])("malformed Authorization header (%s)", async (_, header) => {
    await eachRoute(M1, { authorization: header }, (res, what) => {
      expectUnauthenticated(res, what);
      expect(res.body.error.message, what).toContain("malformed");
    });
  });

  test("a real key in a malformed header is still refused", async () => {
    const { key } = await newKey(M1);
    await eachRoute(M1, { authorization: `Bearer ${key} ${key}` }, expectUnauthenticated);
    await eachRoute(M1, { authorization: `Basic ${key}` }, expectUnauthenticated);
  });

  test("unknown keys: a near miss of a real one, a well-formed random one, a foreign format", async () => {
    const { key } = await newKey(M1);
    const nearMiss = key.slice(0, -1) + (key.endsWith("z") ? "y" : "z");
    for (const token of [
      nearMiss,
      "sk_live_4Ga8kz1XH4pGqTnUqgMzWbq2MySrJ4dEeu5NnQ5Zfa1x",
      "not-a-key",
      `sess_${"1".repeat(43)}`,
    ]) {
      await eachRoute(M1, bearer(token), (res, what) => {
        expectUnauthenticated(res, what);
        expect(res.body.error.message, what).toBe("invalid, revoked or expired credential");
      });
    }
  });

  test("a revoked key: 200 before, the same 401 as an unknown key after", async () => {
    const { id, key } = await newKey(M1);
    await eachRoute(M1, bearer(key), (res, what) => expect(res.status, what).toBe(200));
    expect(await revokeApiKey(s.db.sql, id)).toBe(true);
    await eachRoute(M1, bearer(key), (res, what) => {
      expectUnauthenticated(res, what);
      expect(res.body.error.message, what).toBe("invalid, revoked or expired credential");
    });
  });
});

describe("API keys", () => {
  test("own key: 200 with that merchant's data, whatever the letter case of the address", async () => {
    for (const m of [M1, M2]) {
      const { key } = await newKey(m);
      for (const r of ROUTES) {
        const res = await send(r.path(m), bearer(key));
        expectOwnData(res, m, r.list, `${r.name} ${m}`);
      }
    }
    const { key } = await newKey(M1);
    await eachRoute(accounts.merchant.address, bearer(key), (res, what) => expect(res.status, what).toBe(200));
    await eachRoute(M1.toUpperCase().replace("0X", "0x"), bearer(key), (res, what) =>
      expect(res.status, what).toBe(200),
    );
    // The scheme is case-insensitive and may be followed by several spaces.
    await eachRoute(M1, { authorization: `bearer   ${key}` }, (res, what) => expect(res.status, what).toBe(200));
  });

  test("another merchant's key: 403 on every route, both ways", async () => {
    const k1 = (await newKey(M1)).key;
    const k2 = (await newKey(M2)).key;
    await eachRoute(M2, bearer(k1), expectForbidden);
    await eachRoute(M1, bearer(k2), expectForbidden);
    // A merchant without modules is still another merchant.
    for (const r of ROUTES.filter((x) => x.list)) expectForbidden(await send(r.path(M_NONE), bearer(k1)), r.name);
  });

  test("admin key: 200 for any merchant", async () => {
    for (const m of [M1, M2]) {
      for (const r of ROUTES) expectOwnData(await send(r.path(m), bearer(ADMIN_KEY)), m, r.list, `${r.name} ${m}`);
    }
    // A merchant with no modules: empty lists, and the unknown subscription is a 404 (authorized, just absent).
    for (const r of ROUTES) {
      const res = await send(r.path(M_NONE), bearer(ADMIN_KEY));
      if (r.list) {
        expect(res.status, r.name).toBe(200);
        expect(res.body, r.name).toEqual([]);
      } else {
        expect(res.status, r.name).toBe(404);
        expect(res.body.error.code).toBe("not_found");
      }
    }
  });

  test("a near miss of the admin key is a plain 401", async () => {
    for (const token of [`${ADMIN_KEY}x`, ADMIN_KEY.slice(0, -1), ADMIN_KEY.toUpperCase()]) {
      await eachRoute(M2, bearer(token), expectUnauthenticated);
    }
  });
});

describe("SIWE sessions (signed in through /v0/siwe/nonce and /v0/siwe/verify)", () => {
  test("a session token as Bearer: 200 for its own address, 403 for another", async () => {
    const t1 = await newSession(accounts.merchant);
    const t2 = await newSession(accounts.merchant2);
    expect(t1).toStartWith("sess_");
    for (const r of ROUTES) {
      expectOwnData(await send(r.path(M1), bearer(t1)), M1, r.list, `${r.name} M1 session`);
      expectOwnData(await send(r.path(M2), bearer(t2)), M2, r.list, `${r.name} M2 session`);
    }
    await eachRoute(M2, bearer(t1), expectForbidden);
    await eachRoute(M1, bearer(t2), expectForbidden);
  });

  test("the session cookie works like the Bearer token", async () => {
    const token = await newSession(accounts.merchant);
    for (const r of ROUTES) {
      expectOwnData(await send(r.path(M1), { cookie: `theme=dark; siwe_session=${token}` }), M1, r.list, r.name);
    }
    await eachRoute(M2, { cookie: `siwe_session=${token}` }, expectForbidden);
  });

  test("a session of a wallet that is not a merchant reads nothing", async () => {
    const token = await newSession(accounts.alice);
    await eachRoute(M1, bearer(token), expectForbidden);
    // Its own address has no modules: empty lists.
    for (const r of ROUTES.filter((x) => x.list)) {
      const res = await send(r.path(W.alice), bearer(token));
      expect(res.status, r.name).toBe(200);
      expect(res.body, r.name).toEqual([]);
    }
  });

  test("an expired session: 401 like an unknown one", async () => {
    // A session that lived, then expired.
    const token = await newSession(accounts.merchant);
    await eachRoute(M1, bearer(token), (res, what) => expect(res.status, what).toBe(200));
    const moved = await s.db.sql`
      update sessions set expires_at = now() - interval '1 second' where token_hash = ${hashSecret(token)} returning id`;
    expect(moved.length).toBe(1);
    await eachRoute(M1, bearer(token), (res, what) => {
      expectUnauthenticated(res, what);
      expect(res.body.error.message, what).toBe("invalid, revoked or expired credential");
    });
    await eachRoute(M1, { cookie: `siwe_session=${token}` }, expectUnauthenticated);
    // A session created already past its end (a message whose Expiration Time has passed).
    const { token: born } = await s.db.sql.begin((tx) =>
      createSession(tx, { address: M1, chainId: CHAIN_A, ttlSeconds: 3600, notAfter: new Date(Date.now() - 1000) }),
    );
    secrets.push(born);
    await eachRoute(M1, bearer(born), expectUnauthenticated);
  });

  test("a logged-out session: 401 on every route, Bearer and cookie", async () => {
    const token = await newSession(accounts.merchant2);
    await eachRoute(M2, bearer(token), (res, what) => expect(res.status, what).toBe(200));
    const out = await postJson(s.app, "/v0/siwe/logout", {}, bearer(token));
    expect(out.status).toBe(200);
    expect(await out.json()).toEqual({ ok: true });
    await eachRoute(M2, bearer(token), (res, what) => {
      expectUnauthenticated(res, what);
      expect(res.body.error.message, what).toBe("invalid, revoked or expired credential");
    });
    await eachRoute(M2, { cookie: `siwe_session=${token}` }, expectUnauthenticated);
    // The session is gone for the SIWE routes too.
    expectUnauthenticated(await send("/v0/siwe/me", bearer(token)), "me after logout");
  });

  test("a session created directly works like a signed-in one", async () => {
    const { token } = await s.db.sql.begin((tx) =>
      createSession(tx, { address: accounts.merchant2.address, chainId: CHAIN_A, ttlSeconds: 600 }),
    );
    secrets.push(token);
    for (const r of ROUTES) expectOwnData(await send(r.path(M2), bearer(token)), M2, r.list, r.name);
    await eachRoute(M1, bearer(token), expectForbidden);
  });
});

describe("/v0/auth/check is public; a credential sent with it is checked", () => {
  const check = `/v0/auth/check?module_address=${MOD.a1}&wallet=${W.alice}&plan_ids=1`;

  test("answers 200 without a credential and with any valid one, the same answer; 401 for an invalid one", async () => {
    const { id, key: revoked } = await newKey(M1);
    await revokeApiKey(s.db.sql, id);
    const own = (await newKey(M1)).key;
    const foreign = (await newKey(M2)).key;
    const answered: Record<string, string>[] = [
      {},
      { cookie: "siwe_session=sess_unknown" },
      bearer(own),
      bearer(foreign),
      bearer(ADMIN_KEY),
    ];
    let first: unknown;
    for (const headers of answered) {
      const res = await send(check, headers);
      const what = JSON.stringify(headers);
      expect(res.status, what).toBe(200);
      expect(res.headers.get("www-authenticate"), what).toBeNull();
      expect(res.body.mode, what).toBe("indexed");
      expect(res.body.wallet, what).toBe(W.alice);
      // The credential changes nothing in the answer, only whose rate limit it spends.
      first ??= res.body;
      expect(res.body, what).toEqual(first);
    }
    const refused: Record<string, string>[] = [
      bearer("not-a-key"),
      bearer("sk_live_4Ga8kz1XH4pGqTnUqgMzWbq2MySrJ4dEeu5NnQ5Zfa1x"),
      { authorization: "Basic dXNlcjpwYXNz" },
      { authorization: "Bearer a b" },
      bearer(revoked),
    ];
    for (const headers of refused) expectUnauthenticated(await send(check, headers), JSON.stringify(headers));
  });
});

test("no error response carries a secret: not in the body, not in a header", () => {
  expect(errors.length).toBeGreaterThan(100);
  expect(secrets.length).toBeGreaterThan(10);
  for (const e of errors) {
    for (const secret of secrets) {
      expect(e.body.includes(secret), `${e.what}: body`).toBe(false);
      expect(e.headers.includes(secret), `${e.what}: headers`).toBe(false);
      // Not even the secret part without its prefix.
      const bare = secret.replace(/^(sk_live_|sess_)/, "");
      expect(e.body.includes(bare), `${e.what}: body (bare)`).toBe(false);
    }
    // Nor the credential that was sent, whatever it was.
    const token = e.sent?.replace(/^\s*\S+\s+/, "").split(/\s+/)[0];
    if (token && token.length >= 12) expect(e.body.includes(token), `${e.what}: echoes ${token}`).toBe(false);
  }
});

describe("the admin key reads every merchant and writes nothing", () => {
  /** A body each write route accepts, so that only the credential can refuse it. */
  const BODIES: Record<string, unknown> = {
    "POST /v0/webhook_endpoints/:merchant": { url: "https://example.com/hook" },
    "PATCH /v0/webhook_endpoints/:merchant/:id": { description: "admin was here" },
    "POST /v0/webhook_endpoints/:merchant/:id/replay": { since: "2000-01-01T00:00:00Z" },
    "POST /v0/api_keys/:merchant": { label: "admin" },
  };
  /** What every write could change. */
  const snapshot = async () =>
    (
      await s.db.sql<{ t: string }[]>`
        select (select coalesce(string_agg(md5(w::text), ',' order by id), '') from webhook_endpoints w) ||
          (select count(*) from webhook_deliveries)::text || '|' ||
          (select coalesce(string_agg(md5(k::text), ',' order by id), '') from api_keys k) ||
          (select coalesce(string_agg(md5(x::text), ',' order by id), '') from sessions x) ||
          (select count(*) from merchant_events)::text as t`
    )[0]!.t;

  test("every POST, PATCH and DELETE under /v0 is a 403 admin_read_only that changes nothing", async () => {
    const key = await newKey(M1);
    const endpointId = (
      await createEndpoint(
        s.db.sql,
        { merchant: M1, url: "https://example.com/hook", eventTypes: ["*"], description: null },
        undefined,
      )
    ).id;
    const [event] = await s.db.sql<{ id: string }[]>`select id from event_log where merchant = ${M1} limit 1`;
    const session = await newSession(accounts.merchant);
    const writes = s.app.routes.filter(
      (r) => ["POST", "PATCH", "DELETE", "PUT"].includes(r.method) && r.path.startsWith("/v0/"),
    );
    const walked: string[] = [];
    const before = await snapshot();
    for (const r of writes) {
      const name = `${r.method} ${r.path}`;
      // The one public write: it takes a signature, never a credential.
      if (r.path === "/v0/siwe/verify") continue;
      const id = r.path.startsWith("/v0/events/")
        ? (event?.id ?? "evt_00")
        : r.path.startsWith("/v0/api_keys/")
          ? key.id
          : endpointId;
      const path = r.path.replace(":merchant", M1).replace(":id", id);
      const body = BODIES[name];
      const headers = { ...bearer(ADMIN_KEY), ...(body ? { "content-type": "application/json" } : {}) };
      const res = await s.app.handle(
        new Request(`http://localhost${path}`, {
          method: r.method,
          headers,
          body: body ? JSON.stringify(body) : undefined,
        }),
      );
      const json = (await res.json()) as { error?: { code?: string; type?: string; message?: string } };
      expect(res.status, name).toBe(403);
      expect(json.error, name).toMatchObject({ type: "permission_error", code: "admin_read_only" });
      expect(json.error?.message, name).toContain("changes nothing");
      walked.push(name);
    }
    expect(await snapshot()).toBe(before);
    // Every write route of the API was walked (a new one is walked too, as it appears in app.routes).
    for (const must of [
      "POST /v0/webhook_endpoints/:merchant",
      "PATCH /v0/webhook_endpoints/:merchant/:id",
      "DELETE /v0/webhook_endpoints/:merchant/:id",
      "POST /v0/webhook_endpoints/:merchant/:id/rotate_secret",
      "POST /v0/webhook_endpoints/:merchant/:id/test",
      "POST /v0/webhook_endpoints/:merchant/:id/replay",
      "POST /v0/events/:merchant/:id/redeliver",
      "POST /v0/api_keys/:merchant",
      "DELETE /v0/api_keys/:merchant/:id",
      "POST /v0/siwe/logout",
    ]) {
      expect(walked).toContain(must);
    }
    // The merchant's own credentials still write; the admin key still reads.
    expect((await send(`/v0/webhook_endpoints/${M1}/${endpointId}`, bearer(ADMIN_KEY))).status).toBe(200);
    expect((await send("/v0/siwe/me", bearer(session))).status).toBe(200);
  });
});
