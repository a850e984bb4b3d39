/** `GET /v0/stats/:merchant`: revenue, failures, subscriptions and run rate of a merchant. */
import { Elysia } from "elysia";
import { parseAddress, parseChainId, parseEnum, parseSince, parseToken, type RawParams } from "../../params";
import { authPlugin } from "../../plugins/auth";
import { freshnessHeaders, resolveChain } from "../../chain-state";
import type { RouteDeps } from "../../deps";
import { STATS_INTERVALS, StatsParamsDoc, StatsQueryDoc, statsDetail } from "./model";
import { merchantStats } from "./service";

/** Parses the query in the route's `resolve`, before `merchantReader` checks the credential (a 400 comes first). */
function parseStats(deps: RouteDeps) {
  return ({ params, query }: { params: unknown; query: unknown }) => {
    const q = query as RawParams;
    return {
      input: {
        merchant: parseAddress(params as RawParams, "merchant"),
        chainId: parseChainId(q, deps.chains.defaultChainId),
        interval: parseEnum(q, "interval", STATS_INTERVALS, "day"),
        since: parseSince(q, "since"),
        until: parseSince(q, "until"),
        token: parseToken(q),
      },
    };
  };
}

/** The stats route. */
export function statsRoutes(deps: RouteDeps) {
  const parse = parseStats(deps);
  return new Elysia({ name: "stats" }).use(authPlugin({ ...deps, defaultChainId: deps.chains.defaultChainId })).get(
    "/v0/stats/:merchant",
    async (ctx) => {
      const input = (ctx as unknown as ReturnType<typeof parse>).input;
      freshnessHeaders(ctx.set.headers as Record<string, string>, await resolveChain(deps, input.chainId));
      return merchantStats(deps.readSql, input);
    },
    { resolve: parse, merchantReader: true, params: StatsParamsDoc, query: StatsQueryDoc, detail: statsDetail },
  );
}
