/**
 * One delivery attempt: the destination resolved once and checked, a signed POST to the checked address (TLS server
 * name, certificate and `Host` stay the URL's host), no redirects, one timeout for the lookup and the request, and at
 * most MAX_RESPONSE_BYTES of the answer read, never decompressed.
 */
import { isIP, isIPv6 } from "node:net";
import { describeError } from "../common/errors";
import { resolveDestination, type Destination, type Lookup } from "./destination";
import { deliveryHeaders } from "./sign";

/**
 * Whether the receiver may have the event after an attempt (webhooks.md §1, "Received"): `delivered` (a 2xx),
 * `rejected` (any other answer), `unknown` (a timeout or a connection lost once the request may have gone out),
 * `not_sent` (refused destination, failed lookup, refused connection or certificate: nothing went out).
 */
export type AttemptOutcome = "delivered" | "rejected" | "unknown" | "not_sent";

/** What one attempt came to. */
export type AttemptResult = {
  ok: boolean;
  outcome: AttemptOutcome;
  status: number | null;
  error: string | null;
  durationMs: number;
};

/** Options of an attempt. */
export type SendOptions = {
  timeoutMs: number;
  allowPrivate: boolean;
  /** The resolver; the system's (`dns.lookup`) by default. */
  lookup?: Lookup;
  /** Root certificates (PEM) trusted instead of the system's, for a private CA. */
  ca?: string;
};

/** The most of a response body ever read; the rest is cancelled unread. */
export const MAX_RESPONSE_BYTES = 64 * 1024;

/** Fetch error codes that mean no connection was made, so no request went out. */
const NOT_SENT_CODES = new Set(["ECONNREFUSED", "ENETUNREACH", "EHOSTUNREACH", "ENOTFOUND", "EADDRNOTAVAIL"]);

/**
 * Whether a failed request surely ended before it went out: a refused connection, or a certificate refused during
 * the handshake. Anything else (a reset, a closed socket) may have come after the receiver read the request.
 */
function failedBeforeSending(err: unknown): boolean {
  const code = String((err as { code?: unknown })?.code ?? "");
  return NOT_SENT_CODES.has(code) || /CERT|TLS|SSL/.test(code);
}

const isTimeout = (err: unknown) => {
  const name = (err as { name?: string })?.name;
  return name === "TimeoutError" || name === "AbortError";
};

/** `p`, or the signal's reason once it aborts first (the work behind `p` then ends unobserved). */
function beforeAbort<T>(p: Promise<T>, signal: AbortSignal): Promise<T> {
  return new Promise<T>((resolve, reject) => {
    const onAbort = () => reject(signal.reason);
    if (signal.aborted) return onAbort();
    signal.addEventListener("abort", onAbort, { once: true });
    p.then(resolve, reject).finally(() => signal.removeEventListener("abort", onAbort));
  });
}

/** The URL with its host replaced by the checked address (an IP literal already is one), or null if it will not take. */
function dialed({ url, address }: Destination): URL | null {
  const target = new URL(url);
  const bare = address.replace(/%.*$/, "");
  target.hostname = isIPv6(bare) ? `[${bare}]` : bare;
  return isIP(target.hostname.replace(/^\[|\]$/g, "")) ? target : null;
}

/** TLS settings: the certificate is checked against the URL's host name, which is also the SNI. */
function tlsFor(url: URL, ca: string | undefined) {
  const host = url.hostname.replace(/^\[|\]$/g, "");
  return { ...(isIP(host) ? {} : { serverName: host }), ...(ca ? { ca } : {}) };
}

/** Reads at most `max` bytes of a response body, then cancels the rest; never throws. */
async function readCapped(res: Response, max: number): Promise<void> {
  const reader = res.body?.getReader();
  if (!reader) return;
  try {
    for (let n = 0; n < max;) {
      const chunk = await reader.read();
      if (chunk.done) return;
      n += chunk.value.byteLength;
    }
  } catch {
    // A body cut off or timed out: the status already decided.
  } finally {
    reader.cancel().catch(() => undefined);
  }
}

/** POSTs `body` (the event JSON) to `url`, signed with `secrets`; never throws. */
export async function sendAttempt(
  url: string,
  eventId: string,
  body: string,
  secrets: string[],
  opts: SendOptions,
): Promise<AttemptResult> {
  const started = performance.now();
  const signal = AbortSignal.timeout(opts.timeoutMs);
  const timeout = `timeout after ${opts.timeoutMs} ms`;
  const done = (outcome: AttemptOutcome, status: number | null, error: string | null): AttemptResult => ({
    ok: outcome === "delivered",
    outcome,
    status,
    error,
    durationMs: Math.round(performance.now() - started),
  });
  let dest: Destination;
  try {
    dest = await beforeAbort(resolveDestination(url, opts.allowPrivate, opts.lookup), signal);
  } catch (err) {
    return done("not_sent", null, isTimeout(err) ? `${timeout} (resolving the host)` : describeError(err, 300));
  }
  const target = dialed(dest);
  if (!target) return done("not_sent", null, `cannot connect to ${dest.address}`);
  let res: Response;
  try {
    res = await fetch(target, {
      method: "POST",
      headers: { ...deliveryHeaders(eventId, body, secrets), host: dest.url.host, "accept-encoding": "identity" },
      body,
      redirect: "manual",
      decompress: false,
      tls: tlsFor(dest.url, opts.ca),
      signal,
    });
  } catch (err) {
    if (isTimeout(err)) return done("unknown", null, timeout);
    return done(failedBeforeSending(err) ? "not_sent" : "unknown", null, describeError(err, 300));
  }
  await readCapped(res, MAX_RESPONSE_BYTES);
  if (res.status >= 200 && res.status < 300) return done("delivered", res.status, null);
  const why = res.status >= 300 && res.status < 400 ? "redirect (not followed)" : `HTTP ${res.status}`;
  return done("rejected", res.status, why);
}
