/**
 * One attempt against real receivers: what the outcome says about whether the receiver may have the event, a
 * response body that is never decompressed nor read past 64 KiB, and a connection that goes to the address that was
 * checked (TLS name and certificate still the URL's host), within one timeout that covers the lookup.
 */
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import net from "node:net";
import type { Server } from "bun";
import { sendAttempt, type SendOptions } from "../../src/webhooks/send";
import { selfSignedCert } from "../../testkit/webhooks";

const SECRETS = ["whsec_AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA="];
const send = (url: string, opts: Partial<SendOptions> = {}) =>
  sendAttempt(url, "evt_1", '{"id":"evt_1"}', SECRETS, { timeoutMs: 2000, allowPrivate: true, ...opts });

/** Resident memory after a full collection, in MB. */
const rssMb = () => {
  Bun.gc(true);
  return process.memoryUsage().rss / 1e6;
};

describe("the outcome of an attempt", () => {
  const HELD_MS = 10_000;
  let server: Server<undefined>;
  let target: Server<undefined>;
  let targetHits = 0;
  let closer: net.Server;
  let base: string;

  beforeAll(async () => {
    // Where the redirects point: another real server on a private address, which counts what reaches it.
    target = Bun.serve({
      port: 0,
      hostname: "127.0.0.2",
      fetch() {
        targetHits++;
        return new Response("followed");
      },
    });
    server = Bun.serve({
      port: 0,
      hostname: "127.0.0.1",
      async fetch(req) {
        const path = new URL(req.url).pathname;
        if (path === "/slow") await Bun.sleep(HELD_MS);
        const moved = path.match(/^\/moved\/(\d+)$/);
        if (moved) return new Response(null, { status: Number(moved[1]), headers: { location: target.url.href } });
        return new Response("x", { status: path === "/fail" ? 500 : 200 });
      },
    });
    base = `http://127.0.0.1:${server.port}`;
    // Reads the request, then drops the connection without an answer.
    closer = net.createServer((s) => s.on("data", () => s.destroy()));
    await new Promise<void>((resolve) => closer.listen(0, "127.0.0.1", resolve));
  });
  afterAll(() => {
    server?.stop(true);
    target?.stop(true);
    closer?.close();
  });

  test("2xx: delivered; another status: rejected", async () => {
    expect(await send(`${base}/ok`)).toMatchObject({ ok: true, outcome: "delivered", status: 200 });
    expect(await send(`${base}/fail`)).toMatchObject({ ok: false, outcome: "rejected", status: 500 });
  });

  test("a redirect to another server is never followed: rejected, and no request reaches the target", async () => {
    expect(await fetch(target.url).then((r) => r.text())).toBe("followed"); // the target does answer
    const before = targetHits;
    for (const status of [301, 302, 303, 307, 308]) {
      const r = await send(`${base}/moved/${status}`);
      expect(r).toMatchObject({ ok: false, outcome: "rejected", status, error: "redirect (not followed)" });
    }
    expect(targetHits).toBe(before);
  });

  test("a receiver holding its answer far longer than the timeout: the attempt ends at the timeout, unknown", async () => {
    const started = performance.now();
    const slow = await send(`${base}/slow`, { timeoutMs: 300 });
    const took = performance.now() - started;
    expect(slow).toMatchObject({ ok: false, outcome: "unknown", status: null, error: "timeout after 300 ms" });
    expect(took).toBeGreaterThanOrEqual(290);
    expect(took).toBeLessThan(HELD_MS / 5);
    expect(slow.durationMs).toBeGreaterThanOrEqual(290);
    expect(slow.durationMs).toBeLessThan(HELD_MS / 5);
  });

  test("a connection lost after the request went out: unknown", async () => {
    const port = (closer.address() as net.AddressInfo).port;
    expect(await send(`http://127.0.0.1:${port}/`)).toMatchObject({ ok: false, outcome: "unknown" });
  });

  test("a refused destination or a refused connection: not_sent", async () => {
    const refused = await send(`${base}/ok`.replace("127.0.0.1", "localhost"), { allowPrivate: false });
    expect(refused).toMatchObject({ ok: false, outcome: "not_sent", status: null });
    const free = net.createServer();
    await new Promise<void>((resolve) => free.listen(0, "127.0.0.1", resolve));
    const port = (free.address() as net.AddressInfo).port;
    await new Promise((resolve) => free.close(resolve));
    expect(await send(`http://127.0.0.1:${port}/`)).toMatchObject({ ok: false, outcome: "not_sent" });
  });
});

describe("response bodies", () => {
  const INFLATED = 100 * 1024 * 1024;
  const bomb = Bun.gzipSync(new Uint8Array(INFLATED), { level: 9 });
  const chunk = new Uint8Array(64 * 1024).fill(97);
  const acceptEncoding: (string | null)[] = [];
  let server: Server<undefined>;
  let base: string;

  beforeAll(() => {
    server = Bun.serve({
      port: 0,
      hostname: "127.0.0.1",
      fetch(req) {
        acceptEncoding.push(req.headers.get("accept-encoding"));
        if (new URL(req.url).pathname === "/bomb") {
          return new Response(bomb, { headers: { "content-encoding": "gzip", "content-type": "application/json" } });
        }
        return new Response(new ReadableStream({ pull: (c) => c.enqueue(chunk) }));
      },
    });
    base = `http://127.0.0.1:${server.port}`;
  });
  afterAll(() => server?.stop(true));

  test("a gzip bomb is neither asked for nor inflated: the attempt ends at once and memory stays flat", async () => {
    expect(bomb.byteLength).toBeLessThan(INFLATED / 500);
    await send(`${base}/bomb`); // warm up the client
    const before = rssMb();
    const r = await send(`${base}/bomb`, { timeoutMs: 5000 });
    const grew = rssMb() - before;
    expect(r).toMatchObject({ ok: true, outcome: "delivered", status: 200 });
    expect(acceptEncoding.at(-1)).toBe("identity");
    expect(r.durationMs).toBeLessThan(1000);
    expect(grew).toBeLessThan(16);
  });

  test("an endless body is cut off after 64 KiB: the attempt ends at once and memory stays flat", async () => {
    const before = rssMb();
    const r = await send(`${base}/endless`, { timeoutMs: 5000 });
    const grew = rssMb() - before;
    expect(r).toMatchObject({ ok: true, outcome: "delivered", status: 200 });
    expect(r.durationMs).toBeLessThan(1000);
    expect(grew).toBeLessThan(16);
  });
});

describe("DNS rebinding: the connection goes to the checked address", () => {
  const NAME = "hooks.example.test";
  const hooks = selfSignedCert(NAME);
  const other = selfSignedCert("other.example.test");
  const ca = hooks.cert + other.cert;
  const hosts: string[] = [];
  const elsewhere: string[] = [];
  let checked: Server<undefined>;
  let rebound: Server<undefined>;

  beforeAll(() => {
    // The checked address serves `other.example.test` by default and NAME's certificate only when SNI asks for it.
    checked = Bun.serve({
      port: 0,
      hostname: "127.0.0.1",
      tls: [other, { serverName: NAME, ...hooks }],
      fetch(req) {
        hosts.push(req.headers.get("host") ?? "");
        return new Response("ok");
      },
    });
    // What a second lookup would answer: the same port on another address, with a certificate for NAME.
    rebound = Bun.serve({
      port: checked.port,
      hostname: "127.0.0.2",
      tls: hooks,
      fetch(req) {
        elsewhere.push(req.headers.get("host") ?? "");
        return new Response("ok");
      },
    });
  });
  afterAll(() => {
    checked?.stop(true);
    rebound?.stop(true);
  });

  test("a name that answers differently on the next lookup is connected at its checked address, once resolved", async () => {
    let lookups = 0;
    const lookup = async () => [{ address: lookups++ === 0 ? "127.0.0.1" : "127.0.0.2" }];
    const r = await send(`https://${NAME}:${checked.port}/hook`, { lookup, ca });
    expect(r).toMatchObject({ ok: true, outcome: "delivered", status: 200 });
    expect(lookups).toBe(1);
    expect(hosts).toEqual([`${NAME}:${checked.port}`]);
    expect(elsewhere).toEqual([]);
  });

  test("the certificate is checked against the URL's host name, not the address", async () => {
    const lookup = async () => [{ address: "127.0.0.1" }];
    const r = await send(`https://wrong.example.test:${checked.port}/hook`, { lookup, ca });
    expect(r).toMatchObject({ ok: false, outcome: "not_sent", status: null });
    expect(r.error).toMatch(/ALTNAME|certificate/i);
    const untrusted = await send(`https://${NAME}:${checked.port}/hook`, { lookup });
    expect(untrusted).toMatchObject({ ok: false, outcome: "not_sent" });
    expect(hosts).toHaveLength(1);
  });

  test("a resolver slower than the timeout ends the attempt at the timeout", async () => {
    const lookup = async () => {
      await Bun.sleep(5000);
      return [{ address: "127.0.0.1" }];
    };
    const r = await send(`https://${NAME}:${checked.port}/hook`, { lookup, ca, timeoutMs: 300 });
    expect(r).toMatchObject({ ok: false, outcome: "not_sent", status: null });
    expect(r.error).toContain("timeout after 300 ms");
    expect(r.durationMs).toBeGreaterThanOrEqual(290);
    expect(r.durationMs).toBeLessThan(1000);
    expect(hosts).toHaveLength(1);
  });
});
