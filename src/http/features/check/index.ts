/** `GET /v0/auth/check`: is a wallet authorized for any of some plans on a module? Public, rate limited. */
import { Elysia } from "elysia";
import type { Server } from "bun";
import { ChainUnavailableError, InvalidParameterError } from "../../errors";
import { rateLimitPlugin } from "../../plugins/rate-limit";
import { newRequestId } from "../../plugins/error-handler";
import { parseAddress, parseChainId, parseEnum, parsePlanIds, type RawParams } from "../../params";
import { freshnessHeaders, isConfiguredChain } from "../../chain-state";
import { type RouteDeps } from "../../deps";
import {
  CHECK_MODES,
  CheckQueryDoc,
  checkDetail,
  type CheckResult,
  type IndexedResult,
  type OnchainResult,
} from "./model";
import { createOnchainChecker, indexedCheck, type CheckEntry, type CheckQuery, type IndexedAnswer } from "./service";
import type { ResponseCache } from "../../cache";
import { indexedPermissionCheck, onchainPermissionCheck, parsePlanKeys, permissionCandidates } from "./permissions";
import { MULTICALL3_ADDRESS } from "../../../chain/multicall3";
import type { Address } from "viem";

/** A mode of the check. */
type CheckMode = (typeof CHECK_MODES)[number];

/** A parsed request: the question, the mode and the cache key of its indexed answer. */
type ParsedCheck = { q: CheckQuery; mode: CheckMode; key: string };

/** The route's path (its template: the label the request metrics give it). */
const CHECK_PATH = "/v0/auth/check";

/** Parsed requests kept by raw query string (parsing is a pure function of it): at most this many… */
const PARSED_MAX_ENTRIES = 10_000;
/** …of at most this many characters each. */
const PARSED_MAX_QUERY_LENGTH = 512;

/** Where the path of an absolute request URL starts: the first `/` after `scheme://host` (as Elysia finds it). */
const pathStart = (url: string) => url.indexOf("/", 11);

/** Where the query string of `url` starts (its `?`), or -1: the first `?` after the path's start, as Elysia's. */
const queryStart = (url: string, pathAt: number) => url.indexOf("?", pathAt + 1);

/** The check result (the one place its fields are put together, in this order). */
function checkResult(
  mode: CheckMode,
  q: CheckQuery,
  indexed: IndexedResult | undefined,
  onchain: OnchainResult | undefined,
): CheckResult {
  const result: CheckResult = {
    authorized: onchain ? onchain.authorized : indexed!.authorized,
    mode,
    wallet: q.wallet,
    module_address: q.module,
    chain_id: q.chainId,
    plan_ids: q.planIds,
  };
  if (indexed) result.indexed = indexed;
  if (onchain) result.onchain = onchain;
  return result;
}

/**
 * The answer with its mode-indexed response rendered once: an entry is only served for its own key, which fixes
 * every other input of the body (chain, module, wallet, plan ids), so every hit sends these bytes.
 */
function checkEntry(q: CheckQuery, answer: IndexedAnswer): CheckEntry {
  const headers: Record<string, string> = {};
  freshnessHeaders(headers, answer);
  headers["content-type"] = "application/json;charset=utf-8";
  const body = JSON.stringify(checkResult("indexed", q, answer.result, undefined));
  return { answer, body, headers, init: new Headers(headers) };
}

/** Parses the query (a 400 on any bad value). */
function parseCheck(raw: RawParams, defaultChainId: number, managers: ReadonlySet<string>): ParsedCheck {
  const module = parseAddress(raw, "module_address");
  const wallet = parseAddress(raw, "wallet");
  const chainId = parseChainId(raw, defaultChainId);
  const mode = parseEnum(raw, "mode", CHECK_MODES, "indexed");
  if (managers.has(`${chainId}:${module}`)) {
    // A spend permission manager: the merchant's spender is required, plan ids are optional plan keys.
    const spender = parseAddress(raw, "spender");
    const q: CheckQuery = { module, wallet, chainId, spender, planIds: parsePlanKeys(raw) };
    return { q, mode, key: `${chainId}:${module}:${wallet}:${spender}:${q.planIds.join(",")}` };
  }
  const q: CheckQuery = { module, wallet, planIds: parsePlanIds(raw), chainId };
  return { q, mode, key: `${q.chainId}:${q.module}:${q.wallet}:${q.planIds.join(",")}` };
}

/** `<chain_id>:<manager>` of every configured Spend Permission manager. */
function configuredManagers(deps: RouteDeps): Set<string> {
  const out = new Set<string>();
  for (const c of deps.config.indexed ?? []) {
    const chainId = c.chainId ?? deps.chains.defaultChainId;
    if (c.spendPermissions) out.add(`${chainId}:${c.spendPermissions.manager}`);
  }
  return out;
}

/** The check route; indexed answers go through `cache` when given (after the rate limit, like every request). */
export function checkRoutes(deps: RouteDeps, cache?: ResponseCache<CheckEntry>) {
  const checker = createOnchainChecker({
    chains: deps.chains,
    concurrency: deps.config.ONCHAIN_CHECK_CONCURRENCY,
    timeoutMs: deps.config.RPC_TIMEOUT_MS,
  });
  const parsed = new Map<string, ParsedCheck>();
  const managers = configuredManagers(deps);

  /** The parsed request, from `parsed` when this exact query string was parsed before. */
  const parse = (request: Request, query: unknown): ParsedCheck => {
    const url = request.url;
    const raw = url.slice(queryStart(url, pathStart(url)) + 1);
    let p = parsed.get(raw);
    if (!p) {
      p = parseCheck(query as RawParams, deps.chains.defaultChainId, managers);
      if (raw.length <= PARSED_MAX_QUERY_LENGTH) {
        if (parsed.size >= PARSED_MAX_ENTRIES) parsed.clear();
        parsed.set(raw, p);
      }
    }
    return p;
  };

  const load = async (q: CheckQuery) => {
    const answer = q.spender
      ? await indexedPermissionCheck(deps.readSql, { ...q, spender: q.spender })
      : await indexedCheck(deps.readSql, q);
    return { value: checkEntry(q, answer), ttlMs: answer.validForMs };
  };

  /** Whether this service may answer for the entry's chain (else the request is a 400 on chain_id). */
  const servable = (q: CheckQuery, entry: CheckEntry): boolean =>
    entry.answer.chainIndexed || isConfiguredChain(deps, q.chainId);

  /** The entry of a chain this service may answer for (else a 400 on chain_id). */
  const served = (q: CheckQuery, entry: CheckEntry): CheckEntry => {
    if (!servable(q, entry)) {
      throw new InvalidParameterError("chain_id", `chain ${q.chainId} is not indexed by this service`);
    }
    return entry;
  };

  const indexed = async (p: ParsedCheck): Promise<CheckEntry> =>
    served(p.q, cache ? await cache.get(p.key, p.q.chainId, () => load(p.q)) : (await load(p.q)).value);

  const send = (entry: CheckEntry, set: { headers: Record<string, unknown> }) => {
    Object.assign(set.headers, entry.headers);
    return entry.body;
  };

  /** Every mode, answered after whatever the database or the chain takes. */
  const answer = async (p: ParsedCheck, set: { headers: Record<string, unknown> }) => {
    const { q, mode } = p;
    if (mode === "indexed") return send(await indexed(p), set);

    const client = deps.chains.get(q.chainId);
    if (!client) {
      throw new InvalidParameterError(
        "chain_id",
        `no RPC endpoint is configured for chain ${q.chainId} (needed by mode ${mode})`,
      );
    }
    const onchain = q.spender
      ? async () =>
          onchainPermissionCheck(
            client,
            q,
            await permissionCandidates(deps.readSql, { ...q, spender: q.spender! }),
            (deps.config.multicallAddresses?.[q.chainId] as Address | undefined) ?? MULTICALL3_ADDRESS,
          )
      : () => checker.check(q);
    if (mode === "onchain") return checkResult(mode, q, undefined, await onchain());

    const [ix, oc] = await Promise.allSettled([indexed(p), onchain()]);
    if (ix.status === "rejected") throw ix.reason;
    freshnessHeaders(set.headers as Record<string, string>, ix.value.answer);
    if (oc.status === "rejected") {
      const err = oc.reason;
      if (err instanceof ChainUnavailableError) {
        throw new ChainUnavailableError(err.message, { indexed: ix.value.answer.result });
      }
      throw err;
    }
    return checkResult(mode, q, ix.value.answer.result, oc.value);
  };

  /**
   * The route's response to a request it would answer from the cache (same status, headers and body); undefined
   * for anything else, which the route then handles in full. Only a query string the route has already parsed and
   * accepted qualifies (the memo holds nothing else), in mode indexed, on a servable chain, with a valid entry; then
   * the client's rate limit is spent exactly as the route's `rateLimit` would (a refusal falls through: the route
   * refuses it again, which spends nothing more), and the hit is counted.
   */
  const hot = (request: Request, path: string): Response | undefined => {
    if (path !== CHECK_PATH || !cache || request.method !== "GET") return undefined;
    const url = request.url;
    const qi = queryStart(url, pathStart(url));
    if (qi < 0) return undefined;
    const t0 = deps.observeRequest ? performance.now() : 0;
    const p = parsed.get(url.slice(qi + 1));
    if (!p || p.mode !== "indexed") return undefined;
    const entry = cache.hit(
      p.key,
      p.q.chainId,
      () => load(p.q),
      (e) => servable(p.q, e) && deps.limiter.take(request, server),
    );
    if (!entry) return undefined;
    // The route's response: the entry's body and headers, and the request id its after-handle hook adds.
    const response = new Response(entry.body, { headers: entry.init });
    response.headers.set("x-request-id", newRequestId());
    // An answer from here skips Elysia's after-response hooks: it is counted here, as the metrics plugin would.
    deps.observeRequest?.(CHECK_PATH, "GET", 200, (performance.now() - t0) / 1000);
    return response;
  };

  // Written so that Elysia's source heuristics see a sync hook with a return value (an arrow returning a call
  // would read as async, and every request of the app would then go through an extra promise).
  function hotHook(c: { request: Request }) {
    const response = hot(c.request, (c as unknown as { path: string }).path);
    if (response !== undefined) return response;
  }

  // The listening server (the one `requestIP` asks), as Elysia's context getter would return it.
  let server: Server<unknown> | null = null;

  const plugin = new Elysia({ prefix: "/v0/auth", name: "check" });
  if (cache && deps.hotCheck !== false) {
    plugin
      .onStart((app) => {
        server = app.server as Server<unknown> | null;
      })
      .onStop(() => {
        server = null;
      })
      // Cache hits are answered before routing (an onRequest hook runs for every request, after the body limit's):
      // none of the per-request hooks, query parsing and validation of the route changes what a hit sends. A hook
      // added later that does (a header on every response) fails test/http/features/check-hot.test.ts.
      .onRequest(hotHook);
  }
  return plugin.use(rateLimitPlugin(deps.limiter)).get(
    "/check",
    ({ request, query, set }) => {
      const p = parse(request, query);
      // A cache hit is answered here, with no promise: the entry holds the rendered response.
      const hit = p.mode === "indexed" ? cache?.hit(p.key, p.q.chainId, () => load(p.q)) : undefined;
      if (hit) return send(served(p.q, hit), set);
      return answer(p, set);
    },
    { rateLimit: true, query: CheckQueryDoc, detail: checkDetail },
  );
}
