/** `GET /v0/renewals/:merchant`: the renewal outlooks of a merchant's subscriptions (renewals.md §5). */
import { Elysia } from "elysia";
import { InvalidParameterError } from "../../errors";
import {
  parseAddress,
  parseAllocationId,
  parseChainId,
  parseEnum,
  parseLimit,
  parseSince,
  parseToken,
  type RawParams,
} from "../../params";
import { authPlugin } from "../../plugins/auth";
import { nextLink } from "../../paging";
import { freshnessHeaders, resolveChain } from "../../chain-state";
import { type RouteDeps } from "../../deps";
import { csvText } from "../../csv";
import { listContentHeaders, parseFormat } from "../../stream";
import {
  listDetail,
  ListParamsDoc,
  ListQueryDoc,
  RENEWAL_CSV_COLUMNS,
  RENEWAL_OUTLOOKS,
  RENEWAL_REASONS,
} from "./model";
import { listRenewals, renewalPosition, toRenewalItem, type RenewalQuery } from "./service";

const inputOf = <R extends { input: unknown }>(ctx: object): R["input"] => (ctx as R).input;

/** Renewal routes. */
export function renewalRoutes(deps: RouteDeps) {
  const parseList = ({ params, query }: { params: unknown; query: unknown }) => {
    const p = query as RawParams;
    const reason = parseEnum(p, "reason", RENEWAL_REASONS, undefined);
    const outlook = parseEnum(p, "outlook", RENEWAL_OUTLOOKS, undefined);
    if (reason && outlook === "will_renew") {
      throw new InvalidParameterError("reason", "reason implies outlook=at_risk: a renewal that will succeed has none");
    }
    return {
      input: {
        merchant: parseAddress(params as RawParams, "merchant"),
        chainId: parseChainId(p, deps.chains.defaultChainId),
        outlook: reason ? ("at_risk" as const) : outlook,
        reason,
        dueBefore: parseSince(p, "due_before")?.getTime(),
        token: parseToken(p),
        format: parseFormat(p),
        limit: parseLimit(p),
        cursor: parseAllocationId(p),
      },
    };
  };

  return new Elysia({ prefix: "/v0/renewals", name: "renewals" })
    .use(authPlugin({ ...deps, defaultChainId: deps.chains.defaultChainId }))
    .get(
      "/:merchant",
      async (ctx) => {
        const { request, set } = ctx;
        const { cursor, format, ...input } = inputOf<ReturnType<typeof parseList>>(ctx);
        const { merchant, chainId, limit } = input;
        freshnessHeaders(set.headers, await resolveChain(deps, chainId));
        const q: RenewalQuery = { ...input };
        if (cursor) {
          const position =
            cursor.chainId === chainId
              ? await renewalPosition(deps.readSql, { ...cursor, merchant, chainId })
              : undefined;
          if (!position) {
            throw new InvalidParameterError(
              "starting_after",
              `starting_after does not name a renewal of this merchant on chain ${chainId}`,
            );
          }
          q.after = position;
        }
        const rows = await listRenewals(deps.readSql, q);
        const cut = limit !== undefined && rows.length > limit;
        if (cut) rows.length = limit;
        const items = rows.map(toRenewalItem);
        if (cut) set.headers.link = nextLink(request.url, items[items.length - 1]!.allocation_id);
        if (format === "csv") {
          Object.assign(set.headers, listContentHeaders("csv", `renewals-${merchant}-${chainId}.csv`));
          return csvText(RENEWAL_CSV_COLUMNS, items);
        }
        return items;
      },
      { resolve: parseList, merchantReader: true, params: ListParamsDoc, query: ListQueryDoc, detail: listDetail },
    );
}
