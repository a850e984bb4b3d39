/** `/healthz` (liveness) and `/readyz` (readiness). */
import { Elysia } from "elysia";
import { UnavailableError } from "../../errors";
import type { RouteDeps } from "../../deps";
import { healthDetail, readyDetail } from "./model";
import { readiness } from "./service";

/** Health routes (no `/v0` prefix: they are for the operator's probes). */
export function healthRoutes(deps: RouteDeps) {
  return new Elysia({ name: "health" })
    .get("/healthz", () => ({ status: "ok" as const }), { detail: healthDetail })
    .get(
      "/readyz",
      async () => {
        let verdict;
        try {
          verdict = await readiness(deps.readSql, deps.config, deps.config.CHAINS ?? [deps.chains.defaultChainId]);
        } catch {
          throw new UnavailableError("not ready: the database does not answer");
        }
        if (!verdict.ready) {
          throw new UnavailableError("not ready", { reasons: verdict.reasons, chains: verdict.chains });
        }
        return { status: "ready" as const, chains: verdict.chains };
      },
      { detail: readyDetail },
    );
}
