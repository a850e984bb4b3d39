/**
 * The check's hot path: a cache hit answered before routing (an onRequest hook runs for every request, after the
 * body limit's): none of the per-request hooks, query parsing and validation of the route changes what a hit
 * sends. A hook added later that does (a header on every response) fails test/http/features/check-hot.test.ts.
 */
import { Elysia } from "elysia";
import type { Server } from "bun";
import { newRequestId } from "../../plugins/error-handler";
import type { RouteDeps } from "../../deps";
import type { ResponseCache } from "../../cache";
import { rawQuery, type ParseMemo } from "./parse";
import type { CheckEntry } from "./service";

/** The route's path (its template: the label the request metrics give it). */
export const CHECK_PATH = "/v0/auth/check";

/**
 * A plugin answering, before routing, each request the route would answer from the cache (same status, headers and
 * body). Only a query string the route has already parsed and accepted qualifies (the memo holds nothing else), in
 * mode indexed without `min_block`, without an Authorization header (an authenticated check is counted per
 * merchant, by the route), on a servable chain, with a valid entry; then the client's rate limit is spent exactly
 * as the route would (a refusal falls through: the route refuses it again, which spends nothing more), and the hit
 * is counted.
 */
export function hotCheckPlugin(
  deps: RouteDeps,
  cache: ResponseCache<CheckEntry>,
  memo: ParseMemo,
  load: (p: NonNullable<ReturnType<ParseMemo["get"]>>) => ReturnType<Parameters<ResponseCache<CheckEntry>["hit"]>[2]>,
  servable: (p: NonNullable<ReturnType<ParseMemo["get"]>>, e: CheckEntry) => boolean,
) {
  // The listening server (the one `requestIP` asks), as Elysia's context getter would return it.
  let server: Server<unknown> | null = null;

  const hot = (request: Request, path: string): Response | undefined => {
    if (path !== CHECK_PATH || request.method !== "GET") return undefined;
    const raw = rawQuery(request.url);
    if (raw === undefined) return undefined;
    const t0 = deps.observeRequest ? performance.now() : 0;
    const p = memo.get(raw);
    if (!p || p.mode !== "indexed" || p.minBlock !== undefined || request.headers.has("authorization")) {
      return undefined;
    }
    const entry = cache.hit(
      p.key,
      p.q.chainId,
      () => load(p),
      (e) => servable(p, e) && deps.limiter.take(request, server),
    );
    if (!entry) return undefined;
    // The route's response: the entry's body and headers, and the request id its after-handle hook adds.
    const response = new Response(entry.body, { headers: entry.init });
    response.headers.set("x-request-id", newRequestId());
    // An answer from here skips Elysia's after-response hooks: it is counted here, as the metrics plugin would.
    deps.observeRequest?.(CHECK_PATH, "GET", 200, (performance.now() - t0) / 1000);
    return response;
  };

  // Written so that Elysia's source heuristics see a sync hook with a return value (an arrow returning a call
  // would read as async, and every request of the app would then go through an extra promise).
  function hotHook(c: { request: Request }) {
    const response = hot(c.request, (c as unknown as { path: string }).path);
    if (response !== undefined) return response;
  }

  return new Elysia()
    .onStart((app) => {
      server = app.server as Server<unknown> | null;
    })
    .onStop(() => {
      server = null;
    })
    .onRequest(hotHook);
}
