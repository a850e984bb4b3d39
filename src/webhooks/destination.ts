/**
 * Where deliveries may go (webhooks.md §4): `https://` only, never a loopback, private, link-local, unique-local,
 * carrier-grade NAT, multicast, unspecified or metadata address, checked on the URL and again after DNS resolution
 * on every attempt. `allowPrivate` (WEBHOOK_ALLOW_PRIVATE_URLS=1) lifts both rules.
 */
import { lookup } from "node:dns/promises";
import { isIP } from "node:net";
import { UnsafeDestinationError } from "./errors";

const V4_BLOCKED: [number, number][] = [
  [0x00000000, 8], // 0.0.0.0/8 "this network"
  [0x0a000000, 8], // 10/8
  [0x64400000, 10], // 100.64/10 carrier-grade NAT
  [0x7f000000, 8], // 127/8 loopback
  [0xa9fe0000, 16], // 169.254/16 link-local, cloud metadata
  [0xac100000, 12], // 172.16/12
  [0xc0000000, 24], // 192.0.0/24
  [0xc0a80000, 16], // 192.168/16
  [0xc6120000, 15], // 198.18/15 benchmarking
  [0xe0000000, 3], // multicast and reserved 224/3
];

function v4Blocked(ip: string): boolean {
  const n = ip.split(".").reduce((acc, part) => (acc << 8) + Number(part), 0) >>> 0;
  return V4_BLOCKED.some(([net, bits]) => n >>> (32 - bits) === net >>> (32 - bits));
}

function v6Blocked(ip: string): boolean {
  const a = ip.toLowerCase().replace(/^\[|\]$/g, "");
  const mapped = /^::ffff:(\d+\.\d+\.\d+\.\d+)$/.exec(a);
  if (mapped) return v4Blocked(mapped[1]!);
  if (a === "::" || a === "::1") return true;
  const first = parseInt(a.split(":")[0] || "0", 16);
  return (
    (first & 0xfe00) === 0xfc00 || // fc00::/7 unique local
    (first & 0xffc0) === 0xfe80 || // fe80::/10 link-local
    (first & 0xff00) === 0xff00 || // ff00::/8 multicast
    a.startsWith("64:ff9b:") || // NAT64 of any IPv4
    a.startsWith("2001:db8:") // documentation
  );
}

/** Whether an IP address literal is one deliveries never go to. */
export function isBlockedAddress(ip: string): boolean {
  const kind = isIP(ip.replace(/^\[|\]$/g, ""));
  if (kind === 4) return v4Blocked(ip);
  if (kind === 6) return v6Blocked(ip);
  return true;
}

/** Checks a URL's form: absolute, https (http too when private URLs are allowed), no credentials. */
export function checkUrl(raw: string, allowPrivate: boolean): URL {
  let url: URL;
  try {
    url = new URL(raw);
  } catch {
    throw new UnsafeDestinationError("url must be an absolute URL");
  }
  if (url.protocol !== "https:" && !(allowPrivate && url.protocol === "http:")) {
    throw new UnsafeDestinationError("url must use https://");
  }
  if (url.username || url.password) throw new UnsafeDestinationError("url must not carry credentials");
  const host = url.hostname.replace(/^\[|\]$/g, "");
  if (!allowPrivate) {
    if (isIP(host) && isBlockedAddress(host))
      throw new UnsafeDestinationError(`url points at a private address (${host})`);
    if (host === "localhost" || host.endsWith(".localhost") || host.endsWith(".internal")) {
      throw new UnsafeDestinationError(`url points at a private host (${host})`);
    }
  }
  return url;
}

/** Resolves the URL's host and checks every address it resolves to (throws UnsafeDestinationError). */
export async function resolveDestination(raw: string, allowPrivate: boolean): Promise<void> {
  const url = checkUrl(raw, allowPrivate);
  const host = url.hostname.replace(/^\[|\]$/g, "");
  const addresses = isIP(host) ? [{ address: host }] : await lookup(host, { all: true, verbatim: true });
  if (addresses.length === 0) throw new UnsafeDestinationError(`${host} does not resolve`);
  if (!allowPrivate) {
    for (const a of addresses) {
      if (isBlockedAddress(a.address)) {
        throw new UnsafeDestinationError(`${host} resolves to a private address (${a.address})`);
      }
    }
  }
}
