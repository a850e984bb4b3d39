/**
 * Self-serve API keys through real SIWE sessions: a merchant signed in with its wallet creates (shown once), lists
 * and revokes its own keys; API keys, the admin key, other merchants' sessions and the cookie alone (for writes)
 * are refused, and nothing changes when a request is refused.
 */
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { hashSecret } from "../../../src/auth/hash";
import { createApiKey } from "../../../src/auth/api-keys";
import { createSession, SESSION_COOKIE } from "../../../src/auth/sessions";
import { accounts } from "../../../testkit/accounts";
import { CHAIN_A, CHAIN_B, M1, M2 } from "../../../testkit/seed";
import { ADMIN_KEY, startSeededApp, type SeededApp } from "../../../testkit/app";
import { signIn } from "../../../testkit/siwe";

let s: SeededApp;
let session: string;
let otherSession: string;

type Res = { status: number; body: any; headers: Headers };

async function call(method: string, path: string, headers: Record<string, string>, body?: unknown): Promise<Res> {
  const res = await s.app.handle(
    new Request(`http://localhost${path}`, {
      method,
      headers: body === undefined ? headers : { "content-type": "application/json", ...headers },
      body: body === undefined ? undefined : typeof body === "string" ? body : JSON.stringify(body),
    }),
  );
  const text = await res.text();
  return { status: res.status, body: text ? JSON.parse(text) : null, headers: res.headers };
}

const bearer = (t: string) => ({ authorization: `Bearer ${t}` });
const keysOf = async (merchant: string) =>
  (await s.db.sql<{ n: number }[]>`select count(*)::int as n from api_keys where merchant = ${merchant}`)[0]!.n;

beforeAll(async () => {
  s = await startSeededApp();
  session = await signIn(s.app, accounts.merchant);
  otherSession = await signIn(s.app, accounts.merchant2);
}, 60_000);

afterAll(async () => {
  await s?.close();
});

describe("a wallet session manages its merchant's keys", () => {
  test("create: 201 with the secret once, hashed like the CLI's, and the key reads the merchant's data", async () => {
    const res = await call("POST", `/v0/api_keys/${M1}`, bearer(session), { label: "  production server " });
    expect(res.status).toBe(201);
    expect(res.headers.get("cache-control")).toBe("no-store");
    expect(Object.keys(res.body).sort()).toEqual(["chain_id", "created_at", "id", "key", "label", "merchant"]);
    expect(res.body).toMatchObject({ merchant: M1, label: "production server", chain_id: CHAIN_A });
    expect(res.body.key).toMatch(/^sk_live_[1-9A-HJ-NP-Za-km-z]{40,}$/);
    expect(res.body.id).toMatch(/^key_[0-9a-f]{20}$/);
    expect(Math.abs(Date.parse(res.body.created_at) - Date.now())).toBeLessThan(60_000);
    const [row] = await s.db.sql`select key_hash, prefix from api_keys where id = ${res.body.id}`;
    expect(row!.key_hash).toBe(hashSecret(res.body.key));
    expect(row!.prefix).toBe(res.body.key.slice(0, 12));
    expect((await s.get(`/v0/subscriptions/${M1}?limit=1`, bearer(res.body.key))).status).toBe(200);
    expect((await s.get(`/v0/subscriptions/${M2}?limit=1`, bearer(res.body.key))).status).toBe(403);
  });

  test("a key made with a session reads only the session's chain, as the session does; a CLI key reads every chain", async () => {
    // The seeded app serves one chain for sign-in; a session of chain B is as /v0/siwe/verify would store it.
    const { token: onB } = await s.db.sql.begin((tx) =>
      createSession(tx, { address: M1, chainId: CHAIN_B, ttlSeconds: 600 }),
    );
    const made = await call("POST", `/v0/api_keys/${M1}`, bearer(onB), { label: "chain B" });
    expect(made.body.chain_id).toBe(CHAIN_B);
    for (const cred of [onB, made.body.key]) {
      expect((await s.get(`/v0/subscriptions/${M1}?chain_id=${CHAIN_B}`, bearer(cred))).status).toBe(200);
      const other = await s.get(`/v0/subscriptions/${M1}?chain_id=${CHAIN_A}`, bearer(cred));
      expect(other.status).toBe(403);
      expect(other.body.error.message).toContain(`chain ${CHAIN_B}`);
    }
    const cli = await createApiKey(s.db.sql, { merchant: M1 });
    expect(cli.chain_id).toBeNull();
    expect((await s.get(`/v0/subscriptions/${M1}?chain_id=${CHAIN_A}`, bearer(cli.key))).status).toBe(200);
    expect((await s.get(`/v0/subscriptions/${M1}?chain_id=${CHAIN_B}`, bearer(cli.key))).status).toBe(200);
    const listed = (await call("GET", `/v0/api_keys/${M1}`, bearer(onB))).body;
    expect(listed.find((k: { id: string }) => k.id === made.body.id).chain_id).toBe(CHAIN_B);
    // A chain-scoped session lists only its own chain's keys: the all-chain CLI key is not among them.
    expect(listed.find((k: { id: string }) => k.id === cli.id)).toBeUndefined();
  });

  test("create without a body or label: label null; bad labels are 400s that create nothing", async () => {
    const res = await call("POST", `/v0/api_keys/${M1}`, bearer(session));
    expect(res.status).toBe(201);
    expect(res.body.label).toBeNull();
    expect((await call("POST", `/v0/api_keys/${M1}`, bearer(session), {})).body.label).toBeNull();
    const before = await keysOf(M1);
    for (const body of [{ label: "x".repeat(201) }, { label: 42 }, { label: "a\u0000b" }, [1]]) {
      const bad = await call("POST", `/v0/api_keys/${M1}`, bearer(session), body);
      expect(bad.status, JSON.stringify(body)).toBe(400);
      expect(["label", "body"]).toContain(bad.body.error.param);
    }
    // An unknown field is named, as on the webhook routes (a misspelt `lable` would otherwise make an unnamed key).
    const misspelt = await call("POST", `/v0/api_keys/${M1}`, bearer(session), { lable: "production" });
    expect(misspelt.status).toBe(400);
    expect(misspelt.body.error).toMatchObject({ param: "lable", message: "unknown field lable; allowed: label" });
    expect((await call("POST", `/v0/api_keys/0x12`, bearer(session))).body.error.param).toBe("merchant");
    expect(await keysOf(M1)).toBe(before);
  });

  test("list: the merchant's keys only, oldest first, never the secret or its hash", async () => {
    const mine = await call("POST", `/v0/api_keys/${M1}`, bearer(session), { label: "listed" });
    const theirs = await createApiKey(s.db.sql, { merchant: M2 });
    const res = await call("GET", `/v0/api_keys/${M1}`, bearer(session));
    expect(res.status).toBe(200);
    const ids = res.body.map((k: { id: string }) => k.id);
    expect(ids).toContain(mine.body.id);
    expect(ids).not.toContain(theirs.id);
    for (const k of res.body) {
      expect(Object.keys(k).sort()).toEqual([
        "chain_id",
        "created_at",
        "id",
        "label",
        "last_used_at",
        "prefix",
        "revoked_at",
      ]);
    }
    expect(JSON.stringify(res.body)).not.toContain(mine.body.key);
    const times = res.body.map((k: { created_at: string }) => Date.parse(k.created_at));
    expect(times).toEqual([...times].sort((a, b) => a - b));
    // Reads may use the session cookie.
    const viaCookie = await call("GET", `/v0/api_keys/${M1}`, { cookie: `${SESSION_COOKIE}=${session}` });
    expect(viaCookie.status).toBe(200);
    expect(viaCookie.body.length).toBe(res.body.length);
  });

  test("revoke: 200, the key stops working at once, again is the same; another merchant's key is a 404", async () => {
    const { body: created } = await call("POST", `/v0/api_keys/${M1}`, bearer(session), { label: "to revoke" });
    const res = await call("DELETE", `/v0/api_keys/${M1}/${created.id}`, bearer(session));
    expect(res.status).toBe(200);
    expect(res.body).toEqual({ id: created.id, revoked: true });
    expect((await s.get(`/v0/subscriptions/${M1}`, bearer(created.key))).status).toBe(401);
    const listed = (await call("GET", `/v0/api_keys/${M1}`, bearer(session))).body.find(
      (k: { id: string }) => k.id === created.id,
    );
    expect(listed.revoked_at).not.toBeNull();
    expect((await call("DELETE", `/v0/api_keys/${M1}/${created.id}`, bearer(session))).status).toBe(200);

    const theirs = await createApiKey(s.db.sql, { merchant: M2 });
    const cross = await call("DELETE", `/v0/api_keys/${M1}/${theirs.id}`, bearer(session));
    expect(cross.status).toBe(404);
    expect(cross.body.error.code).toBe("not_found");
    expect((await s.get(`/v0/subscriptions/${M2}?limit=1`, bearer(theirs.key))).status).toBe(200);
    expect((await call("DELETE", `/v0/api_keys/${M1}/key_00000000000000000000`, bearer(session))).status).toBe(404);
    const malformed = await call("DELETE", `/v0/api_keys/${M1}/not-a-key`, bearer(session));
    expect(malformed.status).toBe(400);
    expect(malformed.body.error.param).toBe("id");
  });
});

describe("only a SIWE session of that merchant, sent as a Bearer token for writes", () => {
  test("an API key or the admin key is a 403 that says so, on every route", async () => {
    const key = await createApiKey(s.db.sql, { merchant: M1 });
    const victim = await createApiKey(s.db.sql, { merchant: M1 });
    const before = await keysOf(M1);
    for (const cred of [key.key, ADMIN_KEY]) {
      for (const [method, path] of [
        ["POST", `/v0/api_keys/${M1}`],
        ["GET", `/v0/api_keys/${M1}`],
        ["DELETE", `/v0/api_keys/${M1}/${victim.id}`],
      ] as const) {
        const res = await call(method, path, bearer(cred));
        expect(res.status, `${method} ${path}`).toBe(403);
        // The admin key is read only: its writes say so with their own code.
        const adminWrite = cred === ADMIN_KEY && method !== "GET";
        expect(res.body.error.code).toBe(adminWrite ? "admin_read_only" : "forbidden");
        expect(res.body.error.message).toContain(adminWrite ? "changes nothing" : "an API key cannot mint");
      }
    }
    expect(await keysOf(M1)).toBe(before);
    expect((await s.get(`/v0/subscriptions/${M1}?limit=1`, bearer(victim.key))).status).toBe(200);
  });

  test("another merchant's session is a 403; no credential or an unknown one is a 401", async () => {
    const victim = await createApiKey(s.db.sql, { merchant: M1 });
    expect((await call("POST", `/v0/api_keys/${M1}`, bearer(otherSession))).status).toBe(403);
    expect((await call("GET", `/v0/api_keys/${M1}`, bearer(otherSession))).status).toBe(403);
    expect((await call("DELETE", `/v0/api_keys/${M1}/${victim.id}`, bearer(otherSession))).status).toBe(403);
    expect((await call("GET", `/v0/api_keys/${M1}`, {})).status).toBe(401);
    expect((await call("POST", `/v0/api_keys/${M1}`, bearer("sess_unknown"))).status).toBe(401);
    expect((await s.get(`/v0/subscriptions/${M1}?limit=1`, bearer(victim.key))).status).toBe(200);
  });

  test("the session cookie alone cannot create or revoke a key (no cross-site minting)", async () => {
    const victim = await createApiKey(s.db.sql, { merchant: M1 });
    const before = await keysOf(M1);
    const cookie = { cookie: `${SESSION_COOKIE}=${session}` };
    const create = await call("POST", `/v0/api_keys/${M1}`, cookie, { label: "csrf" });
    expect(create.status).toBe(401);
    expect(create.body.error.message).toContain("Authorization: Bearer");
    expect((await call("DELETE", `/v0/api_keys/${M1}/${victim.id}`, cookie)).status).toBe(401);
    expect(await keysOf(M1)).toBe(before);
    expect((await s.get(`/v0/subscriptions/${M1}?limit=1`, bearer(victim.key))).status).toBe(200);
  });

  test("after logout the session manages nothing", async () => {
    const token = await signIn(s.app, accounts.merchant);
    expect((await call("GET", `/v0/api_keys/${M1}`, bearer(token))).status).toBe(200);
    expect((await call("POST", "/v0/siwe/logout", bearer(token))).status).toBe(200);
    expect((await call("POST", `/v0/api_keys/${M1}`, bearer(token))).status).toBe(401);
  });
});

describe("at most 100 active keys per merchant", () => {
  test("two creates at once at 99 give 100; the 101st is a 400 naming the limit that creates nothing; revoked keys do not count", async () => {
    const active = async () =>
      (
        await s.db.sql<{ n: number }[]>`
        select count(*)::int as n from api_keys where merchant = ${M2} and revoked_at is null`
      )[0]!.n;
    // Revoked keys are history, not capacity.
    for (let i = 0; i < 3; i++) {
      const { id } = await createApiKey(s.db.sql, { merchant: M2, chainId: CHAIN_A });
      expect((await call("DELETE", `/v0/api_keys/${M2}/${id}`, bearer(otherSession))).status).toBe(200);
    }
    while ((await active()) < 99) await createApiKey(s.db.sql, { merchant: M2, chainId: CHAIN_A });
    const both = await Promise.all([
      call("POST", `/v0/api_keys/${M2}`, bearer(otherSession), { label: "a" }),
      call("POST", `/v0/api_keys/${M2}`, bearer(otherSession), { label: "b" }),
    ]);
    expect(both.map((r) => r.status).sort()).toEqual([201, 400]);
    expect(await active()).toBe(100);
    const before = await s.db.sql`select id, revoked_at from api_keys where merchant = ${M2} order by id`;
    const refused = await call("POST", `/v0/api_keys/${M2}`, bearer(otherSession), { label: "c" });
    expect(refused.status).toBe(400);
    expect(refused.body.error).toMatchObject({
      type: "invalid_request_error",
      code: "api_key_limit_reached",
      message: expect.stringContaining("100"),
    });
    expect(await s.db.sql`select id, revoked_at from api_keys where merchant = ${M2} order by id`).toEqual(before);
    // Another merchant is not affected; revoking one makes room again.
    expect((await call("POST", `/v0/api_keys/${M1}`, bearer(session))).status).toBe(201);
    // An active key (ids are random: the first by id may be one of the revoked ones, which frees nothing).
    const activeKey = before.find((k) => k.revoked_at === null)!;
    expect((await call("DELETE", `/v0/api_keys/${M2}/${activeKey.id}`, bearer(otherSession))).status).toBe(200);
    expect((await call("POST", `/v0/api_keys/${M2}`, bearer(otherSession))).status).toBe(201);
    expect(await active()).toBe(100);
  });
});
