/** `GET /v0/stats/:merchant`: revenue, failures, subscriptions and run rate of a merchant. */
import { Elysia } from "elysia";
import {
  parseAddress,
  parseChainId,
  parseEnum,
  parseSince,
  parseToken,
  requireReader,
  type RawParams,
} from "../../params";
import { freshnessHeaders, resolveChain } from "../../chain-state";
import type { RouteDeps } from "../../deps";
import { STATS_INTERVALS, StatsParamsDoc, StatsQueryDoc, statsDetail } from "./model";
import { merchantStats, resolvePeriods } from "./service";

/** The stats route. */
export function statsRoutes(deps: RouteDeps) {
  return new Elysia({ name: "stats" }).get(
    "/v0/stats/:merchant",
    async ({ params, query, request, set }) => {
      const merchant = parseAddress(params as RawParams, "merchant");
      const q = query as RawParams;
      const chainId = parseChainId(q, deps.chains.defaultChainId);
      const interval = parseEnum(q, "interval", STATS_INTERVALS, "day");
      const since = parseSince(q, "since");
      const until = parseSince(q, "until");
      const token = parseToken(q);
      await requireReader(deps, request, merchant);
      freshnessHeaders(set.headers as Record<string, string>, await resolveChain(deps, chainId));
      return merchantStats(deps.sql, { merchant, chainId, interval, since, until, token });
    },
    { params: StatsParamsDoc, query: StatsQueryDoc, detail: statsDetail },
  );
}
