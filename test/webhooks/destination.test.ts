/**
 * Destination rules (webhooks.md §4) on addresses: every spelling of a private, loopback, link-local, unique-local or
 * metadata address is refused, IPv6 forms that carry an IPv4 address included, on the URL (creation) and in the send
 * path (every attempt), which connects to nothing it refuses.
 */
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import type { TCPSocketListener } from "bun";
import { checkUrl, isBlockedAddress, parseIpv6, resolveDestination } from "../../src/webhooks/destination";
import { sendAttempt } from "../../src/webhooks/send";

/** IPv6 spellings the rules refuse, with what they are. */
const BLOCKED_V6: [string, string][] = [
  ["::ffff:127.0.0.1", "IPv4-mapped loopback, dotted"],
  ["::ffff:7f00:1", "IPv4-mapped loopback, as WHATWG URL writes it"],
  ["0:0:0:0:0:ffff:7f00:0001", "IPv4-mapped loopback, in full"],
  ["::ffff:a9fe:a9fe", "IPv4-mapped 169.254.169.254 (metadata)"],
  ["::ffff:10.0.0.1", "IPv4-mapped 10/8"],
  ["::ffff:c0a8:101", "IPv4-mapped 192.168.1.1"],
  ["::7f00:1", "IPv4-compatible loopback"],
  ["::a9fe:a9fe", "IPv4-compatible metadata"],
  ["::ffff:0:7f00:1", "IPv4-translated loopback"],
  ["64:ff9b::7f00:1", "NAT64 of loopback"],
  ["64:ff9b::169.254.169.254", "NAT64 of metadata"],
  ["64:ff9b:1::808:808", "local-use NAT64 (64:ff9b:1::/48)"],
  ["2002:7f00:1::", "6to4 of loopback"],
  ["2002:a9fe:a9fe::1", "6to4 of metadata"],
  ["2002:c0a8:0101:1::1", "6to4 of 192.168.1.1"],
  ["2001:0:4136:e378:8000:63bf:3fff:fdd2", "Teredo"],
  ["::1", "loopback"],
  ["0:0:0:0:0:0:0:1", "loopback in full"],
  ["::", "unspecified"],
  ["fe80::1", "link-local"],
  ["fe80::1%eth0", "link-local with a zone"],
  ["febf:ffff::1", "link-local, top of fe80::/10"],
  ["fec0::1", "site-local"],
  ["fc00::1", "unique local"],
  ["fd12:3456:789a::1", "unique local"],
  ["ff02::1", "multicast"],
  ["2001:db8::1", "documentation"],
  ["100::1", "discard-only"],
  ["4000::1", "outside global unicast"],
];

/** IPv6 addresses that stay allowed (global unicast, or an embedded public IPv4). */
const ALLOWED_V6 = [
  "2606:4700:4700::1111",
  "2a00:1450:4001:80b::200e",
  "::ffff:8.8.8.8",
  "::ffff:808:808",
  "64:ff9b::8.8.8.8",
  "2002:808:808::1",
];

describe("isBlockedAddress", () => {
  test("every private IPv6 form is refused, including those carrying a private IPv4 address", () => {
    for (const [ip, what] of BLOCKED_V6) {
      expect(isBlockedAddress(ip), `${ip} (${what})`).toBe(true);
      expect(isBlockedAddress(`[${ip.replace(/%.*$/, "")}]`), `[${ip}]`).toBe(true);
    }
  });

  test("global unicast IPv6 and public IPv4 stay allowed, in any spelling", () => {
    for (const ip of [...ALLOWED_V6, "8.8.8.8", "1.1.1.1"]) expect(isBlockedAddress(ip), ip).toBe(false);
  });

  test("IPv4: private, loopback, link-local, CGNAT and metadata are refused", () => {
    for (const ip of [
      "127.0.0.1",
      "10.1.2.3",
      "172.16.0.1",
      "192.168.1.1",
      "169.254.169.254",
      "100.64.0.1",
      "0.0.0.0",
    ]) {
      expect(isBlockedAddress(ip), ip).toBe(true);
    }
  });

  test("parseIpv6 expands every spelling to the same 16 bytes; malformed input is undefined", () => {
    const hex = (ip: string) => Buffer.from(parseIpv6(ip)!).toString("hex");
    expect(hex("::ffff:127.0.0.1")).toBe("00000000000000000000ffff7f000001");
    expect(hex("::ffff:7f00:1")).toBe(hex("::ffff:127.0.0.1"));
    expect(hex("0:0:0:0:0:ffff:7f00:0001")).toBe(hex("::ffff:127.0.0.1"));
    expect(hex("2001:db8::")).toBe("20010db8000000000000000000000000");
    expect(hex("1:2:3:4:5:6:7:8")).toBe("00010002000300040005000600070008");
    for (const bad of [
      "1::2::3",
      "1:2:3:4:5:6:7:8:9",
      "1:2:3",
      "::ffff:1.2.3.256",
      "12345::",
      "g::1",
      "1:2:3:4:5:6:7::8",
    ]) {
      expect(parseIpv6(bad), bad).toBeUndefined();
    }
  });
});

describe("at creation and on every attempt", () => {
  // A bare TCP listener on loopback: it counts connections, so a refused attempt is seen to connect to nothing.
  let server: TCPSocketListener;
  let connections = 0;
  beforeAll(() => {
    server = Bun.listen({
      hostname: "127.0.0.1",
      port: 0,
      socket: { open: (s) => void (connections++, s.end()), data: () => {} },
    });
  });
  afterAll(() => server?.stop(true));

  const urls = () =>
    BLOCKED_V6.filter(([ip]) => !ip.includes("%")).map(([ip]) => `https://[${ip}]:${server.port}/hook`);

  test("checkUrl and resolveDestination refuse every form, whatever the URL parser made of it", async () => {
    for (const url of urls()) {
      expect(() => checkUrl(url, false), url).toThrow(/private address/);
      await expect(resolveDestination(url, false), url).rejects.toThrow(/private address/);
    }
  });

  test("the send path refuses them before connecting: a failed attempt, no connection made", async () => {
    for (const url of urls()) {
      const r = await sendAttempt(url, "evt_1", "{}", ["whsec_AAAA"], { timeoutMs: 2000, allowPrivate: false });
      expect(r.ok, url).toBe(false);
      expect(r.status).toBeNull();
      expect(r.error ?? "").toContain("private address");
    }
    expect(connections).toBe(0);
  });

  test("WEBHOOK_ALLOW_PRIVATE_URLS lifts the rule (local development)", async () => {
    expect(checkUrl(`https://[::ffff:7f00:1]:${server.port}/hook`, true).hostname).toBe("[::ffff:7f00:1]");
    const before = connections;
    const r = await sendAttempt(`http://[::ffff:7f00:1]:${server.port}/hook`, "evt_1", "{}", ["whsec_AAAA"], {
      timeoutMs: 2000,
      allowPrivate: true,
    });
    expect(r.ok).toBe(false); // the listener hangs up: but it was reached
    expect(connections).toBe(before + 1);
  });
});
