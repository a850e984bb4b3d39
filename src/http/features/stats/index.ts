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
      const chain = await resolveChain(deps, chainId);
      freshnessHeaders(set.headers as Record<string, string>, chain);
      // The status rule's "now": the later of the wall clock and the newest indexed block (src/domain/status.ts).
      const clock = Math.floor(Date.now() / 1000) * 1000;
      const now = new Date(Math.max(clock, chain?.indexedTime?.getTime() ?? 0));
      const range = resolvePeriods(interval, now, since, until);
      return merchantStats(deps.sql, { merchant, chainId, interval, range, token, now });
    },
    { params: StatsParamsDoc, query: StatsQueryDoc, detail: statsDetail },
  );
}
