/**
 * The credential matrix through HTTP: errorHandler + SIWE routes + a tiny route that uses the `merchantReader`
 * macro like every merchant route does.
 */
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { Elysia } from "elysia";
import { errorHandler } from "../../src/http/plugins/error-handler";
import { siweRoutes } from "../../src/http/features/siwe";
import { INVALID_CREDENTIAL } from "../../src/auth/principal";
import { authPlugin } from "../../src/http/plugins/auth";
import { createAppLimiter, createAppMerchantLimiter, createCredentialLimiter } from "../../src/http/deps";
import { createApiKey, revokeApiKey } from "../../src/auth/api-keys";
import { loadConfig } from "../../src/common/config";
import type { ChainRegistry } from "../../src/chain/clients";
import type { Db } from "../../src/db/client";
import { createTestDb } from "../../testkit/db";
import { accounts } from "../../testkit/accounts";
import { get, postJson, signIn } from "../../testkit/siwe";

const ADMIN = "admin-secret-0123456789abcdef";
const merchant = accounts.merchant.address.toLowerCase();
const merchant2 = accounts.merchant2.address.toLowerCase();

let db: Db;
let app: { handle: (r: Request) => Promise<Response> };
const secrets: string[] = [ADMIN];
const logged: string[] = [];
const originals = { log: console.log, error: console.error, warn: console.warn, info: console.info };

/** The one protected route of this test app. */
const readMerchant = (path: string, headers: Record<string, string> = {}) =>
  get(app, `/v0/test/merchants/${path}`, headers);
const bearer = (token: string) => ({ authorization: `Bearer ${token}` });

async function expectUnauthenticated(res: Response, message?: string) {
  expect(res.status).toBe(401);
  expect(res.headers.get("www-authenticate")).toBe("Bearer");
  const body = (await res.json()) as { error: { code: string; type: string; message: string; request_id: string } };
  expect(body.error.code).toBe("unauthenticated");
  expect(body.error.type).toBe("authentication_error");
  expect(body.error.request_id).toMatch(/^req_/);
  if (message) expect(body.error.message).toContain(message);
  return body.error.message;
}

beforeAll(async () => {
  // Record everything logged while the matrix runs: no secret may show up there.
  for (const level of ["log", "error", "warn", "info"] as const) {
    console[level] = (...args: unknown[]) => {
      logged.push(args.map(String).join(" "));
      originals[level](...args);
    };
  }
  db = await createTestDb();
  const config = loadConfig({ ADMIN_API_KEY: ADMIN, CHAIN_ID: "31337", SIWE_DOMAIN: "localhost" });
  // CHAIN_ID without an RPC: plain-wallet signatures are checked locally, which is all this matrix needs.
  const chains: ChainRegistry = { defaultChainId: 31337, get: () => undefined, chainIds: () => [] };
  app = new Elysia()
    .use(errorHandler)
    .use(siweRoutes({ sql: db.sql, config, chains }))
    .use(
      authPlugin({
        sql: db.sql,
        config,
        defaultChainId: 31337,
        limiter: createAppLimiter(config),
        credentialLimiter: createCredentialLimiter(config),
        merchantLimiter: createAppMerchantLimiter({ sql: db.sql, config }),
      }),
    )
    .get("/v0/test/merchants/:merchant", ({ principal }) => ({ kind: principal.kind, merchant: principal.merchant }), {
      merchantReader: true,
    });
}, 60_000);

afterAll(async () => {
  Object.assign(console, originals);
  await db?.close();
});

describe("no or malformed credential", () => {
  test("no credential: 401 missing credential", async () => {
    await expectUnauthenticated(await readMerchant(merchant), "missing credential");
  });

  test.each(["Basic dXNlcjpwYXNz", "Bearer", "Bearer ", "Bearer a b", "sk_live_abc"])(
    "malformed Authorization %p: 401",
    async (header) => {
      await expectUnauthenticated(await readMerchant(merchant, { authorization: header }));
    },
  );

  test("a bad header is not rescued by a valid cookie", async () => {
    const token = await signIn(app, accounts.merchant);
    secrets.push(token);
    const res = await readMerchant(merchant, { authorization: "Basic x", cookie: `siwe_session=${token}` });
    await expectUnauthenticated(res, "malformed");
  });
});

describe("API keys", () => {
  test("own merchant: 200; any case of the address", async () => {
    const { key } = await createApiKey(db.sql, { merchant });
    secrets.push(key);
    const res = await readMerchant(merchant, bearer(key));
    expect(res.status).toBe(200);
    expect(await res.json()).toEqual({ kind: "api_key", merchant });
    expect((await readMerchant(accounts.merchant.address, bearer(key))).status).toBe(200);
    expect((await readMerchant(merchant, { authorization: `bearer   ${key}` })).status).toBe(200);
  });

  test("another merchant's data: 403 forbidden", async () => {
    const { key } = await createApiKey(db.sql, { merchant });
    secrets.push(key);
    const res = await readMerchant(merchant2, bearer(key));
    expect(res.status).toBe(403);
    const body = (await res.json()) as { error: { code: string; type: string } };
    expect(body.error).toMatchObject({ code: "forbidden", type: "permission_error" });
  });

  test("unknown, revoked and foreign-format keys: the same 401, revealing nothing", async () => {
    const { id, key } = await createApiKey(db.sql, { merchant });
    secrets.push(key);
    expect((await readMerchant(merchant, bearer(key))).status).toBe(200);
    expect(await revokeApiKey(db.sql, id)).toBe(true);
    const revoked = await expectUnauthenticated(await readMerchant(merchant, bearer(key)));
    const unknown = await expectUnauthenticated(await readMerchant(merchant, bearer(`${key.slice(0, -2)}zz`)));
    const foreign = await expectUnauthenticated(await readMerchant(merchant, bearer("not-a-known-format")));
    const huge = await expectUnauthenticated(await readMerchant(merchant, bearer(`sk_live_${"x".repeat(5000)}`)));
    expect(revoked).toBe(INVALID_CREDENTIAL);
    expect(new Set([revoked, unknown, foreign, huge]).size).toBe(1);
  });

  test("the key string is absent from its database row", async () => {
    const { id, key } = await createApiKey(db.sql, { merchant, label: "matrix" });
    const [row] = await db.sql`select * from api_keys where id = ${id}`;
    expect(row!.key_hash).not.toBe(key);
    expect(JSON.stringify(row)).not.toContain(key);
    expect(JSON.stringify(row)).not.toContain(key.slice(8));
  });
});

describe("admin key", () => {
  test("reads every merchant", async () => {
    for (const m of [merchant, merchant2, "0x000000000000000000000000000000000000dead"]) {
      const res = await readMerchant(m, bearer(ADMIN));
      expect(res.status).toBe(200);
      expect(await res.json()).toEqual({ kind: "admin", merchant: null });
    }
  });

  test("a near miss of the admin key is a plain 401", async () => {
    await expectUnauthenticated(await readMerchant(merchant, bearer(`${ADMIN}x`)), INVALID_CREDENTIAL);
    await expectUnauthenticated(await readMerchant(merchant, bearer(ADMIN.slice(0, -1))), INVALID_CREDENTIAL);
  });
});

describe("SIWE sessions", () => {
  test("Bearer token acts as the merchant at the signing address", async () => {
    const token = await signIn(app, accounts.merchant);
    secrets.push(token);
    expect(token).toStartWith("sess_");
    const res = await readMerchant(merchant, bearer(token));
    expect(res.status).toBe(200);
    expect(await res.json()).toEqual({ kind: "session", merchant });
    expect((await readMerchant(merchant2, bearer(token))).status).toBe(403);
  });

  test("the siwe_session cookie works too, among other cookies", async () => {
    const token = await signIn(app, accounts.merchant2);
    secrets.push(token);
    const res = await readMerchant(merchant2, { cookie: `theme=dark; siwe_session=${token}; other=1` });
    expect(res.status).toBe(200);
    expect(await res.json()).toEqual({ kind: "session", merchant: merchant2 });
    expect((await readMerchant(merchant, { cookie: `siwe_session=${token}` })).status).toBe(403);
  });

  test("expired session: 401 like an unknown one", async () => {
    const token = await signIn(app, accounts.merchant);
    secrets.push(token);
    expect((await readMerchant(merchant, bearer(token))).status).toBe(200);
    await db.sql`update sessions set expires_at = now() - interval '1 second' where address = ${merchant}`;
    await expectUnauthenticated(await readMerchant(merchant, bearer(token)), INVALID_CREDENTIAL);
    await expectUnauthenticated(await readMerchant(merchant, { cookie: `siwe_session=${token}` }), INVALID_CREDENTIAL);
  });

  test("logged-out session: 401 on Bearer and cookie", async () => {
    const token = await signIn(app, accounts.merchant);
    secrets.push(token);
    expect((await readMerchant(merchant, bearer(token))).status).toBe(200);
    const out = await postJson(app, "/v0/siwe/logout", {}, bearer(token));
    expect(out.status).toBe(200);
    expect(await out.json()).toEqual({ ok: true });
    await expectUnauthenticated(await readMerchant(merchant, bearer(token)), INVALID_CREDENTIAL);
    await expectUnauthenticated(await readMerchant(merchant, { cookie: `siwe_session=${token}` }), INVALID_CREDENTIAL);
  });

  test("the session token is absent from its database row", async () => {
    const token = await signIn(app, accounts.dave);
    const rows = await db.sql`select * from sessions where address = ${accounts.dave.address.toLowerCase()}`;
    expect(rows.length).toBe(1);
    expect(rows[0]!.token_hash).not.toBe(token);
    expect(JSON.stringify(rows)).not.toContain(token.slice(5));
  });
});

test("no secret appeared in any log line", () => {
  expect(secrets.length).toBeGreaterThan(5);
  const all = logged.join("\n");
  for (const s of secrets) expect(all).not.toContain(s);
});
