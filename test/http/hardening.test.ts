/**
 * The API's hardening on a real listener (Bun.serve through app.listen, real sockets): client addresses for rate
 * limits, request body limits, SIWE sessions bound to their chain and single-try nonces, failed credentials counted
 * against the rate limit, Cache-Control on credentialed answers, unexpected errors through the logger, malformed
 * notifications.
 */
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { Elysia } from "elysia";
import { createApp } from "../../src/http/app";
import { createErrorHandler } from "../../src/http/plugins/error-handler";
import { clientAddress, createRateLimiter, MAX_CLIENT_KEY_LENGTH } from "../../src/http/rate-limit";
import { createChainRegistry } from "../../src/chain/clients";
import { createNotifier, parseBatch } from "../../src/db/notify";
import { createLogger } from "../../src/common/log";
import { accounts } from "../../testkit/accounts";
import { ADMIN_KEY, startSeededApp, testConfig, type SeededApp } from "../../testkit/app";
import { testDbKind } from "../../testkit/db";
import { CHAIN_B, M1, MOD, W } from "../../testkit/seed";
import { siweMessage } from "../../testkit/siwe";

let s: SeededApp;
const servers: { stop: () => Promise<unknown> }[] = [];

/** The real app over the seeded database, listening on a random loopback port; returns its base URL. */
async function serve(env: Record<string, string> = {}): Promise<string> {
  const config = testConfig(env);
  const app = createApp({ sql: s.db.sql, config, chains: await createChainRegistry(config), log: () => {} });
  app.listen({ hostname: "127.0.0.1", port: 0 });
  servers.push({ stop: () => app.stop(true) });
  return `http://127.0.0.1:${app.server!.port}`;
}

beforeAll(async () => {
  s = await startSeededApp();
}, 60_000);

afterAll(async () => {
  for (const server of servers) await server.stop().catch(() => {});
  await s?.close();
});

const checkPath = `/v0/auth/check?module_address=${MOD.a1}&wallet=${W.alice}&plan_ids=1`;

describe("client address of the rate limit", () => {
  test("by default the socket address: a made-up X-Forwarded-For gets no fresh bucket", async () => {
    const base = await serve({ RATE_LIMIT_PER_MINUTE: "2" });
    const statuses: number[] = [];
    for (const ip of ["203.0.113.1", "203.0.113.2", "203.0.113.3"]) {
      statuses.push((await fetch(base + checkPath, { headers: { "x-forwarded-for": ip } })).status);
    }
    expect(statuses).toEqual([200, 200, 429]);
  });

  test("TRUSTED_PROXY_HOPS=1: the rightmost X-Forwarded-For entry, whatever the client wrote before it", async () => {
    const base = await serve({ RATE_LIMIT_PER_MINUTE: "2", TRUSTED_PROXY_HOPS: "1" });
    const from = (xff: string) => fetch(base + checkPath, { headers: { "x-forwarded-for": xff } });
    expect((await from("1.1.1.1, 198.51.100.7")).status).toBe(200);
    expect((await from("2.2.2.2, 198.51.100.7")).status).toBe(200);
    const limited = await from("3.3.3.3, 198.51.100.7");
    expect(limited.status).toBe(429);
    expect((await limited.json()).error.code).toBe("rate_limited");
    expect((await from("198.51.100.8")).status).toBe(200);
  });

  test("CLIENT_IP_HEADER: that header names the client; X-Forwarded-For is ignored; long values are cut", async () => {
    const base = await serve({ RATE_LIMIT_PER_MINUTE: "2", CLIENT_IP_HEADER: "Fly-Client-IP" });
    const from = (ip: string, xff = "9.9.9.9") =>
      fetch(base + checkPath, { headers: { "fly-client-ip": ip, "x-forwarded-for": xff } });
    expect((await from("192.0.2.1", "1.1.1.1")).status).toBe(200);
    expect((await from("192.0.2.1", "2.2.2.2")).status).toBe(200);
    expect((await from("192.0.2.1", "3.3.3.3")).status).toBe(429);
    expect((await from("192.0.2.2")).status).toBe(200);
    // Values that differ only past the key length share one bucket.
    const long = "a".repeat(MAX_CLIENT_KEY_LENGTH);
    expect((await from(`${long}1`)).status).toBe(200);
    expect((await from(`${long}2`)).status).toBe(200);
    expect((await from(`${long}3`)).status).toBe(429);
  });

  test("the key is cut to MAX_CLIENT_KEY_LENGTH and the store never holds more than maxKeys clients", () => {
    const req = (xff: string) => new Request("http://localhost/", { headers: { "x-forwarded-for": xff } });
    expect(clientAddress(req("x".repeat(5000)), null, { trustedProxyHops: 1 })).toHaveLength(MAX_CLIENT_KEY_LENGTH);
    expect(clientAddress(req("a, b, c"), null, { trustedProxyHops: 2 })).toBe("b");
    expect(clientAddress(req("a, b"), null, { trustedProxyHops: 5 })).toBe("a");
    expect(clientAddress(req("a"), null, {})).toBe("unknown");
    const limiter = createRateLimiter({ perMinute: 10, maxKeys: 50 });
    for (let i = 0; i < 10_000; i++) limiter.check(`client-${i}`);
    expect(limiter.size()).toBe(50);
  });
});

/**
 * A POST of `size` bytes over a raw socket (declared length, or chunked), reusing one small buffer; only the first
 * `send` bytes of the body are sent (all by default), and sending stops once an answer arrives.
 */
async function rawPost(base: string, path: string, size: number, chunked: boolean, send = size) {
  const { hostname, port } = new URL(base);
  const chunk = new Uint8Array(64 * 1024).fill(0x7b);
  let response = "";
  let resolveDone: () => void;
  const done = new Promise<void>((r) => (resolveDone = r));
  const socket = await Bun.connect({
    hostname,
    port: Number(port),
    socket: {
      data(_s, data) {
        response += data.toString();
      },
      close() {
        resolveDone();
      },
      error() {
        resolveDone();
      },
    },
  });
  const length = chunked ? "Transfer-Encoding: chunked" : `Content-Length: ${size}`;
  socket.write(`POST ${path} HTTP/1.1\r\nHost: ${hostname}\r\nContent-Type: application/json\r\n${length}\r\n\r\n`);
  for (let sent = 0; sent < send && !response; sent += chunk.length) {
    if (chunked) socket.write(`${chunk.length.toString(16)}\r\n`);
    socket.write(chunk);
    if (chunked) socket.write("\r\n");
    await Bun.sleep(0);
  }
  const deadline = Date.now() + 10_000;
  while (!response.includes("}}") && Date.now() < deadline) await Bun.sleep(5);
  socket.end();
  await Promise.race([done, Bun.sleep(1000)]);
  const status = Number(/^HTTP\/1\.1 (\d{3})/.exec(response)?.[1]);
  const body = response.slice(response.indexOf("{"));
  return { status, body: body ? JSON.parse(body.slice(0, body.lastIndexOf("}") + 1)) : null };
}

describe("request bodies", () => {
  // Memory while such posts arrive is measured by `bun run bench/memory.ts`, not asserted here.
  test("10 MB posts are a 413 body_too_large envelope, refused on their headers before a body byte is read", async () => {
    const base = await serve();
    for (let i = 0; i < 3; i++) {
      // Headers only: a server that waited for the declared 10 MB would never answer.
      const res = await rawPost(base, "/v0/siwe/verify", 10_000_000, false, 0);
      expect(res.status).toBe(413);
      expect(res.body.error).toMatchObject({ type: "invalid_request_error", code: "body_too_large", param: "body" });
      expect(res.body.error.request_id).toMatch(/^req_/);
    }
  }, 60_000);

  test("a chunked body is cut as soon as it passes the limit, with the same envelope", async () => {
    const base = await serve();
    const res = await rawPost(base, "/v0/siwe/verify", 10_000_000, true);
    expect(res.status).toBe(413);
    expect(res.body.error.code).toBe("body_too_large");
  }, 30_000);

  test("a body within the limit is read and checked as before", async () => {
    const base = await serve();
    const res = await fetch(`${base}/v0/siwe/verify`, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify({ message: "x".repeat(9000), signature: "0x00" }),
    });
    expect(res.status).toBe(400);
    expect((await res.json()).error).toMatchObject({ code: "invalid_parameter", param: "message" });
  });
});

describe("credentials", () => {
  test("credentialed answers carry Cache-Control: private, no-store", async () => {
    const base = await serve();
    const res = await fetch(`${base}/v0/activity/${M1}?limit=1`, { headers: { authorization: `Bearer ${ADMIN_KEY}` } });
    expect(res.status).toBe(200);
    expect(res.headers.get("cache-control")).toBe("private, no-store");
    const sub = await fetch(`${base}/v0/subscriptions/${M1}`, { headers: { authorization: `Bearer ${ADMIN_KEY}` } });
    expect(sub.headers.get("cache-control")).toBe("private, no-store");
  });

  test("refused credentials count against the client's rate limit: key guessing is limited", async () => {
    const base = await serve({ RATE_LIMIT_PER_MINUTE: "3" });
    const read = (key: string) => fetch(`${base}/v0/activity/${M1}`, { headers: { authorization: `Bearer ${key}` } });
    for (let i = 0; i < 3; i++) expect((await read(`sk_live_guess${i}`)).status).toBe(401);
    const limited = await read(ADMIN_KEY);
    expect(limited.status).toBe(429);
    expect(Number(limited.headers.get("retry-after"))).toBeGreaterThanOrEqual(1);
    // Valid credentials spend nothing: another client reads on and on.
    const other = await serve({ RATE_LIMIT_PER_MINUTE: "3" });
    for (let i = 0; i < 6; i++) {
      const ok = await fetch(`${other}/v0/activity/${M1}?limit=1`, {
        headers: { authorization: `Bearer ${ADMIN_KEY}` },
      });
      expect(ok.status).toBe(200);
    }
  });

  test("a SIWE session reads only the chain it was signed for; a nonce is spent by its first attempt", async () => {
    const base = await serve();
    const post = (body: unknown) =>
      fetch(`${base}/v0/siwe/verify`, {
        method: "POST",
        headers: { "content-type": "application/json" },
        body: JSON.stringify(body),
      });
    const nonce = async () => ((await (await fetch(`${base}/v0/siwe/nonce`)).json()) as { nonce: string }).nonce;
    const account = accounts.merchant;
    const message = siweMessage({ nonce: await nonce(), address: account.address });
    const wrong = await post({ message, signature: await accounts.bob.signMessage({ message }) });
    expect(wrong.status).toBe(401);
    const retried = await post({ message, signature: await account.signMessage({ message }) });
    expect(retried.status).toBe(401);
    expect((await retried.json()).error.message).toContain("nonce");

    const fresh = siweMessage({ nonce: await nonce(), address: account.address });
    const signedIn = await post({ message: fresh, signature: await account.signMessage({ message: fresh }) });
    expect(signedIn.status).toBe(200);
    const { token } = (await signedIn.json()) as { token: string };
    const read = (query: string) =>
      fetch(`${base}/v0/activity/${M1}${query}`, { headers: { authorization: `Bearer ${token}` } });
    expect((await read("?limit=1")).status).toBe(200);
    expect((await read("?chain_id=31337&limit=1")).status).toBe(200);
    const other = await read(`?chain_id=${CHAIN_B}`);
    expect(other.status).toBe(403);
    expect((await other.json()).error).toMatchObject({ code: "forbidden", type: "permission_error" });
  });

  test("the message's domain is SIWE_DOMAIN, whatever Host the request carries", async () => {
    const base = await serve({ SIWE_DOMAIN: "api.example.com" });
    const n = ((await (await fetch(`${base}/v0/siwe/nonce`)).json()) as { nonce: string }).nonce;
    const message = siweMessage({ nonce: n, address: accounts.alice.address, domain: "evil.example" });
    const res = await fetch(`${base}/v0/siwe/verify`, {
      method: "POST",
      headers: { "content-type": "application/json", host: "evil.example" },
      body: JSON.stringify({ message, signature: await accounts.alice.signMessage({ message }) }),
    });
    expect(res.status).toBe(401);
    expect((await res.json()).error.message).toContain("api.example.com");
  });
});

describe("unexpected errors and notifications", () => {
  test("an unexpected error is one logger line without a stack, nothing on stderr, a 500 envelope", async () => {
    const lines: string[] = [];
    const stderr: string[] = [];
    const original = console.error;
    console.error = (...args: unknown[]) => void stderr.push(args.map(String).join(" "));
    const app = new Elysia()
      .use(createErrorHandler(createLogger("info", (l) => lines.push(l))))
      .get("/boom", () => {
        throw new Error("kaboom detail");
      })
      .listen({ hostname: "127.0.0.1", port: 0 });
    try {
      const res = await fetch(`http://127.0.0.1:${app.server!.port}/boom`);
      expect(res.status).toBe(500);
      expect((await res.json()).error).toMatchObject({ code: "internal_error" });
      expect(stderr).toEqual([]);
      expect(lines).toHaveLength(1);
      const line = JSON.parse(lines[0]!);
      expect(line).toMatchObject({ level: "error", msg: "unhandled error", path: "/boom", err: "kaboom detail" });
      expect(lines[0]).not.toContain("    at ");
    } finally {
      console.error = original;
      await app.stop(true);
    }
  });

  test("a malformed NOTIFY payload is logged and dropped; the listener keeps working (that half: Postgres only)", async () => {
    const lines: string[] = [];
    const log = createLogger("info", (l) => lines.push(l));
    expect(parseBatch("not json", log)).toBeNull();
    expect(parseBatch('{"chainId":"x"}', log)).toBeNull();
    expect(parseBatch("null", log)).toBeNull();
    expect(parseBatch('{"chainId":1,"fromBlock":"1","toBlock":"2","reorg":false}', log)).toEqual({
      chainId: 1,
      fromBlock: "1",
      toBlock: "2",
      reorg: false,
    });
    expect(lines.length).toBe(3);
    if (testDbKind !== "postgres") return; // NOTIFY does not cross PGlite's socket: only the parser applies there
    const notifier = createNotifier(s.db, log);
    const got: unknown[] = [];
    const unsubscribe = await notifier.subscribe((b) => got.push(b));
    await s.db.sql.notify("indexed_batch", "{broken");
    await notifier.publish({ chainId: 7, fromBlock: "1", toBlock: "2", reorg: false });
    const deadline = Date.now() + 5000;
    while (got.length === 0 && Date.now() < deadline) await Bun.sleep(20);
    await unsubscribe();
    expect(got).toEqual([{ chainId: 7, fromBlock: "1", toBlock: "2", reorg: false }]);
    expect(lines.some((l) => l.includes("malformed notification"))).toBe(true);
  });
});
