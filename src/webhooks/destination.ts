/**
 * Where deliveries may go (webhooks.md §4): `https://` only, never a loopback, private, link-local, unique-local,
 * carrier-grade NAT, multicast, unspecified or metadata address, checked on the URL and again after DNS resolution
 * on every attempt. An IPv6 address is read as its 16 bytes: one that carries an IPv4 address (mapped, compatible,
 * NAT64, 6to4) is judged by that address, whatever its spelling. `allowPrivate` (WEBHOOK_ALLOW_PRIVATE_URLS=1) lifts
 * both rules.
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
  return v4NumberBlocked(ip.split(".").reduce((acc, part) => (acc << 8) + Number(part), 0) >>> 0);
}

function v4NumberBlocked(n: number): boolean {
  return V4_BLOCKED.some(([net, bits]) => n >>> (32 - bits) === net >>> (32 - bits));
}

/** The 16 bytes of an IPv6 literal (`::` shorthand, an IPv4 tail and a zone allowed), or undefined when malformed. */
export function parseIpv6(ip: string): Uint8Array | undefined {
  let text = ip
    .replace(/^\[|\]$/g, "")
    .replace(/%.*$/, "")
    .toLowerCase();
  const tail = /^(.*:)(\d{1,3})\.(\d{1,3})\.(\d{1,3})\.(\d{1,3})$/.exec(text);
  if (tail) {
    const v4 = tail.slice(2).map(Number);
    if (v4.some((b) => b > 255)) return undefined;
    text = `${tail[1]}${((v4[0]! << 8) | v4[1]!).toString(16)}:${((v4[2]! << 8) | v4[3]!).toString(16)}`;
  }
  const halves = text.split("::");
  if (halves.length > 2) return undefined;
  const groups = (part: string) => (part === "" ? [] : part.split(":"));
  const head = groups(halves[0]!);
  const rest = halves.length === 2 ? groups(halves[1]!) : [];
  const missing = 8 - head.length - rest.length;
  if (halves.length === 2 ? missing < 1 : missing !== 0) return undefined;
  const all = [...head, ...Array<string>(halves.length === 2 ? missing : 0).fill("0"), ...rest];
  const bytes = new Uint8Array(16);
  for (let i = 0; i < 8; i++) {
    if (!/^[0-9a-f]{1,4}$/.test(all[i]!)) return undefined;
    const g = parseInt(all[i]!, 16);
    bytes[2 * i] = g >> 8;
    bytes[2 * i + 1] = g & 0xff;
  }
  return bytes;
}

/** Whether the first `bits` bits of `a` are those of `prefix` (bytes, most significant first). */
function within(a: Uint8Array, prefix: number[], bits: number): boolean {
  for (let i = 0; i < bits; i++) {
    const byte = i >> 3;
    const mask = 0x80 >> (i & 7);
    if ((a[byte]! & mask) !== ((prefix[byte] ?? 0) & mask)) return false;
  }
  return true;
}

/** IPv6 ranges refused outright: prefix bytes and length. */
const V6_BLOCKED: [number[], number][] = [
  [[0xfe, 0x80], 10], // fe80::/10 link-local
  [[0xfe, 0xc0], 10], // fec0::/10 site-local (deprecated)
  [[0xfc], 7], // fc00::/7 unique local
  [[0xff], 8], // ff00::/8 multicast
  [[0x20, 0x01, 0x0d, 0xb8], 32], // 2001:db8::/32 documentation
  [[0x20, 0x01, 0x00, 0x00], 32], // 2001::/32 Teredo: the IPv4 behind it is obfuscated, and the protocol is obsolete
  [[0x00, 0x64, 0xff, 0x9b, 0x00, 0x01], 48], // 64:ff9b:1::/48 local-use NAT64 (RFC 8215): a local network's own
  [[0x01, 0x00, 0, 0, 0, 0, 0, 0], 64], // 100::/64 discard-only
];

/** The IPv4 address an IPv6 address stands for (mapped, compatible, translated, NAT64, 6to4), or undefined. */
function embeddedV4(a: Uint8Array): number | undefined {
  const v4At = (i: number) => ((a[i]! << 24) | (a[i + 1]! << 16) | (a[i + 2]! << 8) | a[i + 3]!) >>> 0;
  // ::ffff:0:0/96 IPv4-mapped and ::/96 IPv4-compatible (:: and ::1 among them: 0.0.0.0/8, refused).
  if (within(a, [], 80) && a[10] === a[11] && (a[10] === 0 || a[10] === 0xff)) return v4At(12);
  // ::ffff:0:0:0/96 IPv4-translated (SIIT).
  if (within(a, [], 64) && a[8] === 0xff && a[9] === 0xff && a[10] === 0 && a[11] === 0) return v4At(12);
  if (within(a, [0x00, 0x64, 0xff, 0x9b], 96)) return v4At(12); // 64:ff9b::/96 NAT64 (well-known prefix)
  if (within(a, [0x20, 0x02], 16)) return v4At(2); // 2002::/16 6to4: the IPv4 address in bits 16–48
  return undefined;
}

/** IPv6: an embedded IPv4 address decides; else the ranges above, and anything outside global unicast, are refused. */
function v6Blocked(ip: string): boolean {
  const a = parseIpv6(ip);
  if (!a) return true;
  const v4 = embeddedV4(a);
  if (v4 !== undefined) return v4NumberBlocked(v4);
  if (V6_BLOCKED.some(([prefix, bits]) => within(a, prefix, bits))) return true;
  // Everything else outside 2000::/3, the global unicast space, is reserved, special-purpose or unassigned.
  return !within(a, [0x20], 3);
}

/** Whether an IP address literal (IPv6 in or out of brackets, with or without a zone) is one deliveries never go to. */
export function isBlockedAddress(ip: string): boolean {
  const bare = ip.replace(/^\[|\]$/g, "");
  const kind = isIP(bare);
  if (kind === 4) return v4Blocked(bare);
  if (kind === 6) return v6Blocked(bare);
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

/** A resolver: every address of a host name, in the order to use them (`dns.lookup` with `all`). */
export type Lookup = (host: string) => Promise<{ address: string }[]>;

const systemLookup: Lookup = (host) => lookup(host, { all: true, verbatim: true });

/** A destination that passed the check: its URL, and the address to connect to (the one checked). */
export type Destination = { url: URL; address: string };

/**
 * Resolves the URL's host once and checks every address it resolves to (throws UnsafeDestinationError). The caller
 * connects to the returned address: resolving the name again could answer differently (DNS rebinding).
 */
export async function resolveDestination(
  raw: string,
  allowPrivate: boolean,
  resolve: Lookup = systemLookup,
): Promise<Destination> {
  const url = checkUrl(raw, allowPrivate);
  const host = url.hostname.replace(/^\[|\]$/g, "");
  const addresses = isIP(host) ? [{ address: host }] : await resolve(host);
  if (addresses.length === 0) throw new UnsafeDestinationError(`${host} does not resolve`);
  if (!allowPrivate) {
    for (const a of addresses) {
      if (isBlockedAddress(a.address)) {
        // The address is not named: the error reaches the caller (a 400, the delivery log), and what an internal
        // name resolves to is the network's map, not the merchant's business.
        throw new UnsafeDestinationError(`${host} resolves to a private address`);
      }
    }
  }
  return { url, address: addresses[0]!.address };
}
