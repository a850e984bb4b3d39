/** `GET /v0/subscriptions/:merchant` and `GET /v0/subscriptions/:merchant/:id`. */
import { Elysia } from "elysia";
import { InvalidParameterError, NotFoundError } from "../../errors";
import {
  parseAddress,
  parseAllocationId,
  parseChainId,
  parseEnum,
  parseLimit,
  parseUint256,
  requireReader,
  type RawParams,
} from "../../params";
import { nextLink } from "../../paging";
import { freshnessHeaders, resolveChain } from "../../chain-state";
import { type RouteDeps } from "../../deps";
import {
  getDetail,
  GetParamsDoc,
  GetQueryDoc,
  listDetail,
  ListParamsDoc,
  ListQueryDoc,
  SUBSCRIPTION_STATUSES,
} from "./model";
import {
  allocationId,
  getSubscription,
  listSubscriptions,
  subscriptionPosition,
  toSubscriptionRecord,
  type SubscriptionQuery,
} from "./service";
import { streamSubscriptions, subscriptionsCsvPage } from "./service";
import { parseFormat } from "../../stream";

/** Subscription routes. */
export function subscriptionRoutes(deps: RouteDeps) {
  return new Elysia({ prefix: "/v0/subscriptions", name: "subscriptions" })
    .get(
      "/:merchant",
      async ({ params, query, request, set }) => {
        const merchant = parseAddress(params as RawParams, "merchant");
        const chainId = parseChainId(query as RawParams, deps.chains.defaultChainId);
        const status = parseEnum(query as RawParams, "status", SUBSCRIPTION_STATUSES, undefined);
        const format = parseFormat(query as RawParams);
        const limit = parseLimit(query as RawParams);
        const cursor = parseAllocationId(query as RawParams);
        await requireReader(deps, request, merchant);
        freshnessHeaders(set.headers, await resolveChain(deps, chainId));

        const q: SubscriptionQuery = { merchant, chainId, status, limit };
        if (cursor) {
          const position =
            cursor.chainId === chainId
              ? await subscriptionPosition(deps.sql, { ...cursor, merchant, chainId })
              : undefined;
          if (!position) {
            throw new InvalidParameterError(
              "starting_after",
              `starting_after does not name a subscription of this merchant on chain ${chainId}`,
            );
          }
          q.after = position;
        }
        if (limit === undefined) return streamSubscriptions(deps, q, { format, headers: set.headers });
        const rows = await listSubscriptions(deps.sql, q);
        if (limit !== undefined && rows.length > limit) {
          rows.length = limit;
          set.headers.link = nextLink(request.url, allocationId(rows[rows.length - 1]));
        }
        if (format === "csv") return subscriptionsCsvPage(rows, merchant, chainId, set.headers);
        return rows.map(toSubscriptionRecord);
      },
      { params: ListParamsDoc, query: ListQueryDoc, detail: listDetail },
    )
    .get(
      "/:merchant/:id",
      async ({ params, query, request, set }) => {
        const merchant = parseAddress(params as RawParams, "merchant");
        const subscriptionId = parseUint256(params as RawParams, "id");
        const chainId = parseChainId(query as RawParams, deps.chains.defaultChainId);
        await requireReader(deps, request, merchant);
        freshnessHeaders(set.headers, await resolveChain(deps, chainId));
        const row = await getSubscription(deps.sql, { merchant, chainId, subscriptionId });
        if (!row)
          throw new NotFoundError(`no subscription ${subscriptionId} of this merchant on chain ${chainId}`, "id");
        return toSubscriptionRecord(row);
      },
      { params: GetParamsDoc, query: GetQueryDoc, detail: getDetail },
    );
}
