/** `GET /v0/auth/check`: is a wallet authorized for any of some plans on a module? Public, rate limited. */
import { Elysia } from "elysia";
import { ChainUnavailableError, InvalidParameterError } from "../../errors";
import { rateLimitPlugin } from "../../plugins/rate-limit";
import { parseAddress, parseChainId, parseEnum, parsePlanIds, type RawParams } from "../../params";
import { freshnessHeaders, isConfiguredChain } from "../../chain-state";
import { type RouteDeps } from "../../deps";
import { CHECK_MODES, CheckQueryDoc, checkDetail, type CheckResult } from "./model";
import { createOnchainChecker, indexedCheck, type CheckQuery, type IndexedAnswer } from "./service";
import type { ResponseCache } from "../../cache";

/** The check route; indexed answers go through `cache` when given (after the rate limit, like every request). */
export function checkRoutes(deps: RouteDeps, cache?: ResponseCache<IndexedAnswer>) {
  const checker = createOnchainChecker({
    chains: deps.chains,
    concurrency: deps.config.ONCHAIN_CHECK_CONCURRENCY,
    timeoutMs: deps.config.RPC_TIMEOUT_MS,
  });

  // Body and headers of mode indexed, rendered once per answer object: a cached answer is only served for its own
  // key, which fixes every other input of the body (chain, module, wallet, plan ids), so every hit sends these bytes.
  const rendered = new WeakMap<IndexedAnswer, { body: string; headers: Record<string, string> }>();

  const load = async (q: CheckQuery) => {
    const answer = await indexedCheck(deps.readSql, q);
    return { value: answer, ttlMs: answer.validForMs };
  };

  const indexed = async (q: CheckQuery): Promise<IndexedAnswer> => {
    const answer = cache
      ? await cache.get(`${q.chainId}:${q.module}:${q.wallet}:${q.planIds.join(",")}`, q.chainId, () => load(q))
      : (await load(q)).value;
    if (!answer.chainIndexed && !isConfiguredChain(deps, q.chainId)) {
      throw new InvalidParameterError("chain_id", `chain ${q.chainId} is not indexed by this service`);
    }
    return answer;
  };

  return new Elysia({ prefix: "/v0/auth", name: "check" }).use(rateLimitPlugin(deps.limiter)).get(
    "/check",
    async ({ query, set }) => {
      const raw = query as RawParams;
      const q: CheckQuery = {
        module: parseAddress(raw, "module_address"),
        wallet: parseAddress(raw, "wallet"),
        planIds: parsePlanIds(raw),
        chainId: parseChainId(raw, deps.chains.defaultChainId),
      };
      const mode = parseEnum(raw, "mode", CHECK_MODES, "indexed");
      const base = { mode, wallet: q.wallet, module_address: q.module, chain_id: q.chainId, plan_ids: q.planIds };

      if (mode === "indexed") {
        const answer = await indexed(q);
        let sent = rendered.get(answer);
        if (!sent) {
          const body = { authorized: answer.result.authorized, ...base, indexed: answer.result } satisfies CheckResult;
          const headers: Record<string, string> = {};
          freshnessHeaders(headers, answer);
          sent = { body: JSON.stringify(body), headers };
          rendered.set(answer, sent);
        }
        Object.assign(set.headers, sent.headers);
        set.headers["content-type"] = "application/json;charset=utf-8";
        return sent.body;
      }

      const client = deps.chains.get(q.chainId);
      if (!client) {
        throw new InvalidParameterError(
          "chain_id",
          `no RPC endpoint is configured for chain ${q.chainId} (needed by mode ${mode})`,
        );
      }
      if (mode === "onchain") {
        const onchain = await checker.check(q);
        return { authorized: onchain.authorized, ...base, onchain } satisfies CheckResult;
      }

      const [ix, oc] = await Promise.allSettled([indexed(q), checker.check(q)]);
      if (ix.status === "rejected") throw ix.reason;
      freshnessHeaders(set.headers, ix.value);
      if (oc.status === "rejected") {
        const err = oc.reason;
        if (err instanceof ChainUnavailableError) {
          throw new ChainUnavailableError(err.message, { indexed: ix.value.result });
        }
        throw err;
      }
      return {
        authorized: oc.value.authorized,
        ...base,
        indexed: ix.value.result,
        onchain: oc.value,
      } satisfies CheckResult;
    },
    { rateLimit: true, query: CheckQueryDoc, detail: checkDetail },
  );
}
