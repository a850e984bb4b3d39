import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { Webhook } from "standardwebhooks";
import { createApiKey } from "../../../src/auth/api-keys";
import { startSeededApp, type SeededApp } from "../../../testkit/app";
import { startReceiver, type Receiver } from "../../../testkit/webhooks";

const M1 = "0x70997970c51812dc3a010c7d01b50e0d17dc79c8";
const M2 = "0x3c44cdddb6a900fa2b585dd299e03d12fa4293bc";

/** Sends a JSON request through the app. */
async function call(
  s: SeededApp,
  method: string,
  path: string,
  key: string | null,
  body?: unknown,
  extra: Record<string, string> = {},
) {
  const headers: Record<string, string> = { ...extra };
  if (key) headers.authorization = `Bearer ${key}`;
  if (body !== undefined) headers["content-type"] = "application/json";
  const res = await s.app.handle(
    new Request(`http://localhost${path}`, {
      method,
      headers,
      body: body === undefined ? undefined : typeof body === "string" ? body : JSON.stringify(body),
    }),
  );
  const text = await res.text();
  return { status: res.status, headers: res.headers, body: text ? JSON.parse(text) : null };
}

describe("webhook endpoints API (private URLs allowed, as in development)", () => {
  let s: SeededApp;
  let key1: string;
  let key2: string;
  let receiver: Receiver;

  beforeAll(async () => {
    s = await startSeededApp({ WEBHOOK_ALLOW_PRIVATE_URLS: "1" });
    key1 = (await createApiKey(s.db.sql, { merchant: M1 })).key;
    key2 = (await createApiKey(s.db.sql, { merchant: M2 })).key;
    receiver = startReceiver();
  });
  afterAll(async () => {
    await receiver?.stop();
    await s?.close();
  });

  test("create (201, secret shown once), list, get, patch, rotate, delete", async () => {
    const created = await call(s, "POST", `/v0/webhook_endpoints/${M1}`, key1, {
      url: receiver.url,
      description: "prod",
    });
    expect(created.status).toBe(201);
    expect(created.body.id).toMatch(/^we_[0-9a-f]{24}$/);
    expect(created.body.secret).toMatch(/^whsec_[A-Za-z0-9+/=]{44}$/);
    expect(created.body).toMatchObject({
      url: receiver.url,
      event_types: ["*"],
      description: "prod",
      enabled: true,
      disabled_reason: null,
    });
    const id = created.body.id;
    const list = await call(s, "GET", `/v0/webhook_endpoints/${M1}`, key1);
    expect(list.body.map((e: any) => e.id)).toEqual([id]);
    expect(JSON.stringify(list.body)).not.toContain("whsec_");
    const one = await call(s, "GET", `/v0/webhook_endpoints/${M1}/${id}`, key1);
    expect(one.body.secret).toBeUndefined();
    const patched = await call(s, "PATCH", `/v0/webhook_endpoints/${M1}/${id}`, key1, {
      event_types: ["charge.failed", "subscription.status_changed"],
      enabled: false,
      description: null,
    });
    expect(patched.status).toBe(200);
    expect(patched.body).toMatchObject({
      event_types: ["charge.failed", "subscription.status_changed"],
      enabled: false,
      description: null,
    });
    const rotated = await call(s, "POST", `/v0/webhook_endpoints/${M1}/${id}/rotate_secret`, key1);
    expect(rotated.body.secret).toMatch(/^whsec_/);
    expect(rotated.body.secret).not.toBe(created.body.secret);
    const stored = await s.db.sql`select secret from webhook_endpoints where id = ${id}`;
    expect(stored[0]!.secret).toBe(rotated.body.secret); // no WEBHOOK_SECRET_KEY: stored as is
    const del = await call(s, "DELETE", `/v0/webhook_endpoints/${M1}/${id}`, key1);
    expect(del.body).toEqual({ id, deleted: true });
    expect((await call(s, "GET", `/v0/webhook_endpoints/${M1}/${id}`, key1)).status).toBe(404);
  });

  test("test delivers a signed webhook.test now and answers with the attempt; it verifies with standardwebhooks", async () => {
    const created = await call(s, "POST", `/v0/webhook_endpoints/${M1}`, key1, { url: receiver.url });
    const res = await call(s, "POST", `/v0/webhook_endpoints/${M1}/${created.body.id}/test`, key1);
    expect(res.status).toBe(200);
    expect(res.body).toMatchObject({
      event_type: "webhook.test",
      attempt: 1,
      status: "succeeded",
      response_status: 200,
      error: null,
    });
    const got = receiver.received.at(-1)!;
    const payload = new Webhook(created.body.secret).verify(got.body, got.headers) as any;
    expect(payload).toMatchObject({
      id: res.body.event_id,
      type: "webhook.test",
      merchant: M1,
      data: { object: { endpoint_id: created.body.id } },
    });
    expect(() =>
      new Webhook(created.body.secret).verify(got.body.replace("webhook.test", "webhook.tesT"), got.headers),
    ).toThrow();
    const log = await call(s, "GET", `/v0/webhook_endpoints/${M1}/${created.body.id}/deliveries`, key1);
    expect(log.body[0]).toMatchObject({ id: res.body.id, status: "succeeded", attempt: 1 });
    const event = await call(s, "GET", `/v0/events/${M1}/${res.body.event_id}`, key1);
    expect(event.body.type).toBe("webhook.test");
  });

  test("merchant isolation: another merchant's key gets 403, its own view 404", async () => {
    const created = await call(s, "POST", `/v0/webhook_endpoints/${M1}`, key1, { url: receiver.url });
    expect((await call(s, "GET", `/v0/webhook_endpoints/${M1}`, key2)).status).toBe(403);
    expect((await call(s, "POST", `/v0/webhook_endpoints/${M1}`, key2, { url: receiver.url })).status).toBe(403);
    expect((await call(s, "GET", `/v0/webhook_endpoints/${M2}/${created.body.id}`, key2)).status).toBe(404);
    expect((await call(s, "DELETE", `/v0/webhook_endpoints/${M2}/${created.body.id}`, key2)).status).toBe(404);
    expect((await call(s, "GET", `/v0/webhook_endpoints/${M1}`, null)).status).toBe(401);
  });

  test("writes take the Authorization header only, never the session cookie alone", async () => {
    const res = await call(
      s,
      "POST",
      `/v0/webhook_endpoints/${M1}`,
      null,
      { url: receiver.url },
      { cookie: `siwe_session=${key1}` },
    );
    expect(res.status).toBe(401);
  });

  test("bad bodies and parameters are 400s naming the field, and change nothing", async () => {
    const before = (await call(s, "GET", `/v0/webhook_endpoints/${M1}`, key1)).body.length;
    const cases: [unknown, string][] = [
      [{ url: receiver.url, extra: 1 }, "extra"],
      [{ url: 42 }, "url"],
      [{}, "url"],
      [{ url: "ftp://example.com/x" }, "url"],
      [{ url: receiver.url, event_types: ["charge.nope"] }, "event_types"],
      [{ url: receiver.url, event_types: [] }, "event_types"],
      [{ url: receiver.url, description: 7 }, "description"],
      [[1, 2], "body"],
    ];
    for (const [body, param] of cases) {
      const res = await call(s, "POST", `/v0/webhook_endpoints/${M1}`, key1, body);
      expect(res.status).toBe(400);
      expect(res.body.error.param).toBe(param);
    }
    const big = await call(
      s,
      "POST",
      `/v0/webhook_endpoints/${M1}`,
      key1,
      JSON.stringify({ url: receiver.url, description: "x".repeat(70_000) }),
    );
    expect(big.status).toBe(400);
    expect(big.body.error.code).toBe("body_too_large");
    expect((await call(s, "PATCH", `/v0/webhook_endpoints/${M1}/we_nope`, key1, { enabled: true })).status).toBe(400);
    expect(
      (await call(s, "GET", `/v0/webhook_endpoints/${M1}/we_${"0".repeat(24)}/deliveries?status=lost`, key1)).status,
    ).toBe(400);
    expect((await call(s, "GET", `/v0/webhook_endpoints/${M1}`, key1)).body.length).toBe(before);
  });
});

describe("destinations (production rules)", () => {
  let s: SeededApp;
  let key: string;
  beforeAll(async () => {
    s = await startSeededApp();
    key = (await createApiKey(s.db.sql, { merchant: M1 })).key;
  });
  afterAll(() => s?.close());

  test("https only; loopback, 10/8, metadata, an IPv6 ULA and a name resolving to loopback are refused", async () => {
    for (const url of [
      "http://example.com/hook",
      "https://127.0.0.1/hook",
      "https://10.1.2.3/hook",
      "https://169.254.169.254/latest/meta-data",
      "https://[fd00::1]/hook",
      "https://[::1]/hook",
      "https://localhost/hook",
      "https://localtest.me/hook",
      "https://localhost./hook",
    ]) {
      const res = await call(s, "POST", `/v0/webhook_endpoints/${M1}`, key, { url });
      expect(res.status, url).toBe(400);
      expect(res.body.error.param).toBe("url");
    }
    expect((await s.db.sql`select count(*)::int as n from webhook_endpoints`)[0]!.n).toBe(0);
  });
});
