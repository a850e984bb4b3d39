import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { Webhook } from "standardwebhooks";
import { createApiKey } from "../../../src/auth/api-keys";
import { createEndpoint } from "../../../src/webhooks/endpoints";
import { recordOutcomes } from "../../../src/webhooks/queries";
import type { AttemptOutcome } from "../../../src/webhooks/send";
import { startSeededApp, type SeededApp } from "../../../testkit/app";
import { CHAIN_A, CHAIN_B } from "../../../testkit/seed";
import { createSession } from "../../../src/auth/sessions";
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

  test("bodies are JSON whatever their content type (webhooks.md §3): no type, text/plain, curl -d's form type", async () => {
    const send = async (body: BodyInit, contentType?: string) => {
      const headers: Record<string, string> = { authorization: `Bearer ${key1}` };
      if (contentType) headers["content-type"] = contentType;
      const res = await s.app.handle(
        new Request(`http://localhost/v0/webhook_endpoints/${M1}`, { method: "POST", headers, body }),
      );
      return { status: res.status, body: (await res.json()) as { id?: string; error?: { param?: string } } };
    };
    const json = JSON.stringify({ url: receiver.url, description: "typeless" });
    const created: string[] = [];
    for (const [body, type] of [
      [new Blob([json]), undefined], // no content-type header at all
      [json, "text/plain;charset=UTF-8"],
      [json, "application/x-www-form-urlencoded"],
    ] as const) {
      const res = await send(body, type);
      expect(res.status, String(type)).toBe(201);
      created.push(res.body.id!);
    }
    // A form body is not JSON: a 400 naming the body, and nothing is created.
    const form = await send(`url=${encodeURIComponent(receiver.url)}`, "application/x-www-form-urlencoded");
    expect(form.status).toBe(400);
    expect(form.body.error!.param).toBe("body");
    for (const id of created) {
      expect((await call(s, "DELETE", `/v0/webhook_endpoints/${M1}/${id}`, key1)).status).toBe(200);
    }
  });

  test("with private URLs allowed, a host name is not resolved at creation: one that cannot resolve is accepted", async () => {
    // `.invalid` never resolves (RFC 2606), with or without DNS: the README's https://example.com/webhooks on a
    // machine without DNS is the same case. The URL's form is still checked.
    const res = await call(s, "POST", `/v0/webhook_endpoints/${M1}`, key1, { url: "https://hooks.example.invalid/h" });
    expect(res.status).toBe(201);
    const patched = await call(s, "PATCH", `/v0/webhook_endpoints/${M1}/${res.body.id}`, key1, {
      url: "https://other.example.invalid/h",
    });
    expect(patched.status).toBe(200);
    expect(patched.body.url).toBe("https://other.example.invalid/h");
    const bad = await call(s, "POST", `/v0/webhook_endpoints/${M1}`, key1, { url: "ftp://hooks.example.invalid/h" });
    expect(bad.status).toBe(400);
    expect(bad.body.error.param).toBe("url");
    expect((await call(s, "DELETE", `/v0/webhook_endpoints/${M1}/${res.body.id}`, key1)).status).toBe(200);
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
    // An id not of the we_… form names no endpoint: 404 (webhooks.md §3, "404 when unknown"), on every route.
    for (const [method, suffix, body] of [
      ["PATCH", "", { enabled: true }],
      ["GET", "", undefined],
      ["DELETE", "", undefined],
      ["POST", "/rotate_secret", undefined],
      ["POST", "/test", undefined],
      ["GET", "/deliveries", undefined],
      ["POST", "/replay", { since: "2026-01-01T00:00:00Z" }],
    ] as const) {
      const res = await call(s, method, `/v0/webhook_endpoints/${M1}/we_nope${suffix}`, key1, body);
      expect(res.status, `${method} ${suffix}`).toBe(404);
      expect(res.body.error.code).toBe("not_found");
      expect(res.body.error.param).toBe("id");
    }
    expect((await call(s, "GET", `/v0/webhook_endpoints/${M1}/we_nope`, null)).status).toBe(401);
    expect((await call(s, "POST", `/v0/events/${M1}/evt_NOPE/redeliver`, key1, {})).status).toBe(404);
    expect(
      (await call(s, "GET", `/v0/webhook_endpoints/${M1}/we_${"0".repeat(24)}/deliveries?status=lost`, key1)).status,
    ).toBe(400);
    expect((await call(s, "GET", `/v0/webhook_endpoints/${M1}`, key1)).body.length).toBe(before);
  });

  test("rotate_secret takes expire_previous_in: 0 stops the previous secret now, the default keeps it 24 h, a bad value is a 400 that changes nothing", async () => {
    const created = await call(s, "POST", `/v0/webhook_endpoints/${M1}`, key1, { url: receiver.url });
    const id = created.body.id;
    const rotate = (body?: unknown) => call(s, "POST", `/v0/webhook_endpoints/${M1}/${id}/rotate_secret`, key1, body);
    const signaturesOfTest = async () => {
      const before = receiver.received.length;
      expect((await call(s, "POST", `/v0/webhook_endpoints/${M1}/${id}/test`, key1)).status).toBe(200);
      return receiver.received.slice(before).map((r) => r.signature.split(" ").length);
    };
    const stored = async () =>
      (
        await s.db.sql<{ secret: string; ttl: number | null }[]>`
          select secret, extract(epoch from previous_secret_expires_at - clock_timestamp())::float8 as ttl
          from webhook_endpoints where id = ${id}`
      )[0]!;
    const first = await rotate();
    expect(first.status).toBe(200);
    const ttl = (await stored()).ttl!;
    expect(ttl).toBeGreaterThan(86_400 - 60);
    expect(ttl).toBeLessThanOrEqual(86_400);
    expect(await signaturesOfTest()).toEqual([2]);
    const before = await stored();
    for (const bad of [-1, 1.5, "0", null, 604_801, true]) {
      const res = await rotate({ expire_previous_in: bad });
      expect(res.status, JSON.stringify(bad)).toBe(400);
      expect(res.body.error.param).toBe("expire_previous_in");
    }
    expect((await stored()).secret).toBe(before.secret);
    const now = await rotate({ expire_previous_in: 0 });
    expect(now.status).toBe(200);
    expect((await stored()).ttl!).toBeLessThanOrEqual(0);
    // Only the new secret signs: a receiver still holding the leaked one rejects the delivery.
    expect(await signaturesOfTest()).toEqual([1]);
    const week = await rotate({ expire_previous_in: 604_800 });
    expect(week.status).toBe(200);
    expect((await stored()).ttl!).toBeGreaterThan(604_800 - 60);
    expect(await signaturesOfTest()).toEqual([2]);
  });

  test("delete and test take no body fields, rotate_secret only expire_previous_in: any other is a 400 naming it, and changes nothing", async () => {
    const created = await call(s, "POST", `/v0/webhook_endpoints/${M1}`, key1, { url: receiver.url });
    const id = created.body.id;
    const state = async () => ({
      endpoint: (await s.db.sql`select secret, previous_secret from webhook_endpoints where id = ${id}`)[0],
      deliveries: (await s.db.sql`select count(*)::int as n from webhook_deliveries where endpoint_id = ${id}`)[0]!.n,
      sent: receiver.received.length,
    });
    const before = await state();
    for (const [method, suffix] of [
      ["DELETE", ""],
      ["POST", "/rotate_secret"],
      ["POST", "/test"],
    ] as const) {
      for (const body of [{ foo: 1 }, { url: receiver.url }, [1], "text"]) {
        const res = await call(s, method, `/v0/webhook_endpoints/${M1}/${id}${suffix}`, key1, body);
        expect(res.status, `${method} ${suffix} ${JSON.stringify(body)}`).toBe(400);
        expect(res.body.error.param).toBe(
          Array.isArray(body) || typeof body === "string" ? "body" : Object.keys(body)[0],
        );
      }
    }
    expect(await state()).toEqual(before);
    // No body, an empty JSON body and {} are fine.
    for (const body of [undefined, "", {}]) {
      const res = await call(s, "POST", `/v0/webhook_endpoints/${M1}/${id}/rotate_secret`, key1, body);
      expect(res.status, JSON.stringify(body)).toBe(200);
      expect(res.body.secret).toMatch(/^whsec_/);
    }
    expect((await call(s, "POST", `/v0/webhook_endpoints/${M1}/${id}/test`, key1, {})).status).toBe(200);
    expect((await call(s, "DELETE", `/v0/webhook_endpoints/${M1}/${id}`, key1, {})).body).toEqual({
      id,
      deleted: true,
    });
  });

  test("a NUL in any string of a body or path is a 400 naming the field, and changes nothing", async () => {
    const created = await call(s, "POST", `/v0/webhook_endpoints/${M1}`, key1, { url: receiver.url, description: "d" });
    const id = created.body.id;
    const before = await s.db.sql`select * from webhook_endpoints order by id`;
    const cases: [string, string, unknown, string][] = [
      ["POST", `/v0/webhook_endpoints/${M1}`, { url: `${receiver.url}/a\u0000b` }, "url"],
      ["POST", `/v0/webhook_endpoints/${M1}`, { url: receiver.url, description: "a\u0000b" }, "description"],
      [
        "POST",
        `/v0/webhook_endpoints/${M1}`,
        { url: receiver.url, event_types: ["charge.failed\u0000"] },
        "event_types",
      ],
      ["PATCH", `/v0/webhook_endpoints/${M1}/${id}`, { description: "x\u0000" }, "description"],
      ["PATCH", `/v0/webhook_endpoints/${M1}/${id}`, { url: `${receiver.url}\u0000` }, "url"],
      ["POST", `/v0/webhook_endpoints/${M1}/${id}/replay`, { since: "2026-11-01T00:00:00Z\u0000" }, "since"],
      ["POST", `/v0/webhook_endpoints/${M1}/${id}/replay`, { since: "2026-11-01T00:00:00Z", until: "\u0000" }, "until"],
      [
        "POST",
        `/v0/webhook_endpoints/${M1}/${id}/replay`,
        { since: "2026-11-01T00:00:00Z", types: ["\u0000"] },
        "types",
      ],
      ["POST", `/v0/events/${M1}/evt_${"0".repeat(40)}/redeliver`, { endpoint_id: `${id}\u0000` }, "endpoint_id"],
      ["PATCH", `/v0/webhook_endpoints/${M1}/${id}%00`, { enabled: true }, "id"],
      ["GET", `/v0/webhook_endpoints/${M1}/${id}/deliveries?starting_after=wd_%00`, undefined, "starting_after"],
    ];
    for (const [method, path, body, param] of cases) {
      const res = await call(s, method, path, key1, body);
      expect(res.status, `${method} ${path} ${JSON.stringify(body)}`).toBe(400);
      expect(res.body.error).toMatchObject({ code: "invalid_parameter", param });
    }
    expect(await s.db.sql`select * from webhook_endpoints order by id`).toEqual(before);
  });

  test("replay: since and until are what the event log's since accepts, within 0001–9999; anything else is a 400", async () => {
    const created = await call(s, "POST", `/v0/webhook_endpoints/${M1}`, key1, { url: receiver.url });
    const replay = (body: unknown) =>
      call(s, "POST", `/v0/webhook_endpoints/${M1}/${created.body.id}/replay`, key1, body);
    const bad = [
      -8640000000000,
      8640000000000,
      1796000000,
      "+275760-09-13T00:00:00Z",
      "-010000-01-01T00:00:00Z",
      "-000001-01-01T00:00:00Z",
      "0000-01-01T00:00:00Z",
      "9999-12-31T23:59:59-05:00",
      "Jan 1 2020",
      "1",
      "1796000000",
      "2020-01-01",
      "2020-02-30T00:00:00Z",
      "",
      null,
      true,
      ["2026-01-01T00:00:00Z"],
    ];
    for (const v of bad) {
      for (const field of ["since", "until"]) {
        const body = field === "since" ? { since: v } : { since: "2026-01-01T00:00:00Z", until: v };
        const res = await replay(body);
        expect(res.status, `${field} ${JSON.stringify(v)}`).toBe(400);
        expect(res.body.error).toMatchObject({ code: "invalid_parameter", param: field });
      }
    }
    expect((await replay({})).body.error.param).toBe("since");
    for (const since of [
      "2026-11-20T10:00:00Z",
      "2026-11-20T10:00Z",
      "2026-11-20T12:00:00.123+02:00",
      "0001-01-01T00:00:00Z",
      "9999-12-31T23:59:59Z",
    ]) {
      const res = await replay({ since, until: "9999-12-31T23:59:59.999Z" });
      expect(res.status, since).toBe(200);
      expect(res.body).toEqual({ enqueued: expect.any(Number), skipped: expect.any(Number) });
    }
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

  test("https only; loopback, 10/8, metadata, IPv6 private forms (IPv4 inside included) and a name resolving to loopback are refused", async () => {
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
      "https://[::ffff:127.0.0.1]/h",
      "https://[::ffff:7f00:1]/h",
      "https://[::ffff:a9fe:a9fe]/",
      "https://[0:0:0:0:0:ffff:7f00:1]/h",
      "https://[::127.0.0.1]/h",
      "https://[64:ff9b::169.254.169.254]/",
      "https://[64:ff9b:1::808:808]/",
      "https://[2002:a9fe:a9fe::]/",
      "https://[2001:0:4136:e378:8000:63bf:3fff:fdd2]/",
      "https://[fe80::1]/h",
      "https://[fec0::1]/h",
      "https://[ff02::1]/h",
      "https://[2001:db8::1]/h",
      "https://[::]/h",
      "https://hooks.example.invalid/h", // a name that does not resolve cannot be checked: refused
    ]) {
      const res = await call(s, "POST", `/v0/webhook_endpoints/${M1}`, key, { url });
      expect(res.status, url).toBe(400);
      expect(res.body.error.param).toBe("url");
    }
    expect((await s.db.sql`select count(*)::int as n from webhook_endpoints`)[0]!.n).toBe(0);
  });

  test("an endpoint stored with such an address fails at send time, without a connection", async () => {
    let connections = 0;
    const listener = Bun.listen({
      hostname: "127.0.0.1",
      port: 0,
      socket: { open: (sock) => void (connections++, sock.end()), data: () => {} },
    });
    try {
      for (const host of ["[::ffff:7f00:1]", "[::ffff:127.0.0.1]", "[64:ff9b::7f00:1]", "[2002:7f00:1::]"]) {
        // As if written before the rule existed: straight into the table.
        const ep = await createEndpoint(
          s.db.sql,
          { merchant: M1, url: `https://${host}:${listener.port}/h`, eventTypes: ["*"], description: null },
          undefined,
        );
        const res = await call(s, "POST", `/v0/webhook_endpoints/${M1}/${ep.id}/test`, key);
        expect(res.status).toBe(200);
        expect(res.body).toMatchObject({ status: "failed", response_status: null });
        expect(res.body.error, host).toContain("private address");
      }
      expect(connections).toBe(0);
    } finally {
      listener.stop(true);
    }
  });
});

describe("replay and redeliver keep the reorg guarantee (webhooks.md §1)", () => {
  const M3 = "0x00000000000000000000000000000000000000c3";
  const TYPES = ["charge.succeeded", "subscription.status_changed", "charge.failed"];
  let s: SeededApp;
  let key: string;
  let receiver: Receiver;
  const ids: string[] = [];
  let all: string; // an endpoint of every type
  let other: string; // another one
  let typed: string; // an endpoint of charge.failed and charge.succeeded

  beforeAll(async () => {
    s = await startSeededApp({ WEBHOOK_ALLOW_PRIVATE_URLS: "1" });
    key = (await createApiKey(s.db.sql, { merchant: M3 })).key;
    receiver = startReceiver();
    const sql = s.db.sql;
    // Six events in blocks 100–105, as the indexer stores them.
    for (let i = 0; i < 6; i++) {
      const id = `evt_${(0xc300 + i).toString(16).padStart(40, "0")}`;
      ids.push(id);
      await sql`
        insert into merchant_events (id, chain_id, merchant, type, block_number, log_index, ts, data)
        values (${id}, ${CHAIN_A}, ${M3}, ${TYPES[i % 3]!}, ${100 + i}, 0, ${new Date(Date.UTC(2026, 10, 1 + i))},
          ${sql.json({ object: { n: i } })})`;
    }
    // A reorg removes blocks 103–105, as a rollback records it (src/events/queries.ts withdrawAbove): each withdrawn
    // event gets an event.reverted after it in the log, and its reverted_by set to that event's id.
    await sql`
      with ins as (
        insert into merchant_events (id, chain_id, merchant, type, block_number, log_index, ts, data)
        select 'evt_' || substr(encode(sha256(convert_to('reverted|' || g.id, 'UTF8')), 'hex'), 1, 40), g.chain_id,
          g.merchant, 'event.reverted', g.block_number, 2147483647, now(),
          jsonb_build_object('object', jsonb_build_object('id', g.id, 'type', g.type))
        from merchant_events g where g.merchant = ${M3} and g.block_number > 102 order by g.seq
        returning id, data)
      update merchant_events m set reverted_by = i.id from ins i where m.id = i.data->'object'->>'id'`;
    const create = async (event_types: string[]) =>
      (await call(s, "POST", `/v0/webhook_endpoints/${M3}`, key, { url: receiver.url, event_types })).body.id;
    all = await create(["*"]);
    other = await create(["*"]);
    typed = await create(["charge.failed", "charge.succeeded"]);
  });
  afterAll(async () => {
    await receiver?.stop();
    await s?.close();
  });

  const enqueued = async (endpointId: string, origin: string) =>
    (
      await s.db.sql<{ event_id: string }[]>`
        select event_id from webhook_deliveries where endpoint_id = ${endpointId} and origin = ${origin}
        order by event_seq`
    ).map((r) => r.event_id);
  const replay = (endpointId: string, body: unknown) =>
    call(s, "POST", `/v0/webhook_endpoints/${M3}/${endpointId}/replay`, key, body);
  const redeliver = (eventId: string, body?: unknown) =>
    call(s, "POST", `/v0/events/${M3}/${eventId}/redeliver`, key, body);

  test("replay sends only events still on the canonical chain: no withdrawn event, no event.reverted, no webhook.test", async () => {
    await call(s, "POST", `/v0/webhook_endpoints/${M3}/${all}/test`, key); // a webhook.test in the log
    const log = (await call(s, "GET", `/v0/events/${M3}`, key)).body.map((e: any) => e.type);
    expect(log.filter((t: string) => t === "event.reverted")).toHaveLength(3);
    expect(log).toContain("webhook.test");
    const res = await replay(all, { since: "2026-01-01T00:00:00Z" });
    expect(res.body).toEqual({ enqueued: 3, skipped: 0 });
    expect(await enqueued(all, "replay")).toEqual(ids.slice(0, 3));
  });

  test("replay sends only the endpoint's own event_types, narrowed by types", async () => {
    expect((await replay(typed, { since: "2026-01-01T00:00:00Z" })).body).toEqual({ enqueued: 2, skipped: 0 });
    expect(await enqueued(typed, "replay")).toEqual([ids[0], ids[2]]);
    const narrowed = await replay(typed, {
      since: "2026-01-01T00:00:00Z",
      types: ["charge.failed", "subscription.status_changed"],
    });
    // ids[2] (charge.failed) is still pending to this endpoint from the first replay: skipped, not enqueued twice.
    expect(narrowed.body).toEqual({ enqueued: 0, skipped: 1 });
    expect(await enqueued(typed, "replay")).toEqual([ids[0], ids[2]]);
    const disjoint = await replay(typed, { since: "2026-01-01T00:00:00Z", types: ["subscription.status_changed"] });
    expect(disjoint.body).toEqual({ enqueued: 0, skipped: 0 });
    const reverted = await replay(other, { since: "2026-01-01T00:00:00Z", types: ["event.reverted"] });
    expect(reverted.body).toEqual({ enqueued: 0, skipped: 0 });
  });

  test("redeliver of a withdrawn event is a 409 event_withdrawn and enqueues nothing", async () => {
    const before = (await s.db.sql`select count(*)::int as n from webhook_deliveries`)[0]!.n;
    for (const body of [undefined, { endpoint_id: all }]) {
      const res = await redeliver(ids[4]!, body);
      expect(res.status).toBe(409);
      expect(res.body.error).toMatchObject({ type: "invalid_request_error", code: "event_withdrawn", param: "id" });
      expect(typeof res.body.error.request_id).toBe("string");
    }
    expect((await s.db.sql`select count(*)::int as n from webhook_deliveries`)[0]!.n).toBe(before);
    // An event still standing goes to every endpoint it matches.
    expect((await redeliver(ids[0]!)).body).toEqual({ enqueued: 3 });
    expect((await redeliver(ids[1]!)).body).toEqual({ enqueued: 2 });
  });

  test("redeliver of a webhook.test without endpoint_id goes only to the endpoint it was written for", async () => {
    const sent = await call(s, "POST", `/v0/webhook_endpoints/${M3}/${other}/test`, key);
    expect(sent.status).toBe(200);
    const res = await redeliver(sent.body.event_id);
    expect(res.body).toEqual({ enqueued: 1 });
    const rows = await s.db.sql<{ endpoint_id: string }[]>`
      select endpoint_id from webhook_deliveries where event_id = ${sent.body.event_id} and origin = 'redeliver'`;
    expect(rows.map((r) => r.endpoint_id)).toEqual([other]);
  });

  test("redeliver of an event.reverted without endpoint_id goes to the endpoints subscribed to its event's type and those that may have received it", async () => {
    const [revert] = await s.db.sql<{ id: string; withdrawn: string; type: string }[]>`
      select id, data->'object'->>'id' as withdrawn, data->'object'->>'type' as type from merchant_events
      where merchant = ${M3} and type = 'event.reverted' order by seq limit 1`;
    expect(revert!.type).toBe("charge.succeeded");
    const [event] = await s.db.sql<
      { seq: string }[]
    >`select seq::text from merchant_events where id = ${revert!.withdrawn}`;
    const create = async (event_types: string[]) =>
      (await call(s, "POST", `/v0/webhook_endpoints/${M3}`, key, { url: receiver.url, event_types })).body.id;
    // Two endpoints no longer subscribed to charge.succeeded, that were sent the withdrawn event before: one
    // answered 2xx (it has it), one answered 500 (it has not).
    const statuses = await create(["subscription.status_changed"]);
    const failures = await create(["charge.failed"]);
    const outcomes: [string, AttemptOutcome, number | null][] = [
      [statuses, "delivered", 200],
      [failures, "rejected", 500],
    ];
    for (const [endpoint, outcome, status] of outcomes) {
      const deliveryId = `wd_${endpoint.slice(3, 15)}${"0".repeat(12)}`;
      await s.db.sql`
        insert into webhook_deliveries (id, endpoint_id, event_seq, event_id, event_type, origin, attempts)
        values (${deliveryId}, ${endpoint}, ${event!.seq}, ${revert!.withdrawn}, 'charge.succeeded', 'auto', 1)`;
      await recordOutcomes(
        s.db.sql,
        [
          {
            deliveryId,
            attempt: 1,
            ok: outcome === "delivered",
            outcome,
            status,
            error: null,
            durationMs: 5,
            retryInS: null,
          },
        ],
        3600,
      );
    }
    // `all`, `other` and `typed` are subscribed to charge.succeeded (received or not); `statuses` may have it.
    expect((await redeliver(revert!.id)).body).toEqual({ enqueued: 4 });
    const rows = await s.db.sql<{ endpoint_id: string }[]>`
      select endpoint_id from webhook_deliveries where event_id = ${revert!.id} and origin = 'redeliver'`;
    expect(rows.map((r) => r.endpoint_id).sort()).toEqual([all, other, typed, statuses].sort());
  });
});

describe("caps: endpoints per merchant, replay of pending events, test calls per endpoint", () => {
  const M4 = "0x00000000000000000000000000000000000000c4";
  const M5 = "0x00000000000000000000000000000000000000c5";
  let s: SeededApp;
  let key4: string;
  let key5: string;
  let receiver: Receiver;

  beforeAll(async () => {
    s = await startSeededApp({ WEBHOOK_ALLOW_PRIVATE_URLS: "1" });
    key4 = (await createApiKey(s.db.sql, { merchant: M4 })).key;
    key5 = (await createApiKey(s.db.sql, { merchant: M5 })).key;
    receiver = startReceiver();
  });
  afterAll(async () => {
    await receiver?.stop();
    await s?.close();
  });

  const count = async (merchant: string) =>
    (await s.db.sql<{ n: number }[]>`select count(*)::int as n from webhook_endpoints where merchant = ${merchant}`)[0]!
      .n;
  const create = (merchant: string, key: string) =>
    call(s, "POST", `/v0/webhook_endpoints/${merchant}`, key, { url: receiver.url });

  test("at most 16 endpoints per merchant: two creates at once at 15 give 16, the 17th is a 400 naming the limit", async () => {
    for (let i = 0; i < 15; i++) expect((await create(M4, key4)).status).toBe(201);
    const both = await Promise.all([create(M4, key4), create(M4, key4)]);
    expect(both.map((r) => r.status).sort()).toEqual([201, 400]);
    expect(await count(M4)).toBe(16);
    const before = await s.db.sql`select * from webhook_endpoints where merchant = ${M4} order by id`;
    const refused = await create(M4, key4);
    expect(refused.status).toBe(400);
    expect(refused.body.error).toMatchObject({
      type: "invalid_request_error",
      code: "webhook_endpoint_limit_reached",
      message: expect.stringContaining("16"),
    });
    expect(await s.db.sql`select * from webhook_endpoints where merchant = ${M4} order by id`).toEqual(before);
    // Another merchant is not affected; deleting one makes room again.
    expect((await create(M5, key5)).status).toBe(201);
    expect((await call(s, "DELETE", `/v0/webhook_endpoints/${M4}/${before[0]!.id}`, key4)).status).toBe(200);
    expect((await create(M4, key4)).status).toBe(201);
    expect(await count(M4)).toBe(16);
  });

  test("a replay skips the events already pending to the endpoint: twice gives N, then 0 with skipped N", async () => {
    const sql = s.db.sql;
    for (let i = 0; i < 4; i++) {
      await sql`
        insert into merchant_events (id, chain_id, merchant, type, block_number, log_index, ts, data)
        values (${`evt_${(0xc500 + i).toString(16).padStart(40, "0")}`}, ${CHAIN_A}, ${M5}, 'charge.succeeded',
          ${200 + i}, 0, ${new Date(Date.UTC(2026, 10, 1 + i))}, ${sql.json({ object: { n: i } })})`;
    }
    const [endpoint] = (await call(s, "GET", `/v0/webhook_endpoints/${M5}`, key5)).body;
    const other = (await create(M5, key5)).body.id;
    const replay = (id: string) =>
      call(s, "POST", `/v0/webhook_endpoints/${M5}/${id}/replay`, key5, { since: "2026-01-01T00:00:00Z" });
    const pending = async (id: string) =>
      (
        await sql<{ n: number }[]>`
        select count(*)::int as n from webhook_deliveries where endpoint_id = ${id} and status = 'pending'`
      )[0]!.n;
    expect((await replay(endpoint.id)).body).toEqual({ enqueued: 4, skipped: 0 });
    expect((await replay(endpoint.id)).body).toEqual({ enqueued: 0, skipped: 4 });
    expect(await pending(endpoint.id)).toBe(4);
    // Another endpoint is not affected; once a delivery is no longer pending, its event is replayed again.
    expect((await replay(other)).body).toEqual({ enqueued: 4, skipped: 0 });
    await sql`
      update webhook_deliveries set status = 'succeeded'
      where id = (select id from webhook_deliveries where endpoint_id = ${endpoint.id} order by event_seq limit 1)`;
    expect((await replay(endpoint.id)).body).toEqual({ enqueued: 1, skipped: 3 });
    expect(await pending(endpoint.id)).toBe(4);
  });

  test("test: 10 a minute per endpoint, the 11th is a 429 with Retry-After that sends nothing", async () => {
    const [a, b] = (await call(s, "GET", `/v0/webhook_endpoints/${M5}`, key5)).body;
    const test = (id: string) => call(s, "POST", `/v0/webhook_endpoints/${M5}/${id}/test`, key5);
    for (let i = 0; i < 10; i++) expect((await test(a.id)).body.status).toBe("succeeded");
    const sent = receiver.received.length;
    const deliveries = (await s.db.sql`select count(*)::int as n from webhook_deliveries`)[0]!.n;
    const refused = await test(a.id);
    expect(refused.status).toBe(429);
    expect(refused.body.error).toMatchObject({ type: "rate_limit_error", code: "rate_limited" });
    expect(Number(refused.headers.get("retry-after"))).toBeGreaterThanOrEqual(1);
    expect(receiver.received.length).toBe(sent);
    expect((await s.db.sql`select count(*)::int as n from webhook_deliveries`)[0]!.n).toBe(deliveries);
    expect((await test(b.id)).status).toBe(200);
  });
});

describe("chain scopes: an endpoint made by a chain-scoped credential receives and shows only that chain", () => {
  const M4 = "0x00000000000000000000000000000000000000c4";
  let s: SeededApp;
  let cliKey: string;
  let onB: string; // a session signed on chain B
  let onA: string; // a session signed on chain A
  let receiver: Receiver;
  const evt = (chainId: number, n: number) => `evt_${(chainId * 1000 + n).toString(16).padStart(40, "0")}`;

  beforeAll(async () => {
    s = await startSeededApp({ WEBHOOK_ALLOW_PRIVATE_URLS: "1" });
    cliKey = (await createApiKey(s.db.sql, { merchant: M4 })).key;
    // Sessions as /v0/siwe/verify stores them (the seeded app serves one chain for sign-in).
    const session = async (chainId: number) =>
      (await s.db.sql.begin((tx) => createSession(tx, { address: M4, chainId, ttlSeconds: 600 }))).token;
    onA = await session(CHAIN_A);
    onB = await session(CHAIN_B);
    receiver = startReceiver();
    for (const chainId of [CHAIN_A, CHAIN_B]) {
      for (let n = 0; n < 2; n++) {
        await s.db.sql`
          insert into merchant_events (id, chain_id, merchant, type, block_number, log_index, ts, data)
          values (${evt(chainId, n)}, ${chainId}, ${M4}, 'charge.succeeded', ${100 + n}, 0, now(), '{"object":{}}')`;
      }
    }
  });
  afterAll(async () => {
    await receiver?.stop();
    await s?.close();
  });

  const create = (cred: string) => call(s, "POST", `/v0/webhook_endpoints/${M4}`, cred, { url: receiver.url });

  test("chain_id is the creator's chain (session or a key it made), null for a CLI key, and shown in every read", async () => {
    const bySession = await create(onB);
    expect(bySession.status).toBe(201);
    expect(bySession.body.chain_id).toBe(CHAIN_B);
    const madeKey = (await call(s, "POST", `/v0/api_keys/${M4}`, onB)).body.key;
    expect((await create(madeKey)).body.chain_id).toBe(CHAIN_B);
    const byCli = await create(cliKey);
    expect(byCli.body.chain_id).toBeNull();
    const listed = await call(s, "GET", `/v0/webhook_endpoints/${M4}`, cliKey);
    expect(listed.body.map((e: any) => e.chain_id)).toEqual([CHAIN_B, CHAIN_B, null]);
    expect((await call(s, "GET", `/v0/webhook_endpoints/${M4}/${bySession.body.id}`, cliKey)).body.chain_id).toBe(
      CHAIN_B,
    );
  });

  test("a session sees its chain's endpoints and the all-chain ones, never another chain's (404)", async () => {
    const onAEndpoint = (await create(onA)).body;
    expect(onAEndpoint.chain_id).toBe(CHAIN_A);
    const seenByB = (await call(s, "GET", `/v0/webhook_endpoints/${M4}`, onB)).body;
    expect(seenByB.map((e: any) => e.chain_id)).not.toContain(CHAIN_A);
    expect(seenByB.length).toBe(3);
    for (const [method, suffix] of [
      ["GET", ""],
      ["PATCH", ""],
      ["POST", "/rotate_secret"],
      ["POST", "/test"],
      ["GET", "/deliveries"],
      ["DELETE", ""],
    ] as const) {
      const res = await call(s, method, `/v0/webhook_endpoints/${M4}/${onAEndpoint.id}${suffix}`, onB);
      expect(res.status, `${method} ${suffix}`).toBe(404);
    }
    expect((await call(s, "GET", `/v0/webhook_endpoints/${M4}/${onAEndpoint.id}`, onA)).status).toBe(200);
    await call(s, "DELETE", `/v0/webhook_endpoints/${M4}/${onAEndpoint.id}`, onA);
  });

  test("a key scoped to chain B cannot patch, rotate or delete chain A's endpoint: 404, and nothing changes", async () => {
    const onAEndpoint = (await create(onA)).body;
    const keyB = (await call(s, "POST", `/v0/api_keys/${M4}`, onB)).body.key;
    const stored = async () =>
      (
        await s.db.sql`select url, enabled, description, secret, previous_secret, updated_at
          from webhook_endpoints where id = ${onAEndpoint.id}`
      )[0];
    const before = await stored();
    const path = `/v0/webhook_endpoints/${M4}/${onAEndpoint.id}`;
    for (const [method, suffix, body] of [
      ["PATCH", "", { enabled: false, description: "taken" }],
      ["PATCH", "", { url: "ftp://refused.example" }], // a refused body on an endpoint it cannot see: still a 404
      ["POST", "/rotate_secret", undefined],
      ["DELETE", "", undefined],
    ] as const) {
      const res = await call(s, method, `${path}${suffix}`, keyB, body);
      expect(res.status, `${method} ${suffix} ${JSON.stringify(body)}`).toBe(404);
      expect(res.body.error.param).toBe("id");
    }
    expect(await stored()).toEqual(before);
    // The key acts on its own chain's endpoints (and the all-chain ones) as before.
    const onBEndpoint = (await create(onB)).body;
    expect(
      (await call(s, "PATCH", `/v0/webhook_endpoints/${M4}/${onBEndpoint.id}`, keyB, { enabled: false })).body,
    ).toMatchObject({ id: onBEndpoint.id, enabled: false });
    expect((await call(s, "DELETE", `/v0/webhook_endpoints/${M4}/${onBEndpoint.id}`, keyB)).status).toBe(200);
    expect((await call(s, "DELETE", path, onA)).status).toBe(200);
  });

  test("replay to a chain-scoped endpoint enqueues only its chain's events; redeliver never crosses chains", async () => {
    const scoped = (await create(onB)).body.id;
    const all = (await create(cliKey)).body.id;
    expect(
      (await call(s, "POST", `/v0/webhook_endpoints/${M4}/${scoped}/replay`, cliKey, { since: "2000-01-01T00:00:00Z" }))
        .body,
    ).toEqual({ enqueued: 2, skipped: 0 });
    // A chain-B session cannot replay to an all-chain endpoint (a 403 that enqueues nothing): all-chain resources
    // need an all-chain credential.
    const refused = await call(s, "POST", `/v0/webhook_endpoints/${M4}/${all}/replay`, onB, {
      since: "2000-01-01T00:00:00Z",
    });
    expect(refused.status).toBe(403);
    // Every chain, by the all-chain key.
    expect(
      (await call(s, "POST", `/v0/webhook_endpoints/${M4}/${all}/replay`, cliKey, { since: "2000-01-01T00:00:00Z" }))
        .body,
    ).toEqual({ enqueued: 4, skipped: 0 });
    const rows = await s.db.sql<{ event_id: string }[]>`
      select event_id from webhook_deliveries where endpoint_id = ${scoped} and origin = 'replay' order by event_seq`;
    expect(rows.map((r) => r.event_id)).toEqual([evt(CHAIN_B, 0), evt(CHAIN_B, 1)]);
    // Another chain's event is a 404 to a chain-B session; named to a chain-B endpoint it is a 400.
    expect((await call(s, "POST", `/v0/events/${M4}/${evt(CHAIN_A, 0)}/redeliver`, onB)).status).toBe(404);
    const crossed = await call(s, "POST", `/v0/events/${M4}/${evt(CHAIN_A, 0)}/redeliver`, cliKey, {
      endpoint_id: scoped,
    });
    expect(crossed.status).toBe(400);
    expect(crossed.body.error.param).toBe("endpoint_id");
    const before = await s.db.sql`select count(*)::int as n from webhook_deliveries where endpoint_id = ${scoped}`;
    await call(s, "POST", `/v0/events/${M4}/${evt(CHAIN_A, 0)}/redeliver`, cliKey);
    const after = await s.db.sql`select count(*)::int as n from webhook_deliveries where endpoint_id = ${scoped}`;
    expect(after[0]!.n).toBe(before[0]!.n);
  });
});
