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
  type RawParams,
} from "../../params";
import { authPlugin } from "../../plugins/auth";
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
  getSubscription,
  rowAllocationId,
  SUBSCRIPTION_SOURCES,
  listSubscriptions,
  subscriptionPosition,
  toSubscriptionRecord,
  type SubscriptionQuery,
} from "./service";
import { streamSubscriptions, subscriptionsCsvPage } from "./service";
import { parseFormat } from "../../stream";

/** The parsed parameters the route's `resolve` put in the context (Elysia does not type a route-level resolve). */
const inputOf = <R extends { input: unknown }>(ctx: object): R["input"] => (ctx as R).input;

const HASH_RE = /^0x[0-9a-fA-F]{64}$/;

/** `id`: a decimal uint256, or a spend permission's hash (`0x` + 64 hex) standing for uint256(hash). */
function parseSubscriptionId(params: RawParams): { subscriptionId: string; hash: boolean } {
  const v = params.id;
  if (typeof v === "string" && HASH_RE.test(v)) return { subscriptionId: BigInt(v).toString(), hash: true };
  try {
    return { subscriptionId: parseUint256(params, "id"), hash: false };
  } catch (err) {
    if (!(err instanceof InvalidParameterError)) throw err;
    throw new InvalidParameterError("id", "id must be a decimal uint256 or a spend permission hash (0x + 64 hex)");
  }
}

/** Subscription routes. */
export function subscriptionRoutes(deps: RouteDeps) {
  // Parameters are parsed in `resolve`, before `merchantReader` checks the credential (a 400 comes first).
  const parseList = ({ params, query }: { params: unknown; query: unknown }) => ({
    input: {
      merchant: parseAddress(params as RawParams, "merchant"),
      chainId: parseChainId(query as RawParams, deps.chains.defaultChainId),
      status: parseEnum(query as RawParams, "status", SUBSCRIPTION_STATUSES, undefined),
      source: parseEnum(query as RawParams, "source", SUBSCRIPTION_SOURCES, undefined),
      format: parseFormat(query as RawParams),
      limit: parseLimit(query as RawParams),
      cursor: parseAllocationId(query as RawParams),
    },
  });
  const parseGet = ({ params, query }: { params: unknown; query: unknown }) => ({
    input: {
      merchant: parseAddress(params as RawParams, "merchant"),
      ...parseSubscriptionId(params as RawParams),
      chainId: parseChainId(query as RawParams, deps.chains.defaultChainId),
    },
  });

  return new Elysia({ prefix: "/v0/subscriptions", name: "subscriptions" })
    .use(authPlugin({ ...deps, defaultChainId: deps.chains.defaultChainId }))
    .get(
      "/:merchant",
      async (ctx) => {
        const { request, set } = ctx;
        const { merchant, chainId, status, source, format, limit, cursor } = inputOf<ReturnType<typeof parseList>>(ctx);
        freshnessHeaders(set.headers, await resolveChain(deps, chainId));

        const q: SubscriptionQuery = { merchant, chainId, status, limit, source };
        if (cursor) {
          const position =
            cursor.chainId === chainId
              ? await subscriptionPosition(deps.readSql, { ...cursor, merchant, chainId })
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
        const rows = await listSubscriptions(deps.readSql, q);
        if (rows.length > limit) {
          rows.length = limit;
          set.headers.link = nextLink(request.url, rowAllocationId(rows[rows.length - 1]!));
        }
        if (format === "csv") return subscriptionsCsvPage(rows, merchant, chainId, set.headers);
        return rows.map(toSubscriptionRecord);
      },
      { resolve: parseList, merchantReader: true, params: ListParamsDoc, query: ListQueryDoc, detail: listDetail },
    )
    .get(
      "/:merchant/:id",
      async (ctx) => {
        const { set } = ctx;
        const { merchant, subscriptionId, hash, chainId } = inputOf<ReturnType<typeof parseGet>>(ctx);
        freshnessHeaders(set.headers, await resolveChain(deps, chainId));
        const row = await getSubscription(deps.readSql, { merchant, chainId, subscriptionId, hash });
        if (!row)
          throw new NotFoundError(`no subscription ${subscriptionId} of this merchant on chain ${chainId}`, "id");
        return toSubscriptionRecord(row);
      },
      { resolve: parseGet, merchantReader: true, params: GetParamsDoc, query: GetQueryDoc, detail: getDetail },
    );
}
