/** `GET /v0/activity/:merchant`, `/v0/payments/:merchant` (CHARGE) and `/v0/failures/:merchant` (FAIL). */
import { Elysia } from "elysia";
import { InvalidParameterError } from "../errors";
import {
  nextLink,
  parseAddress,
  parseChainId,
  parseEnum,
  parseEventId,
  parseLimit,
  parseSince,
  parseToken,
  requireReader,
  type RawParams,
} from "../docs/params";
import { freshnessHeaders, resolveChain, type RouteDeps } from "../health/freshness";
import {
  ACTIVITY_TYPES,
  ActivityQueryDoc,
  details,
  MerchantParamsDoc,
  TypedQueryDoc,
  type ActivityType,
} from "./model";
import { activityPosition, eventId, listActivity, toActivityRecord, type ActivityQuery } from "./service";

type Ctx = { params: unknown; query: unknown; request: Request; set: { headers: Record<string, string | number> } };

/** Activity routes. */
export function activityRoutes(deps: RouteDeps) {
  /** One handler for the three routes; `fixedType` pins the type of payments and failures. */
  const handler = (fixedType?: ActivityType) => async (ctx: Ctx) => {
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
    await requireReader(deps, ctx.request, merchant);
    freshnessHeaders(ctx.set.headers, await resolveChain(deps, chainId));

    const q: ActivityQuery = { merchant, chainId, type, since, token, order, limit };
    if (cursor) {
      const position =
        cursor.chainId === chainId ? await activityPosition(deps.sql, { ...cursor, merchant, chainId }) : undefined;
      if (!position) {
        throw new InvalidParameterError(
          "starting_after",
          `starting_after does not name an activity record of this merchant on chain ${chainId}`,
        );
      }
      q.after = position;
    }
    const rows = await listActivity(deps.sql, q);
    if (limit !== undefined && rows.length > limit) {
      rows.length = limit;
      ctx.set.headers.link = nextLink(ctx.request.url, eventId(rows[rows.length - 1]));
    }
    return rows.map(toActivityRecord);
  };

  return new Elysia({ name: "activity" })
    .get("/v0/activity/:merchant", handler(), {
      params: MerchantParamsDoc,
      query: ActivityQueryDoc,
      detail: details.activity,
    })
    .get("/v0/payments/:merchant", handler("CHARGE"), {
      params: MerchantParamsDoc,
      query: TypedQueryDoc,
      detail: details.payments,
    })
    .get("/v0/failures/:merchant", handler("FAIL"), {
      params: MerchantParamsDoc,
      query: TypedQueryDoc,
      detail: details.failures,
    });
}
