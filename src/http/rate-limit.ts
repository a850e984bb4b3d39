import type { Server } from "bun";
import { isIPv4, isIPv6 } from "node:net";
import { RateLimitedError } from "./errors";

/** Outcome of one rate-limit check. */
export type RateDecision = { ok: true } | { ok: false; retryAfterSeconds: number };

/** A per-key limiter: `check(key)` counts one request for `key`. */
export type RateLimiter = {
  check: (key: string) => RateDecision;
  /** Whether `check(key)` would pass now, without counting a request. */
  peek: (key: string) => RateDecision;
  size: () => number;
};

/** Options of {@link createRateLimiter}. */
export type RateLimiterOptions = {
  /** Sustained requests per minute per key (the refill rate). */
  perMinute: number;
  /** Bucket size: requests a fresh key may make at once (default `perMinute`). */
  burst?: number;
  /** Most keys tracked at once; beyond it the least recently seen keys are dropped (default 100 000). */
  maxKeys?: number;
  /** Clock in milliseconds (default `Date.now`); injectable for tests. */
  now?: () => number;
};

type Bucket = { tokens: number; at: number };

/**
 * Creates a token-bucket limiter: each key holds up to `burst` tokens, refilled at `perMinute` per minute, and a
 * request spends one. A bucket idle long enough to be full again is forgotten (it behaves exactly like a new key),
 * so memory follows the keys active in the last refill period and never exceeds `maxKeys`.
 */
export function createRateLimiter(opts: RateLimiterOptions): RateLimiter {
  if (!(opts.perMinute > 0)) throw new RangeError(`perMinute must be positive: ${opts.perMinute}`);
  const burst = opts.burst ?? opts.perMinute;
  if (!(burst >= 1)) throw new RangeError(`burst must be at least 1: ${burst}`);
  const maxKeys = opts.maxKeys ?? 100_000;
  const now = opts.now ?? Date.now;
  const perMs = opts.perMinute / 60_000;
  const refillMs = burst / perMs; // an idle bucket is full again after this long
  // Map iteration order is insertion order; a key is re-inserted on each check, so the first keys are the idlest.
  const buckets = new Map<string, Bucket>();
  let lastSweep = now();

  function sweep(t: number): void {
    for (const [key, b] of buckets) {
      if (t - b.at < refillMs) break; // everything after this was seen more recently
      buckets.delete(key);
    }
    lastSweep = t;
  }

  const retryAfter = (tokens: number) => Math.max(1, Math.ceil((1 - tokens) / perMs / 1000));

  return {
    peek(key) {
      const prev = buckets.get(key);
      if (!prev) return { ok: true };
      const tokens = Math.min(burst, prev.tokens + Math.max(0, now() - prev.at) * perMs);
      return tokens >= 1 ? { ok: true } : { ok: false, retryAfterSeconds: retryAfter(tokens) };
    },
    check(key) {
      const t = now();
      if (t - lastSweep >= refillMs || buckets.size >= maxKeys) sweep(t);
      const prev = buckets.get(key);
      let tokens = burst;
      if (prev) {
        tokens = Math.min(burst, prev.tokens + Math.max(0, t - prev.at) * perMs);
        buckets.delete(key);
      } else if (buckets.size >= maxKeys) {
        // Still full after the sweep: drop the least recently seen key.
        buckets.delete(buckets.keys().next().value!);
      }
      if (tokens >= 1) {
        buckets.set(key, { tokens: tokens - 1, at: t });
        return { ok: true };
      }
      buckets.set(key, { tokens, at: t });
      return { ok: false, retryAfterSeconds: retryAfter(tokens) };
    },
    size: () => buckets.size,
  };
}

/** Longest client address kept as a key: an IPv6 address with a zone fits; anything longer is cut. */
export const MAX_CLIENT_KEY_LENGTH = 64;

/** Where the client address of a request comes from (TRUSTED_PROXY_HOPS, CLIENT_IP_HEADER). */
export type ClientAddressOptions = {
  /** Proxies in front of the service that append to X-Forwarded-For; 0: use the socket address. */
  trustedProxyHops?: number;
  /** A header a trusted proxy sets to the client address (e.g. `Fly-Client-IP`); wins over the hop count. */
  clientIpHeader?: string;
};

/**
 * The client address of a request, as a rate-limit key: by default the socket's address (what the client writes in
 * headers is not trusted); with `clientIpHeader` that header; with `trustedProxyHops = N` the N-th address from the
 * right of X-Forwarded-For (the leftmost one when there are fewer), as the N trusted proxies appended them. Cut to
 * MAX_CLIENT_KEY_LENGTH characters.
 */
export function clientAddress(
  request: Request,
  server: Server<unknown> | null | undefined,
  opts: ClientAddressOptions = {},
): string {
  let address: string | undefined;
  if (opts.clientIpHeader) {
    address = request.headers.get(opts.clientIpHeader)?.trim() || undefined;
  } else if (opts.trustedProxyHops) {
    const hops = (request.headers.get("x-forwarded-for") ?? "")
      .split(",")
      .map((h) => h.trim())
      .filter(Boolean);
    if (hops.length) address = hops[Math.max(0, hops.length - opts.trustedProxyHops)];
  }
  if (address === undefined) {
    try {
      address = server?.requestIP(request)?.address ?? "unknown";
    } catch {
      address = "unknown";
    }
  }
  return address.slice(0, MAX_CLIENT_KEY_LENGTH);
}

/**
 * The rate-limit key of a client address: an IPv4 address as it is (an IPv4-mapped IPv6 address, `::ffff:a.b.c.d`,
 * is that IPv4 address), an IPv6 address as its /64 (`2001:db8:1:2::/64`: whoever has one address of a /64 usually
 * has all of it), anything else (a malformed header, `unknown`) as it is, cut to MAX_CLIENT_KEY_LENGTH characters.
 */
export function clientKey(address: string): string {
  let a = address.trim();
  if (a.startsWith("[") && a.endsWith("]")) a = a.slice(1, -1);
  a = a.split("%")[0]!; // a zone (fe80::1%eth0) names an interface of the receiver, not another client
  if (isIPv4(a) || !isIPv6(a)) return address.slice(0, MAX_CLIENT_KEY_LENGTH);
  const groups = ipv6Groups(a);
  if (groups.slice(0, 6).join(",") === "0,0,0,0,0,65535") {
    return [groups[6]! >> 8, groups[6]! & 255, groups[7]! >> 8, groups[7]! & 255].join(".");
  }
  return `${groups
    .slice(0, 4)
    .map((g) => g.toString(16))
    .join(":")}::/64`;
}

/** The eight 16-bit groups of a valid IPv6 address (`::` expanded, a trailing dotted IPv4 as two groups). */
function ipv6Groups(a: string): number[] {
  const dotted = /(\d+)\.(\d+)\.(\d+)\.(\d+)$/.exec(a);
  if (dotted) {
    const [b0, b1, b2, b3] = dotted.slice(1).map(Number) as [number, number, number, number];
    a = `${a.slice(0, dotted.index)}${((b0 << 8) | b1).toString(16)}:${((b2 << 8) | b3).toString(16)}`;
  }
  const [head, tail] = a.split("::") as [string, string | undefined];
  const parse = (s: string) => (s ? s.split(":").map((h) => parseInt(h, 16)) : []);
  const left = parse(head);
  const right = parse(tail ?? "");
  return tail === undefined ? left : [...left, ...new Array(8 - left.length - right.length).fill(0), ...right];
}

/** Client addresses whose rate-limit keys a {@link ClientLimiter} keeps (cleared when full). */
const CLIENT_KEYS_KEPT = 10_000;

/** The one rate-limit store of an app, keyed by client address. */
export type ClientLimiter = {
  /** Counts one request of the client; throws RateLimitedError when its bucket is empty. */
  hit: (request: Request, server: Server<unknown> | null | undefined) => void;
  /** As `hit`, without the error: whether the request was admitted (a refusal counts as `hit`'s does). */
  take: (request: Request, server: Server<unknown> | null | undefined) => boolean;
  /** Throws RateLimitedError when the client's bucket is empty, without counting a request. */
  assertOpen: (request: Request, server: Server<unknown> | null | undefined) => void;
  /** Clients tracked now. */
  size: () => number;
};

/** Creates the store behind the `rateLimit` macro and the failed-credential count. */
export function createClientLimiter(opts: RateLimiterOptions & ClientAddressOptions): ClientLimiter {
  const limiter = createRateLimiter(opts);
  // clientKey is a pure function of the address: the keys of recent addresses are kept, not recomputed per request.
  const keys = new Map<string, string>();
  const key = (request: Request, server: Server<unknown> | null | undefined) => {
    const address = clientAddress(request, server, opts);
    let k = keys.get(address);
    if (k === undefined) {
      k = clientKey(address);
      if (keys.size >= CLIENT_KEYS_KEPT) keys.clear();
      keys.set(address, k);
    }
    return k;
  };
  const refuse = (d: RateDecision) => {
    if (!d.ok) throw new RateLimitedError(d.retryAfterSeconds);
  };
  return {
    hit: (request, server) => refuse(limiter.check(key(request, server))),
    take: (request, server) => limiter.check(key(request, server)).ok,
    assertOpen: (request, server) => refuse(limiter.peek(key(request, server))),
    size: limiter.size,
  };
}

/** A limiter keyed by an identity the caller names (a credential, an endpoint id), never by a client address. */
export type KeyLimiter = {
  /** Counts one request of `key`; throws RateLimitedError (429 with Retry-After) when its bucket is empty. */
  hit: (key: string) => void;
  /** Keys tracked now. */
  size: () => number;
};

/** Creates a {@link KeyLimiter}: a token bucket per key, at most `maxKeys` of them (least recently seen dropped). */
export function createKeyLimiter(opts: RateLimiterOptions): KeyLimiter {
  const limiter = createRateLimiter(opts);
  return {
    hit(key) {
      const d = limiter.check(key);
      if (!d.ok) throw new RateLimitedError(d.retryAfterSeconds);
    },
    size: limiter.size,
  };
}
