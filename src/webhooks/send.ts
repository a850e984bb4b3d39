/** One delivery attempt: destination check after DNS resolution, signed POST, no redirects, a timeout. */
import { describeError } from "../common/errors";
import { resolveDestination } from "./destination";
import { deliveryHeaders } from "./sign";

/** What one attempt came to. */
export type AttemptResult = { ok: boolean; status: number | null; error: string | null; durationMs: number };

/** Options of an attempt. */
export type SendOptions = { timeoutMs: number; allowPrivate: boolean };

/** POSTs `body` (the event JSON) to `url`, signed with `secrets`; never throws. */
export async function sendAttempt(
  url: string,
  eventId: string,
  body: string,
  secrets: string[],
  opts: SendOptions,
): Promise<AttemptResult> {
  const started = performance.now();
  const done = (ok: boolean, status: number | null, error: string | null): AttemptResult => ({
    ok,
    status,
    error,
    durationMs: Math.round(performance.now() - started),
  });
  try {
    await resolveDestination(url, opts.allowPrivate);
  } catch (err) {
    return done(false, null, describeError(err, 300));
  }
  try {
    const res = await fetch(url, {
      method: "POST",
      headers: deliveryHeaders(eventId, body, secrets),
      body,
      redirect: "manual",
      signal: AbortSignal.timeout(opts.timeoutMs),
    });
    await res.arrayBuffer().catch(() => undefined); // drain, so the connection is reused
    if (res.status >= 200 && res.status < 300) return done(true, res.status, null);
    const why = res.status >= 300 && res.status < 400 ? "redirect (not followed)" : `HTTP ${res.status}`;
    return done(false, res.status, why);
  } catch (err) {
    const e = err as { name?: string };
    const timedOut = e?.name === "TimeoutError" || e?.name === "AbortError";
    return done(false, null, timedOut ? `timeout after ${opts.timeoutMs} ms` : describeError(err, 300));
  }
}
