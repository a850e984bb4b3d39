/**
 * The typed client against the real service (API on a real port over an indexed anvil): typed calls, `ApiError`
 * with the service's envelope, `paginate` following `Link`, and the committed generated types equal to what
 * openapi-typescript produces from the running app's `/docs/json`. Retries against a real local server that
 * answers 429/503 and then 200 (the rest of the transport: transport.test.ts).
 */
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { readFileSync } from "node:fs";
import { ApiError, createClient, nextLink, retryAfterMs } from "../../../packages/client/src/index";
import { createApiKey } from "../../../src/auth/api-keys";
import { startSdkStack, type SdkStack } from "../../../testkit/sdk-stack";
import { fetchDocument, GENERATED_FILE, renderClientTypes } from "../../../scripts/generate-client";
import { Value } from "@sinclair/typebox/value";
import { eventSchema } from "../../../src/http/features/docs/webhooks";

let stack: SdkStack;
let apiKey: string;

beforeAll(async () => {
  stack = await startSdkStack(["alice", "bob", "carol"]);
  apiKey = (await createApiKey(stack.service.db.sql, { merchant: stack.merchant, label: "client test" })).key;
}, 60_000);

afterAll(async () => {
  await stack?.stop();
}, 30_000);

describe("generated types", () => {
  test("the committed file is what openapi-typescript produces from the running app's /docs/json", async () => {
    const fresh = await renderClientTypes(await fetchDocument(stack.url));
    expect(fresh).toContain("valid_until: string | null;");
    expect(readFileSync(GENERATED_FILE, "utf8")).toBe(fresh);
  });
});

describe("typed calls against the service", () => {
  test("the public check, typed, with valid_until", async () => {
    const client = createClient({ baseUrl: stack.url });
    const { data, response } = await client.GET("/v0/auth/check", {
      params: { query: { module_address: stack.module, wallet: stack.chain.address("alice"), plan_ids: "7,8" } },
    });
    expect(response.status).toBe(200);
    expect(data!.authorized).toBe(true);
    expect(data!.indexed!.matching_plan_ids).toEqual(["7"]);
    expect(data!.indexed!.valid_until).toBe(
      new Date(Number(stack.chargedAt.get("alice")! + 3_601n) * 1000).toISOString(),
    );
  });

  test("errors are one ApiError carrying the envelope and the status", async () => {
    const anonymous = createClient({ baseUrl: stack.url });
    const err401 = await anonymous
      .GET("/v0/activity/{merchant}", { params: { path: { merchant: stack.merchant } } })
      .catch((e) => e);
    expect(err401).toBeInstanceOf(ApiError);
    expect(err401).toMatchObject({ status: 401, type: "authentication_error", code: "unauthenticated" });
    expect(err401.requestId).toMatch(/^req_[0-9a-f]{32}$/);

    const client = createClient({ baseUrl: stack.url, apiKey });
    const err400 = await client
      .GET("/v0/activity/{merchant}", { params: { path: { merchant: stack.merchant }, query: { limit: 0 } } })
      .catch((e) => e);
    expect(err400).toBeInstanceOf(ApiError);
    expect(err400).toMatchObject({
      status: 400,
      type: "invalid_request_error",
      code: "invalid_parameter",
      param: "limit",
    });
    expect(err400.message).toContain("limit");
  });

  test("paginate follows Link page after page and yields every element once, in order", async () => {
    const client = createClient({ baseUrl: stack.url, apiKey });
    const path = { merchant: stack.merchant };
    const { data: all } = await client.GET("/v0/activity/{merchant}", { params: { path } });
    expect(all!.length).toBe(3);
    const seen: string[] = [];
    for await (const row of client.paginate("/v0/activity/{merchant}", { params: { path, query: { limit: 1 } } })) {
      seen.push(row.event_id);
    }
    expect(seen).toEqual(all!.map((r) => r.event_id));
    const desc: string[] = [];
    const pages = client.paginate("/v0/activity/{merchant}", { params: { path, query: { limit: 2, order: "desc" } } });
    for await (const row of pages) desc.push(row.event_id);
    expect(desc).toEqual([...seen].reverse());
  });
});

describe("the webhooks section agrees with the indexer", () => {
  test("every event the indexer wrote for the merchant has the payload schema its type documents", async () => {
    const client = createClient({ baseUrl: stack.url, apiKey });
    const { data: events } = await client.GET("/v0/events/{merchant}", {
      params: { path: { merchant: stack.merchant } },
    });
    const types = new Set(events!.map((e) => e.type));
    expect(types).toContain("charge.succeeded");
    expect(types).toContain("subscription.created");
    expect(types).toContain("subscription.status_changed");
    for (const e of events!) {
      const schema = eventSchema(e.type);
      expect(
        [...Value.Errors(schema, e)].map((x) => `${x.path}: ${x.message}`),
        `${e.type} ${e.id}`,
      ).toEqual([]);
    }
  });
});

/** A real local server answering each request with the next of `answers` (the last one repeats). */
function scripted(answers: { status: number; headers?: Record<string, string> }[]) {
  const seen: { at: number; body: string }[] = [];
  const server = Bun.serve({
    port: 0,
    hostname: "127.0.0.1",
    async fetch(req) {
      seen.push({ at: performance.now(), body: await req.text() });
      const a = answers[Math.min(seen.length - 1, answers.length - 1)]!;
      const body =
        a.status === 200
          ? []
          : { error: { type: "rate_limit_error", code: "rate_limited", message: "slow down", request_id: "req_x" } };
      return Response.json(body, { status: a.status, headers: a.headers });
    },
  });
  return { url: `http://127.0.0.1:${server.port}`, seen, stop: () => server.stop(true) };
}

describe("retries", () => {
  const list = (baseUrl: string, retry?: { maxRetries?: number; maxDelayMs?: number }) =>
    createClient({ baseUrl, apiKey: "sk_live_x", retry }).GET("/v0/activity/{merchant}", {
      params: { path: { merchant: "0x" + "1".repeat(40) } },
    });

  test("429 then 200: retried after Retry-After", async () => {
    const s = scripted([{ status: 429, headers: { "retry-after": "1" } }, { status: 200 }]);
    const started = performance.now();
    const { data } = await list(s.url);
    expect(data).toEqual([]);
    expect(s.seen.length).toBe(2);
    expect(s.seen[1]!.at - s.seen[0]!.at).toBeGreaterThanOrEqual(990);
    expect(performance.now() - started).toBeLessThan(3_000);
    s.stop();
  });

  test("503 without Retry-After: retried after a short backoff; a POST (with its Idempotency-Key) is sent again with its body", async () => {
    const s = scripted([{ status: 503 }, { status: 200 }]);
    const client = createClient({ baseUrl: s.url, apiKey: "sk_live_x" });
    await client.POST("/v0/webhook_endpoints/{merchant}", {
      params: { path: { merchant: "0x" + "1".repeat(40) } },
      body: { url: "https://example.com/hook" },
    });
    expect(s.seen.length).toBe(2);
    // 500 ms jittered to 50–100 %.
    expect(s.seen[1]!.at - s.seen[0]!.at).toBeGreaterThanOrEqual(240);
    expect(JSON.parse(s.seen[1]!.body)).toEqual({ url: "https://example.com/hook" });
    s.stop();
  });

  test("bounded: maxRetries, then the 429 is thrown; a Retry-After beyond maxDelayMs is not waited for", async () => {
    const always = scripted([{ status: 429, headers: { "retry-after": "0" } }]);
    const err = await list(always.url, { maxRetries: 2 }).catch((e) => e);
    expect(err).toBeInstanceOf(ApiError);
    expect(err).toMatchObject({ status: 429, code: "rate_limited", requestId: "req_x" });
    expect(always.seen.length).toBe(3);
    always.stop();
    const long = scripted([{ status: 429, headers: { "retry-after": "3600" } }, { status: 200 }]);
    const started = performance.now();
    expect(await list(long.url, { maxDelayMs: 10_000 }).catch((e) => e)).toBeInstanceOf(ApiError);
    expect(long.seen.length).toBe(1);
    expect(performance.now() - started).toBeLessThan(1_000);
    long.stop();
  });

  test("Retry-After as seconds or an HTTP date; Link parsing", () => {
    expect(retryAfterMs("2")).toBe(2_000);
    expect(retryAfterMs(new Date(10_000).toUTCString(), 4_000)).toBe(6_000);
    expect(retryAfterMs("soon")).toBeUndefined();
    expect(retryAfterMs(null)).toBeUndefined();
    expect(nextLink('<https://a.example/v0/x?limit=1&starting_after=e1>; rel="next"')?.search).toBe(
      "?limit=1&starting_after=e1",
    );
    expect(nextLink('<https://a.example/v0/x?p=1>; rel="prev"')).toBeUndefined();
    expect(nextLink(null)).toBeUndefined();
  });
});
