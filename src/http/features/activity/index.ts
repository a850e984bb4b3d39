/** `GET /v0/activity/:merchant`, `/v0/payments/:merchant` (CHARGE) and `/v0/failures/:merchant` (FAIL). */
import { Elysia } from "elysia";
import { InvalidParameterError } from "../../errors";
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
import {
  activityPosition,
  eventId,
  listActivity,
  toActivityRecord,
  type ActivityPage,
  type ActivityQuery,
} from "./service";
import type { ResponseCache } from "../../cache";

const encoder = new TextEncoder();

/**
 * Cache key of a page: every input of the query, normalized as the query uses it. The token stays as sent (JS and
 * Postgres may lowercase exotic characters differently); JSON keeps free text from running into other fields.
 */
function pageKey(q: ActivityQuery, cursor: ReturnType<typeof parseEventId>): string {
  const after = cursor && `${cursor.chainId}:${cursor.txHash}:${cursor.logIndex}`;
  return JSON.stringify([q.chainId, q.merchant, q.type, q.since?.getTime(), q.order, q.limit, after, q.token]);
}

/** Every input of one request, parsed before the credential is checked (a 400 comes first). */
type Input = { q: ActivityQuery; cursor: ReturnType<typeof parseEventId> };

type Ctx = { request: Request; set: { headers: Record<string, string | number> } };

/**
 * Activity routes. Pages go through `cache` when given, keyed by merchant and normalized query; the credential is
 * checked on every request before the cache is read, and the `Link` header is rebuilt from each request's URL.
 */
export function activityRoutes(deps: RouteDeps, cache?: ResponseCache<ActivityPage>) {
  /** Reads and serializes one page; the freshness row is read first, so it never claims more than the page holds. */
  const load = async (q: ActivityQuery, cursor: ReturnType<typeof parseEventId>) => {
    const chain = await deps.chainState.get(q.chainId);
    if (cursor) {
      const position =
        cursor.chainId === q.chainId
          ? await activityPosition(deps.sql, { ...cursor, merchant: q.merchant, chainId: q.chainId })
          : undefined;
      if (!position) {
        throw new InvalidParameterError(
          "starting_after",
          `starting_after does not name an activity record of this merchant on chain ${q.chainId}`,
        );
      }
      q.after = position;
    }
    const rows = await listActivity(deps.sql, q);
    let nextAfter: string | null = null;
    if (q.limit !== undefined && rows.length > q.limit) {
      rows.length = q.limit;
      nextAfter = eventId(rows[rows.length - 1]);
    }
    const body = encoder.encode(JSON.stringify(rows.map(toActivityRecord)));
    const page: ActivityPage = {
      body,
      nextAfter,
      indexedBlock: chain?.indexedBlock ?? null,
      indexedTime: chain?.indexedTime ?? null,
    };
    return { value: page };
  };

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
      const order = parseEnum(query, "order", ["asc", "desc"] as const, "asc");
      const cursor = parseEventId(query);
      return { input: { q: { merchant, chainId, type, since, token, order, limit }, cursor } };
    };

  /** One handler for the three routes, after `merchantReader` checked the credential. */
  const handler = async (ctx: Ctx) => {
    // Set by the route's `resolve` (Elysia does not carry a route-level resolve into the handler's type).
    const { q, cursor } = (ctx as Ctx & { input: Input }).input;
    const chainId = q.chainId;
    freshnessHeaders(ctx.set.headers, await resolveChain(deps, chainId));

    const page = cache
      ? await cache.get(pageKey(q, cursor), chainId, () => load(q, cursor))
      : (await load(q, cursor)).value;
    const headers = ctx.set.headers;
    delete headers["x-indexed-block"];
    delete headers["x-indexed-at"];
    freshnessHeaders(headers, page);
    if (page.nextAfter) headers.link = nextLink(ctx.request.url, page.nextAfter);
    headers["content-type"] = "application/json;charset=utf-8";
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
