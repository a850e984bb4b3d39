/**
 * `GET /v0/auth/check`: is a wallet authorized for any of some plans on a module? Public, rate limited per client
 * address; with `Authorization: Bearer <key>` counted against the credential instead. `GET /v0/auth/plans`: what
 * those plans cost (the gate's 402 body and its start-up validation).
 */
import { Elysia } from "elysia";
import { ChainUnavailableError, InvalidParameterError } from "../../errors";
import { freshnessHeaders, isConfiguredChain } from "../../chain-state";
import { createCheckAdmission } from "./admit";
import { parseAddress, parseChainId, parsePlanIds, type RawParams } from "../../params";
import type { RouteDeps } from "../../deps";
import type { ResponseCache } from "../../cache";
import { indexedPermissionCheck, onchainPermissionCheck, permissionCandidates } from "./permissions";
import { MULTICALL3_ADDRESS } from "../../../chain/multicall3";
import type { Address } from "viem";
import type { Sql } from "../../../db/client";
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

/** The indexed answer of a question: a module's allocations, or a spender's permissions on a manager. */
const indexedAnswer = (sql: Sql, q: CheckQuery): Promise<IndexedAnswer> =>
  q.spender ? indexedPermissionCheck(sql, { ...q, spender: q.spender }) : indexedCheck(sql, q);

/** `<chain_id>:<manager>` of every configured Spend Permission manager. */
function configuredManagers(deps: RouteDeps): Set<string> {
  const out = new Set<string>();
  for (const c of deps.config.indexed ?? []) {
    const chainId = c.chainId ?? deps.chains.defaultChainId;
    if (c.spendPermissions) out.add(`${chainId}:${c.spendPermissions.manager}`);
  }
  return out;
}

/** Indexed answers: from `cache` when given, of a chain this service may answer for, waited for to `min_block`. */
function indexedAnswers(deps: RouteDeps, cache?: ResponseCache<CheckEntry>) {
  const load = async (p: ParsedCheck) => {
    const answer = await indexedAnswer(deps.readSql, p.q);
    return { value: checkEntry(p.q, answer), ttlMs: answer.validForMs };
  };
  const servable = (p: ParsedCheck, e: CheckEntry) => e.answer.chainIndexed || isConfiguredChain(deps, p.q.chainId);
  const served = (p: ParsedCheck, e: CheckEntry): CheckEntry => {
    if (servable(p, e)) return e;
    throw new InvalidParameterError("chain_id", `chain ${p.q.chainId} is not indexed by this service`);
  };
  /** A cache hit that has reached `min_block`, synchronously; undefined otherwise. */
  const hit = (p: ParsedCheck): CheckEntry | undefined => {
    const e = cache?.hit(p.key, p.q.chainId, () => load(p));
    return e && reached(p, e) ? served(p, e) : undefined;
  };
  /** The entry, from the cache while it has reached `min_block`, else waited for (up to 2 s). */
  const get = async (p: ParsedCheck): Promise<CheckEntry> => {
    const e = cache ? await cache.get(p.key, p.q.chainId, () => load(p)) : (await load(p)).value;
    if (reached(p, e)) return served(p, e);
    return served(p, checkEntry(p.q, await indexedCheckAt(deps.readSql, p.q, p.minBlock!, e.answer, indexedAnswer)));
  };
  return { load, servable, hit, get };
}

/** `GET /v0/auth/plans`: the plans as indexed (a 400 on plan_ids names those that are not). */
function plansHandler(deps: RouteDeps, admit: ReturnType<typeof createCheckAdmission>) {
  return async (ctx: Ctx) => {
    await admit(ctx);
    const raw = ctx.query as RawParams;
    const module = parseAddress(raw, "module_address");
    const planIds = parsePlanIds(raw);
    const chainId = parseChainId(raw, deps.chains.defaultChainId);
    return { chain_id: chainId, module_address: module, plans: await plansOf(deps.readSql, chainId, module, planIds) };
  };
}

const send = (e: CheckEntry, set: Ctx["set"]) => (Object.assign(set.headers, e.headers), e.body);

/** The check routes; indexed answers go through `cache` when given (after the rate limit, like every request). */
export function checkRoutes(deps: RouteDeps, cache?: ResponseCache<CheckEntry>) {
  const { ONCHAIN_CHECK_CONCURRENCY: concurrency, RPC_TIMEOUT_MS: timeoutMs } = deps.config;
  const onchain = createOnchainChecker({ chains: deps.chains, concurrency, timeoutMs });
  const memo = createParseMemo(deps.chains.defaultChainId, configuredManagers(deps));
  const admit = createCheckAdmission(deps);
  const indexed = indexedAnswers(deps, cache);

  /** Modes onchain and both (the contract decides), within the client's share of the chain's RPC budget. */
  const withChain = async (p: ParsedCheck, client: string, set: Ctx["set"]) => {
    const { q, mode } = p;
    if (!deps.chains.get(q.chainId)) {
      const why = `no RPC endpoint is configured for chain ${q.chainId} (needed by mode ${mode})`;
      throw new InvalidParameterError("chain_id", why);
    }
    // A spend permission's multicall goes through the same per-client share of the chain's budget as a module's call.
    const spender = q.spender;
    const multicall = (deps.config.multicallAddresses?.[q.chainId] as Address | undefined) ?? MULTICALL3_ADDRESS;
    const chain = () =>
      spender
        ? onchain.check(q, client, async (rpc) =>
            onchainPermissionCheck(rpc, q, await permissionCandidates(deps.readSql, { ...q, spender }), multicall),
          )
        : onchain.check(q, client);
    if (mode === "onchain") return checkResult(mode, q, undefined, await chain());
    const [ix, oc] = await Promise.allSettled([indexed.get(p), chain()]);
    if (ix.status === "rejected") throw ix.reason;
    freshnessHeaders(set.headers as Record<string, string>, ix.value.answer);
    if (oc.status === "fulfilled") return checkResult(mode, q, ix.value.answer.result, oc.value);
    if (!(oc.reason instanceof ChainUnavailableError)) throw oc.reason;
    throw new ChainUnavailableError(oc.reason.message, { indexed: ix.value.answer.result });
  };

  /** One request of an admitted client: a cache hit is answered with no promise (the entry holds the response). */
  const answer = (ctx: Ctx, client: string): string | Promise<string | CheckResult> => {
    const p = memo.parse(ctx.request, ctx.query);
    if (p.mode !== "indexed") return withChain(p, client, ctx.set);
    const hit = indexed.hit(p);
    return hit ? send(hit, ctx.set) : indexed.get(p).then((e) => send(e, ctx.set));
  };
  const check = (ctx: Ctx) => {
    const client = admit(ctx);
    return typeof client === "string" ? answer(ctx, client) : client.then((c) => answer(ctx, c));
  };

  const routes = new Elysia({ prefix: "/v0/auth", name: "check" })
    .get("/check", check, { query: CheckQueryDoc, detail: checkDetail })
    .get("/plans", plansHandler(deps, admit), { query: PlansQueryDoc, detail: plansDetail });
  if (!cache || deps.hotCheck === false) return routes;
  return new Elysia().use(hotCheckPlugin(deps, cache, memo, indexed.load, indexed.servable)).use(routes);
}
