/** `GET /v0/events/:merchant` (the event log) and `GET /v0/events/:merchant/:id`. */
import { Elysia } from "elysia";
import { parseAddress, parseEnum, parseLimit, parseSince, type RawParams } from "../../params";
import { authPlugin } from "../../plugins/auth";
import { nextLink } from "../../paging";
import { freshnessHeaders, resolveChain } from "../../chain-state";
import type { RouteDeps } from "../../deps";
import { InvalidParameterError, NotFoundError } from "../../errors";
import { details, EVENT_TYPES, EventParamsDoc, EventsParamsDoc, EventsQueryDoc } from "./model";
import { eventsResponse, findEvent, type EventQuery } from "./service";
import { parseFormat } from "../../stream";
import { EVENT_ID_PATTERN } from "../../../events/ids";
import { chainScope, type Principal } from "../../../auth/principal";

/** `type`: one known type or several, comma-separated. */
function parseTypes(q: RawParams): string[] | undefined {
  const v = q.type;
  if (v === undefined) return undefined;
  const types = String(v)
    .split(",")
    .map((s) => s.trim());
  for (const type of types) {
    if (!(EVENT_TYPES as readonly string[]).includes(type)) {
      throw new InvalidParameterError("type", `type must be one or more of ${EVENT_TYPES.join(", ")}`);
    }
  }
  return types;
}

/** An optional chain filter (no default: the log spans the merchant's chains). */
function parseChainFilter(q: RawParams): number | undefined {
  const v = q.chain_id;
  if (v === undefined) return undefined;
  if (!/^[0-9]{1,15}$/.test(String(v)) || Number(v) < 1) {
    throw new InvalidParameterError("chain_id", "chain_id must be a positive integer");
  }
  return Number(v);
}

/** Parses the list's parameters in `resolve`, before the credential is checked (a 400 comes first). */
function parseList({ params, query }: { params: unknown; query: unknown }) {
  const q = query as RawParams;
  const startingAfter = q.starting_after === undefined ? undefined : String(q.starting_after);
  if (startingAfter !== undefined && !EVENT_ID_PATTERN.test(startingAfter)) {
    throw new InvalidParameterError("starting_after", "starting_after must be an event id (evt_…)");
  }
  return {
    input: {
      merchant: parseAddress(params as RawParams, "merchant"),
      chainId: parseChainFilter(q),
      types: parseTypes(q),
      since: parseSince(q, "since"),
      order: parseEnum(q, "order", ["asc", "desc"] as const, "asc"),
      limit: parseLimit(q),
      format: parseFormat(q),
      startingAfter,
    },
  };
}

/** Parses one event's path (the id is looked up after the credential check: one not of the `evt_…` form is a 404). */
function parseOne({ params }: { params: unknown }) {
  const p = params as RawParams;
  return { input: { merchant: parseAddress(p, "merchant"), id: String(p.id ?? "") } };
}

/** The event log routes. */
export function eventRoutes(deps: RouteDeps) {
  return new Elysia({ name: "events" })
    .use(authPlugin({ ...deps, defaultChainId: deps.chains.defaultChainId }))
    .get(
      "/v0/events/:merchant",
      async (ctx) => {
        const { input, principal } = ctx as unknown as ReturnType<typeof parseList> & { principal: Principal };
        // A chain-scoped credential (a session, or a key one made) reads its own chain's events only.
        const chainId = input.chainId ?? chainScope(principal) ?? undefined;
        const chain = await resolveChain(deps, chainId ?? deps.chains.defaultChainId);
        freshnessHeaders(ctx.set.headers as Record<string, string>, chain);
        let afterSeq: string | undefined;
        if (input.startingAfter) {
          const cursor = await findEvent(deps.readSql, input.merchant, input.startingAfter, chainId);
          if (!cursor)
            throw new InvalidParameterError("starting_after", "starting_after names no event of this merchant");
          afterSeq = cursor.seq;
        }
        const q: EventQuery = { ...input, chainId, afterSeq };
        return eventsResponse(deps.readSql, q, {
          format: input.format,
          headers: ctx.set.headers as Record<string, string>,
          link: (afterId) => nextLink(ctx.request.url, afterId),
          logLevel: deps.config.LOG_LEVEL,
        });
      },
      {
        resolve: parseList,
        merchantReader: "anyChain",
        params: EventsParamsDoc,
        query: EventsQueryDoc,
        detail: details.list,
      },
    )
    .get(
      "/v0/events/:merchant/:id",
      async (ctx) => {
        const { input, principal } = ctx as unknown as ReturnType<typeof parseOne> & { principal: Principal };
        // Another chain's event is outside what a chain-scoped credential reads: a 404, as an unknown id.
        // An id not of the `evt_…` form names no event: a 404, as any unknown id (webhooks.md §3).
        const event = EVENT_ID_PATTERN.test(input.id)
          ? await findEvent(deps.readSql, input.merchant, input.id, chainScope(principal) ?? undefined)
          : undefined;
        if (!event) throw new NotFoundError(`no event ${input.id.slice(0, 80)}`, "id");
        // service.md "Freshness": a response that reads the index says how far its chain is indexed.
        freshnessHeaders(ctx.set.headers as Record<string, string>, await deps.chainState.get(event.chain_id));
        const { seq: _seq, revertedBy: _revertedBy, ...body } = event;
        return body;
      },
      { resolve: parseOne, merchantReader: "anyChain", params: EventParamsDoc, detail: details.one },
    );
}
