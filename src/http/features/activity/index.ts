/** `GET /v0/activity/:merchant`, `/v0/payments/:merchant` (CHARGE) and `/v0/failures/:merchant` (FAIL). */
import { Elysia } from "elysia";
import {
  parseAddress,
  parseChainId,
  parseEnum,
  parseEventId,
  parseLimit,
  parseSince,
  parseToken,
  type RawParams,
} from "../../params";
import { authPlugin } from "../../plugins/auth";
import { nextLink } from "../../paging";
import { freshnessHeaders, resolveChain } from "../../chain-state";
import { type RouteDeps } from "../../deps";
import {
  ACTIVITY_TYPES,
  ActivityQueryDoc,
  details,
  MerchantParamsDoc,
  TypedQueryDoc,
  type ActivityType,
} from "./model";
import { ListOverflow, loadActivityPage, streamActivity, type ActivityPage, type ActivityQuery } from "./service";
import type { ResponseCache } from "../../cache";
import { listContentHeaders, parseFormat, type ListFormat } from "../../stream";

/**
 * Cache key of a page: every input of the query, normalized as the query uses it. The token stays as sent (JS and
 * Postgres may lowercase exotic characters differently); JSON keeps free text from running into other fields.
 */
function pageKey(q: ActivityQuery, cursor: ReturnType<typeof parseEventId>, format: ListFormat): string {
  const after = cursor && `${cursor.chainId}:${cursor.txHash}:${cursor.logIndex}`;
  return JSON.stringify([q.chainId, q.merchant, q.type, q.since?.getTime(), q.order, q.limit, after, q.token, format]);
}

/** First word of the CSV attachment name of each route. */
const ROUTE_NAMES = { ALL: "activity", CHARGE: "payments", FAIL: "failures", REFILL: "activity" } as const;

/** Every input of one request, parsed before the credential is checked (a 400 comes first). */
type Input = {
  q: ActivityQuery;
  cursor: ReturnType<typeof parseEventId>;
  format: ListFormat;
  route: keyof typeof ROUTE_NAMES;
};

type Ctx = { request: Request; set: { headers: Record<string, string | number> } };

/**
 * Activity routes. Pages go through `cache` when given, keyed by merchant and normalized query; the credential is
 * checked on every request before the cache is read, and the `Link` header is rebuilt from each request's URL.
 */
export function activityRoutes(deps: RouteDeps, cache?: ResponseCache<ActivityPage>) {
  /** Reads and serializes one page (see loadActivityPage); a list without `limit` longer than a chunk streams. */
  const load = (q: ActivityQuery, cursor: ReturnType<typeof parseEventId>, format: ListFormat) =>
    loadActivityPage(deps, q, cursor, format);

  /** Parses the parameters of the three routes; `fixedType` pins the type of payments and failures. */
  const parse =
    (fixedType?: ActivityType) =>
    (ctx: { params: unknown; query: unknown }): { input: Input } => {
      const params = ctx.params as RawParams;
      const query = ctx.query as RawParams;
      const merchant = parseAddress(params, "merchant");
      const chainId = parseChainId(query, deps.chains.defaultChainId);
      const type = fixedType ?? parseEnum(query, "type", ACTIVITY_TYPES, undefined);
      const limit = parseLimit(query);
      const since = parseSince(query);
      const token = parseToken(query);
      const format = parseFormat(query);
      const order = parseEnum(query, "order", ["asc", "desc"] as const, "asc");
      const cursor = parseEventId(query);
      const q: ActivityQuery = { merchant, chainId, type, since, token, order, limit };
      return { input: { q, cursor, format, route: fixedType ?? "ALL" } };
    };

  /** One handler for the three routes, after `merchantReader` checked the credential. */
  const handler = async (ctx: Ctx) => {
    // Set by the route's `resolve` (Elysia does not carry a route-level resolve into the handler's type).
    const { q, cursor, format, route } = (ctx as Ctx & { input: Input }).input;
    const chainId = q.chainId;
    freshnessHeaders(ctx.set.headers, await resolveChain(deps, chainId));
    const headers = ctx.set.headers;
    const page = await (
      cache
        ? cache.get(pageKey(q, cursor, format), chainId, () => load(q, cursor, format))
        : load(q, cursor, format).then((p) => p.value)
    ).catch((err) => (err instanceof ListOverflow ? err : Promise.reject(err)));
    delete headers["x-indexed-block"];
    delete headers["x-indexed-at"];
    freshnessHeaders(headers, page instanceof ListOverflow ? page.chain : page);
    const filename = `${ROUTE_NAMES[route]}-${q.merchant}-${chainId}.csv`;
    if (page instanceof ListOverflow) {
      const requestId = (ctx as { requestId?: string }).requestId;
      return streamActivity(deps, page, { filename, headers, requestId });
    }
    if (page.nextAfter) headers.link = nextLink(ctx.request.url, page.nextAfter);
    Object.assign(headers, listContentHeaders(format, filename));
    return page.body;
  };

  return new Elysia({ name: "activity" })
    .use(authPlugin({ ...deps, defaultChainId: deps.chains.defaultChainId }))
    .get("/v0/activity/:merchant", handler, {
      resolve: parse(),
      merchantReader: true,
      params: MerchantParamsDoc,
      query: ActivityQueryDoc,
      detail: details.activity,
    })
    .get("/v0/payments/:merchant", handler, {
      resolve: parse("CHARGE"),
      merchantReader: true,
      params: MerchantParamsDoc,
      query: TypedQueryDoc,
      detail: details.payments,
    })
    .get("/v0/failures/:merchant", handler, {
      resolve: parse("FAIL"),
      merchantReader: true,
      params: MerchantParamsDoc,
      query: TypedQueryDoc,
      detail: details.failures,
    });
}
