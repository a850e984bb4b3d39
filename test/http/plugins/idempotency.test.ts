/**
 * `Idempotency-Key` on merchant POSTs, through real SIWE sessions and the real app: a retried key creation returns
 * the first answer (the same secret) and never mints a second key; the same key with another body or while the first
 * request is in flight is a 409; keys are per merchant, expire after 24 hours and are pruned; answers are stored
 * encrypted, never the secret in clear.
 */
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { accounts } from "../../../testkit/accounts";
import { CHAIN_A, M1, M2 } from "../../../testkit/seed";
import { startSeededApp, type SeededApp } from "../../../testkit/app";
import { signIn } from "../../../testkit/siwe";
import { keyHash, pruneIdempotencyKeys } from "../../../src/http/plugins/idempotency-store";
import { idempotency, requestFingerprint } from "../../../src/http/plugins/idempotency";
import { Elysia } from "elysia";
import { createErrorHandler } from "../../../src/http/plugins/error-handler";
import { createAppLimiter, createCredentialLimiter } from "../../../src/http/deps";
import { UnavailableError } from "../../../src/http/errors";
import { createApiKey } from "../../../src/auth/api-keys";

let s: SeededApp;
let session: string;
let otherSession: string;

type Res = { status: number; body: any; headers: Headers };

async function post(path: string, token: string, body: unknown, key?: string): Promise<Res> {
  const headers: Record<string, string> = { authorization: `Bearer ${token}`, "content-type": "application/json" };
  if (key !== undefined) headers["idempotency-key"] = key;
  const res = await s.app.handle(
    new Request(`http://localhost${path}`, { method: "POST", headers, body: JSON.stringify(body) }),
  );
  const text = await res.text();
  return { status: res.status, body: text ? JSON.parse(text) : null, headers: res.headers };
}

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

describe("a retried POST with an Idempotency-Key", () => {
  test("a retried key creation returns the first answer, marked replayed, and never mints a second key", async () => {
    const before = await keysOf(M1);
    const first = await post(`/v0/api_keys/${M1}`, session, { label: "retried" }, "create-key-1");
    expect(first.status).toBe(201);
    expect(first.headers.get("idempotent-replayed")).toBeNull();
    const again = await post(`/v0/api_keys/${M1}`, session, { label: "retried" }, "create-key-1");
    expect(again.status).toBe(201);
    expect(again.headers.get("idempotent-replayed")).toBe("true");
    expect(again.headers.get("x-request-id")).toMatch(/^req_[0-9a-f]{32}$/);
    expect(again.headers.get("x-request-id")).not.toBe(first.headers.get("x-request-id"));
    expect(again.body).toEqual(first.body);
    expect(await keysOf(M1)).toBe(before + 1);
    // The same body with its fields in another order is the same request.
    const reordered = await s.app.handle(
      new Request(`http://localhost/v0/api_keys/${M1}`, {
        method: "POST",
        headers: { authorization: `Bearer ${session}`, "idempotency-key": "create-key-1" },
        body: ' { "label" : "retried" } ',
      }),
    );
    expect(reordered.status).toBe(201);
    expect(reordered.headers.get("idempotent-replayed")).toBe("true");
    expect(await keysOf(M1)).toBe(before + 1);
  });

  test("without a key, two POSTs are two keys", async () => {
    const before = await keysOf(M1);
    expect((await post(`/v0/api_keys/${M1}`, session, { label: "no key" })).status).toBe(201);
    expect((await post(`/v0/api_keys/${M1}`, session, { label: "no key" })).status).toBe(201);
    expect(await keysOf(M1)).toBe(before + 2);
  });

  test("the same key with another body is a 409 idempotency_key_reused and changes nothing", async () => {
    expect((await post(`/v0/api_keys/${M1}`, session, { label: "a" }, "reused-1")).status).toBe(201);
    const before = await keysOf(M1);
    const res = await post(`/v0/api_keys/${M1}`, session, { label: "b" }, "reused-1");
    expect(res.status).toBe(409);
    expect(res.body.error).toMatchObject({
      type: "invalid_request_error",
      code: "idempotency_key_reused",
      param: "Idempotency-Key",
    });
    expect(res.body.error.request_id).toMatch(/^req_/);
    expect(await keysOf(M1)).toBe(before);
  });

  test("a request while the first with the key is in flight is a 409 idempotency_key_in_use; an abandoned one is taken over", async () => {
    const body = { label: "in flight" };
    const path = `/v0/api_keys/${M1}`;
    const fingerprint = requestFingerprint(
      new Request(`http://localhost${path}`, { method: "POST" }),
      { kind: "session", merchant: M1, sessionId: "-", chainId: CHAIN_A, expiresAt: "" },
      body,
    );
    // The claim a request of another process holds while its handler runs.
    await s.db.sql`insert into idempotency_keys (merchant, key_hash, fingerprint)
                   values (${M1}, ${keyHash(M1, "flight-1")}, ${fingerprint})`;
    const before = await keysOf(M1);
    const res = await post(path, session, body, "flight-1");
    expect(res.status).toBe(409);
    expect(res.body.error.code).toBe("idempotency_key_in_use");
    expect(res.headers.get("retry-after")).toBe("1");
    expect(await keysOf(M1)).toBe(before);
    // Its process died: a minute later the claim is abandoned and the retry runs.
    await s.db.sql`update idempotency_keys set locked_at = now() - interval '2 minutes'
                   where key_hash = ${keyHash(M1, "flight-1")}`;
    const retried = await post(path, session, body, "flight-1");
    expect(retried.status).toBe(201);
    expect(await keysOf(M1)).toBe(before + 1);
  });

  test("concurrent requests with one key mint one key", async () => {
    const before = await keysOf(M1);
    const all = await Promise.all(
      Array.from({ length: 4 }, () => post(`/v0/api_keys/${M1}`, session, { label: "race" }, "race-1")),
    );
    for (const r of all) {
      expect([201, 409]).toContain(r.status);
      if (r.status === 409) expect(r.body.error.code).toBe("idempotency_key_in_use");
    }
    const created = all.filter((r) => r.status === 201);
    expect(created.length).toBeGreaterThanOrEqual(1);
    expect(new Set(created.map((r) => r.body.key)).size).toBe(1);
    expect(await keysOf(M1)).toBe(before + 1);
  });

  test("keys are per merchant: another merchant's request with the same key runs on its own", async () => {
    const mine = await post(`/v0/api_keys/${M1}`, session, { label: "shared" }, "shared-1");
    const theirs = await post(`/v0/api_keys/${M2}`, otherSession, { label: "shared" }, "shared-1");
    expect(mine.status).toBe(201);
    expect(theirs.status).toBe(201);
    expect(theirs.headers.get("idempotent-replayed")).toBeNull();
    expect(theirs.body.merchant).toBe(M2);
    expect(theirs.body.key).not.toBe(mine.body.key);
  });

  test("a 4xx of the handler is kept and replayed; a refused credential claims nothing", async () => {
    const bad = await post(`/v0/api_keys/${M1}`, session, { label: 5 }, "bad-label-1");
    expect(bad.status).toBe(400);
    const again = await post(`/v0/api_keys/${M1}`, session, { label: 5 }, "bad-label-1");
    expect(again.status).toBe(400);
    expect(again.headers.get("idempotent-replayed")).toBe("true");
    expect(again.body.error.param).toBe("label");

    const refused = await post(`/v0/api_keys/${M1}`, "sess_unknown", { label: "x" }, "refused-1");
    expect(refused.status).toBe(401);
    expect((await s.db.sql`select 1 from idempotency_keys where key_hash = ${keyHash(M1, "refused-1")}`).length).toBe(
      0,
    );
  });

  test("a malformed Idempotency-Key is a 400 and changes nothing", async () => {
    const before = await keysOf(M1);
    for (const key of ["", "with space", "x".repeat(256)]) {
      const res = await post(`/v0/api_keys/${M1}`, session, { label: "x" }, key);
      expect(res.status).toBe(400);
      expect(res.body.error).toMatchObject({ code: "invalid_parameter", param: "Idempotency-Key" });
    }
    expect(await keysOf(M1)).toBe(before);
  });

  test("answers are stored encrypted: the minted secret is not in the table", async () => {
    const res = await post(`/v0/api_keys/${M1}`, session, { label: "sealed" }, "sealed-1");
    expect(res.status).toBe(201);
    const rows = await s.db.sql<{ merchant: string; key_hash: string; response: string; status: number }[]>`
      select merchant, key_hash, response, status from idempotency_keys where key_hash = ${keyHash(M1, "sealed-1")}`;
    expect(rows.length).toBe(1);
    expect(rows[0]!.status).toBe(201);
    const text = JSON.stringify(rows[0]) + Buffer.from(rows[0]!.response, "base64").toString("latin1");
    expect(text).not.toContain(res.body.key);
    expect(text).not.toContain("sealed-1");
  });

  test("after 24 hours a key runs again, and expired answers are pruned", async () => {
    const first = await post(`/v0/api_keys/${M1}`, session, { label: "old" }, "old-1");
    await s.db.sql`update idempotency_keys set created_at = now() - interval '25 hours'
                   where key_hash = ${keyHash(M1, "old-1")}`;
    const second = await post(`/v0/api_keys/${M1}`, session, { label: "old" }, "old-1");
    expect(second.status).toBe(201);
    expect(second.headers.get("idempotent-replayed")).toBeNull();
    expect(second.body.key).not.toBe(first.body.key);

    await s.db.sql`update idempotency_keys set created_at = now() - interval '25 hours'
                   where key_hash = ${keyHash(M1, "old-1")}`;
    expect(await pruneIdempotencyKeys(s.db.sql)).toBeGreaterThanOrEqual(1);
    expect((await s.db.sql`select 1 from idempotency_keys where key_hash = ${keyHash(M1, "old-1")}`).length).toBe(0);
  });
});

describe("answers a retry may change", () => {
  test("a 503 or 429 is not kept: the key is released and the retry runs; the 200 after it is kept", async () => {
    const { key } = await createApiKey(s.db.sql, { merchant: M1 });
    let runs = 0;
    let fail: 503 | 429 | null = 503;
    const app = new Elysia()
      .use(createErrorHandler(() => {}))
      .use(
        idempotency({
          sql: s.db.sql,
          config: s.config,
          limiter: createAppLimiter(s.config),
          credentialLimiter: createCredentialLimiter(s.config),
        }),
      )
      .post("/v0/things/:merchant", () => {
        runs++;
        if (fail === 503) throw new UnavailableError();
        if (fail === 429) return new Response("{}", { status: 429 });
        return { run: runs };
      });
    const send = () =>
      app.handle(
        new Request(`http://localhost/v0/things/${M1}`, {
          method: "POST",
          headers: { authorization: `Bearer ${key}`, "idempotency-key": "flaky-1", "content-type": "application/json" },
          body: "{}",
        }),
      );
    expect((await send()).status).toBe(503);
    fail = 429;
    expect((await send()).status).toBe(429);
    fail = null;
    const ok = await send();
    expect(ok.status).toBe(200);
    expect(await ok.json()).toEqual({ run: 3 });
    const replay = await send();
    expect(replay.headers.get("idempotent-replayed")).toBe("true");
    expect(await replay.json()).toEqual({ run: 3 });
    expect(runs).toBe(3);
  });
});
