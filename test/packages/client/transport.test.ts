/**
 * The client's transport against real local servers: a timeout per attempt (answer and body), retries with jittered
 * backoff of network errors, timeouts, 429, 502, 503, 504 for idempotent requests and for POSTs with their
 * `Idempotency-Key` (one per call, the same on every attempt, overridable), never for a POST without one, and the
 * typed error classes.
 */
import { afterEach, describe, expect, test } from "bun:test";
import {
  ApiError,
  AuthenticationError,
  backoffMs,
  ConflictError,
  ConnectionError,
  createClient,
  IdempotencyError,
  InvalidRequestError,
  mayRetry,
  NotFoundError,
  PermissionError,
  RateLimitError,
  ServerError,
  TimeoutError,
} from "../../../packages/client/src/index";

const merchant = "0x" + "1".repeat(40);
type Seen = { at: number; method: string; key: string | null; body: string };
const stops: (() => void)[] = [];

afterEach(() => {
  while (stops.length) stops.pop()!();
});

/** A real local server answering the n-th request with `answer(n)`. */
function serve(answer: (n: number, req: Request) => Response | Promise<Response>) {
  const seen: Seen[] = [];
  const server = Bun.serve({
    port: 0,
    hostname: "127.0.0.1",
    idleTimeout: 0,
    async fetch(req) {
      seen.push({
        at: performance.now(),
        method: req.method,
        key: req.headers.get("idempotency-key"),
        body: await req.text(),
      });
      return answer(seen.length, req);
    },
  });
  stops.push(() => server.stop(true));
  return { url: `http://127.0.0.1:${server.port}`, seen };
}

const envelope = (status: number, code: string, headers: Record<string, string> = {}) =>
  Response.json(
    { error: { type: "api_error", code, message: `${code} happened`, request_id: "req_abc" } },
    { status, headers },
  );

const fast = { initialDelayMs: 20 };
const list = (baseUrl: string, extra: Parameters<typeof createClient>[0] = { baseUrl }) =>
  createClient({ apiKey: "sk_live_x", retry: fast, ...extra, baseUrl }).GET("/v0/activity/{merchant}", {
    params: { path: { merchant } },
  });
const createEndpoint = (baseUrl: string, headers?: Record<string, string>, retry = fast) =>
  createClient({ baseUrl, apiKey: "sk_live_x", retry }).POST("/v0/webhook_endpoints/{merchant}", {
    params: { path: { merchant } },
    body: { url: "https://example.com/hook" },
    headers,
  });

describe("retries", () => {
  for (const status of [429, 502, 503, 504]) {
    test(`a GET answered ${status} is retried, then succeeds`, async () => {
      const s = serve((n) => (n === 1 ? envelope(status, "x") : Response.json([])));
      const { data } = await list(s.url);
      expect(data).toEqual([]);
      expect(s.seen.length).toBe(2);
    });
  }

  test("500 and 4xx are not retried", async () => {
    for (const status of [500, 400, 404]) {
      const s = serve(() => envelope(status, "x"));
      expect(await list(s.url).catch((e) => e)).toBeInstanceOf(ApiError);
      expect(s.seen.length).toBe(1);
    }
  });

  test("every POST carries an Idempotency-Key, the same on each attempt, a new one per call", async () => {
    const s = serve((n) => (n % 2 === 1 ? envelope(503, "unavailable") : Response.json({ id: "we_1" })));
    await createEndpoint(s.url);
    await createEndpoint(s.url);
    expect(s.seen.length).toBe(4);
    const keys = s.seen.map((r) => r.key);
    expect(keys[0]).toMatch(/^[0-9a-f-]{36}$/);
    expect(keys[1]).toBe(keys[0]);
    expect(keys[3]).toBe(keys[2]);
    expect(keys[2]).not.toBe(keys[0]);
    expect(JSON.parse(s.seen[1]!.body)).toEqual({ url: "https://example.com/hook" });
    expect(s.seen.every((r) => r.method === "POST")).toBe(true);
  });

  test("a key given by the caller is kept", async () => {
    const s = serve((n) => (n === 1 ? envelope(502, "chain_unavailable") : Response.json({ id: "we_1" })));
    await createEndpoint(s.url, { "Idempotency-Key": "order-42" });
    expect(s.seen.map((r) => r.key)).toEqual(["order-42", "order-42"]);
  });

  test("what may be retried: after a 429 anything; otherwise idempotent methods and POSTs with a key only", () => {
    const bare = new Request("http://x/", { method: "POST" });
    expect(mayRetry(bare, { status: 503 })).toBe(false);
    expect(mayRetry(bare, { status: 0 })).toBe(false);
    expect(mayRetry(bare, { status: 429 })).toBe(true);
    const keyed = new Request("http://x/", { method: "POST", headers: { "Idempotency-Key": "k" } });
    expect(mayRetry(keyed, { status: 503 })).toBe(true);
    expect(mayRetry(keyed, { status: 0 })).toBe(true);
    expect(mayRetry(keyed, { status: 409, code: "idempotency_key_in_use" })).toBe(true);
    expect(mayRetry(new Request("http://x/", { method: "PATCH" }), { status: 502 })).toBe(false);
    expect(mayRetry(new Request("http://x/", { method: "DELETE" }), { status: 502 })).toBe(true);
    expect(mayRetry(new Request("http://x/"), { status: 0 })).toBe(true);
  });

  test("409 idempotency_key_in_use is retried after Retry-After; idempotency_key_reused is thrown at once", async () => {
    const s = serve((n) =>
      n === 1 ? envelope(409, "idempotency_key_in_use", { "retry-after": "1" }) : Response.json({ id: "we_1" }),
    );
    const started = performance.now();
    const { data } = await createEndpoint(s.url);
    expect(data).toEqual({ id: "we_1" } as never);
    expect(s.seen.length).toBe(2);
    expect(s.seen[1]!.at - s.seen[0]!.at).toBeGreaterThanOrEqual(990);
    expect(performance.now() - started).toBeLessThan(3_000);

    const reused = serve(() => envelope(409, "idempotency_key_reused"));
    const err = await createEndpoint(reused.url).catch((e) => e);
    expect(err).toBeInstanceOf(IdempotencyError);
    expect(err.retryable).toBe(false);
    expect(reused.seen.length).toBe(1);
  });

  test("backoff doubles and is jittered between 50 and 100 %", () => {
    expect(backoffMs(0, 500, () => 0)).toBe(250);
    expect(backoffMs(0, 500, () => 1)).toBe(500);
    expect(backoffMs(2, 500, () => 0)).toBe(1000);
    expect(backoffMs(2, 500, () => 1)).toBe(2000);
    const draws = new Set(Array.from({ length: 20 }, () => backoffMs(1, 500)));
    expect(draws.size).toBeGreaterThan(1);
    for (const d of draws) expect(d >= 500 && d <= 1000).toBe(true);
  });

  test("bounded: after maxRetries the last answer is thrown; a Retry-After beyond maxDelayMs is not waited for", async () => {
    const always = serve(() => envelope(429, "rate_limited", { "retry-after": "0" }));
    const err = await list(always.url, { baseUrl: always.url, retry: { maxRetries: 3, initialDelayMs: 1 } }).catch(
      (e) => e,
    );
    expect(err).toBeInstanceOf(RateLimitError);
    expect(err).toMatchObject({ status: 429, code: "rate_limited", requestId: "req_abc", retryAfterSeconds: 0 });
    expect(always.seen.length).toBe(4);
    const long = serve(() => envelope(503, "unavailable", { "retry-after": "3600" }));
    const started = performance.now();
    expect(await list(long.url).catch((e) => e)).toBeInstanceOf(ServerError);
    expect(long.seen.length).toBe(1);
    expect(performance.now() - started).toBeLessThan(1_000);
  });
});

describe("network errors and timeouts", () => {
  test("a connection refused is retried, then thrown as ConnectionError (status 0, retryable)", async () => {
    const s = serve(() => Response.json([]));
    const url = s.url;
    stops.pop()!(); // the port is closed now
    const err = await list(url).catch((e) => e);
    expect(err).toBeInstanceOf(ConnectionError);
    expect(err).toBeInstanceOf(ApiError);
    expect(err).toMatchObject({ status: 0, code: "connection_failed", retryable: true });
  });

  test("a connection closed without an answer is retried and the retry's answer returned", async () => {
    let n = 0;
    // A raw TCP server: the first request's connection is closed unanswered, the next gets a 200.
    const listener = Bun.listen({
      hostname: "127.0.0.1",
      port: 0,
      socket: {
        data(socket) {
          n++;
          if (n > 1) {
            socket.write(
              "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 2\r\nconnection: close\r\n\r\n[]",
            );
          }
          socket.end();
        },
      },
    });
    stops.push(() => listener.stop(true));
    const { data } = await list(`http://127.0.0.1:${listener.port}`);
    expect(data).toEqual([]);
    expect(n).toBe(2);
  });

  test("an answer slower than timeoutMs is a TimeoutError after each attempt's timeout, retried", async () => {
    const s = serve(async (n) => {
      if (n <= 2) await Bun.sleep(600);
      return Response.json([]);
    });
    const started = performance.now();
    const { data } = await list(s.url, { baseUrl: s.url, timeoutMs: 150, retry: fast });
    expect(data).toEqual([]);
    expect(s.seen.length).toBe(3);
    expect(performance.now() - started).toBeLessThan(1_500);

    const slow = serve(async () => {
      await Bun.sleep(600);
      return Response.json([]);
    });
    const err = await list(slow.url, { baseUrl: slow.url, timeoutMs: 100, retry: { maxRetries: 0 } }).catch((e) => e);
    expect(err).toBeInstanceOf(TimeoutError);
    expect(err).toMatchObject({ status: 0, code: "timeout", retryable: true });
  });

  test("a body that stalls past timeoutMs is a TimeoutError too", async () => {
    const s = serve(
      () =>
        new Response(
          new ReadableStream({
            async start(c) {
              c.enqueue(new TextEncoder().encode("[1,"));
              await Bun.sleep(800);
              c.enqueue(new TextEncoder().encode("2]"));
              c.close();
            },
          }),
          { headers: { "content-type": "application/json" } },
        ),
    );
    const started = performance.now();
    const err = await list(s.url, { baseUrl: s.url, timeoutMs: 200, retry: { maxRetries: 0 } }).catch((e) => e);
    expect(err).toBeInstanceOf(TimeoutError);
    expect(performance.now() - started).toBeLessThan(700);
  });

  test("the default timeout is 80 s", async () => {
    const { DEFAULT_TIMEOUT_MS } = await import("../../../packages/client/src/index");
    expect(DEFAULT_TIMEOUT_MS).toBe(80_000);
  });

  test("a caller's abort stops at once and is not retried", async () => {
    const s = serve(async () => {
      await Bun.sleep(2_000);
      return Response.json([]);
    });
    const controller = new AbortController();
    setTimeout(() => controller.abort(), 100);
    const started = performance.now();
    const err = await createClient({ baseUrl: s.url, apiKey: "sk_live_x", retry: fast })
      .GET("/v0/activity/{merchant}", { params: { path: { merchant } }, signal: controller.signal })
      .catch((e) => e);
    expect(err).not.toBeInstanceOf(ApiError);
    expect(performance.now() - started).toBeLessThan(1_000);
    expect(s.seen.length).toBe(1);
  });
});

describe("typed errors", () => {
  test("one class per failure, each with status, code, request id and retryable", async () => {
    const cases: [number, string, new (...a: never[]) => ApiError, boolean][] = [
      [400, "invalid_parameter", InvalidRequestError, false],
      [401, "unauthenticated", AuthenticationError, false],
      [403, "forbidden", PermissionError, false],
      [404, "not_found", NotFoundError, false],
      [409, "event_withdrawn", ConflictError, false],
      [409, "idempotency_key_reused", IdempotencyError, false],
      [429, "rate_limited", RateLimitError, true],
      [500, "internal_error", ServerError, true],
      [502, "chain_unavailable", ServerError, true],
    ];
    for (const [status, code, Class, retryable] of cases) {
      const s = serve(() => envelope(status, code, { "x-request-id": "req_header" }));
      const err = await list(s.url, { baseUrl: s.url, retry: { maxRetries: 0 } }).catch((e) => e);
      expect(err, `${status} ${code}`).toBeInstanceOf(Class);
      expect(err, `${status} ${code}`).toBeInstanceOf(ApiError);
      expect(err).toMatchObject({ status, code, requestId: "req_abc", retryable, message: `${code} happened` });
      expect(err.name).toBe(Class.name);
    }
    expect(new NotFoundError("x", { status: 404, type: "t", code: "c" })).toBeInstanceOf(InvalidRequestError);
  });

  test("an answer that is not JSON (a proxy's page) still gives the status's class and the header's request id", async () => {
    const s = serve(
      () => new Response("<html>Bad gateway</html>", { status: 502, headers: { "x-request-id": "req_proxy" } }),
    );
    const err = await list(s.url, { baseUrl: s.url, retry: { maxRetries: 0 } }).catch((e) => e);
    expect(err).toBeInstanceOf(ServerError);
    expect(err).toMatchObject({ status: 502, code: "http_502", requestId: "req_proxy", type: "api_error" });
  });
});
