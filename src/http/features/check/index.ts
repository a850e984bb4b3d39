/**
 * `GET /v0/auth/check`: is a wallet authorized for any of some plans on a module? Public, rate limited per client
 * address; with `Authorization: Bearer <key>` counted against the credential instead. `GET /v0/auth/plans`: what
 * those plans cost (the gate's 402 body and its start-up validation).
 */
import { Elysia } from "elysia";
import type { Server } from "bun";
import { ChainUnavailableError, InvalidParameterError } from "../../errors";
import { freshnessHeaders, isConfiguredChain } from "../../chain-state";
import { createAuthenticator } from "../../plugins/auth";
import { principalId } from "../../../auth/principal";
import { clientAddress, clientKey } from "../../rate-limit";
import { parseAddress, parseChainId, parsePlanIds, type RawParams } from "../../params";
import type { RouteDeps } from "../../deps";
import type { ResponseCache } from "../../cache";
import { CheckQueryDoc, checkDetail, plansDetail, PlansQueryDoc, type CheckResult } from "./model";
import type { IndexedResult, OnchainResult } from "./model";
import { createParseMemo, type CheckMode, type ParsedCheck } from "./parse";
import { hotCheckPlugin } from "./hot";
import {
  createOnchainChecker,
  indexedCheck,
  indexedCheckAt,
  plansOf,
  type CheckEntry,
  type CheckQuery,
  type IndexedAnswer,
} from "./service";

/** The check result (the one place its fields are put together, in this order). */
function checkResult(mode: CheckMode, q: CheckQuery, indexed?: IndexedResult, onchain?: OnchainResult): CheckResult {
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

/** The answer with its mode-indexed response rendered once (an entry is only served for its own key). */
function checkEntry(q: CheckQuery, answer: IndexedAnswer): CheckEntry {
  const headers: Record<string, string> = {};
  freshnessHeaders(headers, answer);
  headers["content-type"] = "application/json;charset=utf-8";
  const body = JSON.stringify(checkResult("indexed", q, answer.result));
  return { answer, body, headers, init: new Headers(headers) };
}

/** Whether an entry's index has reached the request's `min_block` (always, without one). */
const reached = (p: ParsedCheck, e: CheckEntry) =>
  p.minBlock === undefined || (e.answer.indexedBlock !== null && BigInt(e.answer.indexedBlock) >= p.minBlock);

type Ctx = { request: Request; query: unknown; server: unknown; set: { headers: Record<string, unknown> } };

/** The check routes; indexed answers go through `cache` when given (after the rate limit, like every request). */
export function checkRoutes(deps: RouteDeps, cache?: ResponseCache<CheckEntry>) {
  const { config } = deps;
  const onchain = createOnchainChecker({
    chains: deps.chains,
    concurrency: config.ONCHAIN_CHECK_CONCURRENCY,
    timeoutMs: config.RPC_TIMEOUT_MS,
  });
  const memo = createParseMemo(deps.chains.defaultChainId);
  const authenticate = createAuthenticator(deps);
  const addressOpts = { trustedProxyHops: config.TRUSTED_PROXY_HOPS, clientIpHeader: config.CLIENT_IP_HEADER };
  const load = async (p: ParsedCheck) => {
    const answer = await indexedCheck(deps.readSql, p.q);
    return { value: checkEntry(p.q, answer), ttlMs: answer.validForMs };
  };
  const servable = (p: ParsedCheck, e: CheckEntry) => e.answer.chainIndexed || isConfiguredChain(deps, p.q.chainId);
  const served = (p: ParsedCheck, e: CheckEntry): CheckEntry => {
    if (servable(p, e)) return e;
    throw new InvalidParameterError("chain_id", `chain ${p.q.chainId} is not indexed by this service`);
  };

  /**
   * Spends the request's rate limit and names its client: with an Authorization header the credential's bucket (a
   * bad credential spends the address's), else the client address's. The per-merchant limit belongs here too.
   */
  const admit = async (ctx: Ctx): Promise<string> => {
    const server = ctx.server as Server<unknown> | null;
    if (ctx.request.headers.has("authorization")) return principalId(await authenticate(ctx, false));
    deps.limiter.hit(ctx.request, server);
    return clientKey(clientAddress(ctx.request, server, addressOpts));
  };

  /** The indexed entry, from the cache while it has reached `min_block`, else waited for (up to 2 s). */
  const indexed = async (p: ParsedCheck): Promise<CheckEntry> => {
    const e = cache ? await cache.get(p.key, p.q.chainId, () => load(p)) : (await load(p)).value;
    if (reached(p, e)) return served(p, e);
    return served(p, checkEntry(p.q, await indexedCheckAt(deps.readSql, p.q, p.minBlock!, e.answer)));
  };

  const send = (e: CheckEntry, set: Ctx["set"]) => (Object.assign(set.headers, e.headers), e.body);

  /** Modes onchain and both (the contract decides), within the client's share of the chain's RPC budget. */
  const withChain = async (p: ParsedCheck, client: string, set: Ctx["set"]) => {
    const { q, mode } = p;
    if (!deps.chains.get(q.chainId)) {
      const why = `no RPC endpoint is configured for chain ${q.chainId} (needed by mode ${mode})`;
      throw new InvalidParameterError("chain_id", why);
    }
    if (mode === "onchain") return checkResult(mode, q, undefined, await onchain.check(q, client));
    const [ix, oc] = await Promise.allSettled([indexed(p), onchain.check(q, client)]);
    if (ix.status === "rejected") throw ix.reason;
    freshnessHeaders(set.headers as Record<string, string>, ix.value.answer);
    if (oc.status === "fulfilled") return checkResult(mode, q, ix.value.answer.result, oc.value);
    if (!(oc.reason instanceof ChainUnavailableError)) throw oc.reason;
    throw new ChainUnavailableError(oc.reason.message, { indexed: ix.value.answer.result });
  };

  const check = async (ctx: Ctx) => {
    const client = await admit(ctx);
    const p = memo.parse(ctx.request, ctx.query);
    if (p.mode !== "indexed") return withChain(p, client, ctx.set);
    // A cache hit that has reached min_block is answered with no further promise: the entry holds the response.
    const hit = cache?.hit(p.key, p.q.chainId, () => load(p));
    return send(hit && reached(p, hit) ? served(p, hit) : await indexed(p), ctx.set);
  };

  const plans = async (ctx: Ctx) => {
    await admit(ctx);
    const raw = ctx.query as RawParams;
    const module = parseAddress(raw, "module_address");
    const planIds = parsePlanIds(raw);
    const chainId = parseChainId(raw, deps.chains.defaultChainId);
    const found = await plansOf(deps.readSql, chainId, module, planIds);
    return { chain_id: chainId, module_address: module, plans: found };
  };

  const routes = new Elysia({ prefix: "/v0/auth", name: "check" })
    .get("/check", check, { query: CheckQueryDoc, detail: checkDetail })
    .get("/plans", plans, { query: PlansQueryDoc, detail: plansDetail });
  return cache && deps.hotCheck !== false
    ? new Elysia().use(hotCheckPlugin(deps, cache, memo, load, servable)).use(routes)
    : routes;
}
