/** `GET /v0/stats/:merchant/mrr`, `/v0/stats/:merchant/mrr/movements`, `/v0/stats/:merchant/cohorts` (analytics.md §5). */
import { Elysia } from "elysia";
import {
  parseAddress,
  parseChainId,
  parseEnum,
  parseLimit,
  parseSince,
  parseToken,
  type RawParams,
} from "../../params";
import { authPlugin } from "../../plugins/auth";
import { freshnessHeaders, resolveChain } from "../../chain-state";
import type { RouteDeps } from "../../deps";
import { InvalidParameterError } from "../../errors";
import { nextLink } from "../../paging";
import { listContentHeaders, parseFormat } from "../../stream";
import { csvText, fieldColumns } from "../../csv";
import { MOVEMENT_KINDS } from "../../../domain/mrr";
import { STATS_INTERVALS, StatsParamsDoc } from "../stats/model";
import { CohortsQueryDoc, details, MovementsQueryDoc, MrrQueryDoc, type MovementRecord } from "./model";
import { merchantCohorts, merchantMrr, movementsPage, type MrrRequest } from "./service";

const MOVEMENT_ID = /^mov_[0-9a-f]{40}$/;

/** The CSV columns of a movement: its fields, the allocation ids joined by spaces. */
const CSV_COLUMNS = fieldColumns<MovementRecord>([
  "id",
  "at",
  "block_number",
  "customer",
  "token",
  "currency",
  "token_decimals",
  "kind",
  "mrr_before",
  "mrr_after",
  "amount",
  "reason",
  "recovered",
]).concat([{ name: "allocation_ids", value: (r) => r.allocation_ids.join(" ") }]);

type Ctx = { request: Request; set: { headers: Record<string, string | number> } };

/** The MRR routes. */
export function mrrRoutes(deps: RouteDeps) {
  const base = (
    params: unknown,
    query: unknown,
    intervals: readonly ("day" | "week" | "month")[],
    def: "day" | "month",
  ) => {
    const q = query as RawParams;
    const input: MrrRequest = {
      merchant: parseAddress(params as RawParams, "merchant"),
      chainId: parseChainId(q, deps.chains.defaultChainId),
      interval: parseEnum(q, "interval", intervals, def),
      since: parseSince(q, "since"),
      until: parseSince(q, "until"),
      token: parseToken(q),
    };
    return input;
  };
  const headers = async (ctx: Ctx, chainId: number) =>
    freshnessHeaders(ctx.set.headers as Record<string, string>, await resolveChain(deps, chainId));

  return new Elysia({ name: "mrr" })
    .use(authPlugin({ ...deps, defaultChainId: deps.chains.defaultChainId }))
    .get(
      "/v0/stats/:merchant/mrr",
      async (ctx) => {
        const { input } = ctx as unknown as { input: MrrRequest };
        await headers(ctx as Ctx, input.chainId);
        return merchantMrr(deps.readSql, input);
      },
      {
        resolve: ({ params, query }: { params: unknown; query: unknown }) => ({
          input: base(params, query, STATS_INTERVALS, "day"),
        }),
        merchantReader: true,
        params: StatsParamsDoc,
        query: MrrQueryDoc,
        detail: details.mrr,
      },
    )
    .get(
      "/v0/stats/:merchant/cohorts",
      async (ctx) => {
        const { input } = ctx as unknown as { input: MrrRequest };
        await headers(ctx as Ctx, input.chainId);
        return merchantCohorts(deps.readSql, input);
      },
      {
        resolve: ({ params, query }: { params: unknown; query: unknown }) => ({
          input: base(params, query, ["month", "week"] as const, "month"),
        }),
        merchantReader: true,
        params: StatsParamsDoc,
        query: CohortsQueryDoc,
        detail: details.cohorts,
      },
    )
    .get(
      "/v0/stats/:merchant/mrr/movements",
      async (ctx) => {
        const { input } = ctx as unknown as { input: ReturnType<typeof parseMovements> };
        const c = ctx as Ctx;
        await headers(c, input.chainId);
        const page = await movementsPage(deps.readSql, input);
        const last = page.rows.at(-1);
        if (page.more && last) c.set.headers.link = nextLink(c.request.url, last.id);
        const filename = `mrr-movements-${input.merchant}-${input.chainId}.csv`;
        Object.assign(c.set.headers, listContentHeaders(input.format, filename));
        return input.format === "csv" ? csvText(CSV_COLUMNS, page.rows) : page.rows;
      },
      {
        resolve: ({ params, query }: { params: unknown; query: unknown }) => ({ input: parseMovements(params, query) }),
        merchantReader: true,
        params: StatsParamsDoc,
        query: MovementsQueryDoc,
        detail: details.movements,
      },
    );

  function parseMovements(params: unknown, query: unknown) {
    const q = query as RawParams;
    const startingAfter = q.starting_after ?? undefined;
    if (startingAfter !== undefined && (startingAfter === null || !MOVEMENT_ID.test(startingAfter))) {
      throw new InvalidParameterError("starting_after", "starting_after must be a movement id: mov_ + 40 hex digits");
    }
    return {
      merchant: parseAddress(params as RawParams, "merchant"),
      chainId: parseChainId(q, deps.chains.defaultChainId),
      token: parseToken(q),
      since: parseSince(q, "since"),
      until: parseSince(q, "until"),
      kind: parseEnum(q, "kind", MOVEMENT_KINDS, undefined),
      limit: parseLimit(q) ?? 100,
      startingAfter,
      format: parseFormat(q),
    };
  }
}
