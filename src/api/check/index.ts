/** `GET /v0/auth/check`: is a wallet authorized for any of some plans on a module? Public, rate limited. */
import { Elysia } from "elysia";
import type { Server } from "bun";
import { ChainUnavailableError, InvalidParameterError, RateLimitedError } from "../errors";
import { createRateLimiter } from "../rate-limit";
import { parseAddress, parseChainId, parseEnum, parsePlanIds, type RawParams } from "../docs/params";
import { freshnessHeaders, isConfiguredChain, type RouteDeps } from "../health/freshness";
import { CHECK_MODES, CheckQueryDoc, checkDetail, type CheckResult } from "./model";
import { indexedCheck, onchainCheck, type CheckQuery, type IndexedAnswer } from "./service";

/**
 * Rate-limit key of a request: the first X-Forwarded-For hop when present (the service is meant to run behind a
 * proxy that sets it), else the socket's address, else "unknown".
 */
export function clientKey(request: Request, server: Server<unknown> | null | undefined): string {
  const forwarded = request.headers.get("x-forwarded-for");
  if (forwarded) {
    const first = forwarded.split(",")[0].trim();
    if (first) return first;
  }
  try {
    return server?.requestIP(request)?.address ?? "unknown";
  } catch {
    return "unknown";
  }
}

/** The check route. */
export function checkRoutes(deps: RouteDeps) {
  const limiter = createRateLimiter({ perMinute: deps.config.RATE_LIMIT_PER_MINUTE });

  const indexed = async (q: CheckQuery): Promise<IndexedAnswer> => {
    const answer = await indexedCheck(deps.sql, q);
    if (!answer.chainIndexed && !isConfiguredChain(deps, q.chainId)) {
      throw new InvalidParameterError("chain_id", `chain ${q.chainId} is not indexed by this service`);
    }
    return answer;
  };

  return new Elysia({ prefix: "/v0/auth", name: "check" }).get(
    "/check",
    async ({ query, request, server, set }) => {
      const decision = limiter.check(clientKey(request, server as Server<unknown> | null));
      if (!decision.ok) throw new RateLimitedError(decision.retryAfterSeconds);

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
        freshnessHeaders(set.headers, answer);
        return { authorized: answer.result.authorized, ...base, indexed: answer.result } satisfies CheckResult;
      }

      const client = deps.chains.get(q.chainId);
      if (!client) {
        throw new InvalidParameterError(
          "chain_id",
          `no RPC endpoint is configured for chain ${q.chainId} (needed by mode ${mode})`,
        );
      }
      if (mode === "onchain") {
        const onchain = await onchainCheck(client, q);
        return { authorized: onchain.authorized, ...base, onchain } satisfies CheckResult;
      }

      const [ix, oc] = await Promise.allSettled([indexed(q), onchainCheck(client, q)]);
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
    { query: CheckQueryDoc, detail: checkDetail },
  );
}
