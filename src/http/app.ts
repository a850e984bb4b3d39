import { Elysia } from "elysia";
import type { AppDeps, RouteDeps } from "./deps";
import { createAppLimiter, createCredentialLimiter } from "./deps";
import { createErrorHandler } from "./plugins/error-handler";
import { bodyLimit, serveOptions } from "./plugins/body-limit";
import { textGuard } from "./plugins/text-guard";
import { idempotency } from "./plugins/idempotency";
import { requestMetrics } from "./plugins/request-metrics";
import { siweRoutes } from "./features/siwe";
import { activityRoutes } from "./features/activity";
import { subscriptionRoutes } from "./features/subscriptions";
import { renewalRoutes } from "./features/renewals";
import { checkRoutes } from "./features/check";
import { healthRoutes } from "./features/health";
import { createChainState } from "./chain-state";
import { docsRoutes } from "./features/docs";
import { webhooksSection } from "./features/docs/webhooks";
import { createApiCaches } from "./caches";
import { createLogger } from "../common/log";
import { statsRoutes } from "./features/stats";
import { eventRoutes } from "./features/events";
import { webhookRoutes } from "./features/webhooks";
import { apiKeyRoutes } from "./features/api-keys";
import { dashboardRoutes } from "./features/dashboard";

/** Builds the HTTP app: every `/v0` feature plus health and docs, over one rate-limit store per client and per credential. */
export function createApp(deps: AppDeps) {
  // Index reads (and the freshness they report) come from the replica when there is one; auth and writes from
  // the primary, so a key or session just written is found at once.
  const readSql = deps.readSql ?? deps.sql;
  const chainState = createChainState({ sql: readSql, notifier: deps.notifier });
  const limiter = createAppLimiter(deps.config, deps.now);
  const credentialLimiter = createCredentialLimiter(deps.config, deps.now);
  const routeDeps: RouteDeps = { ...deps, readSql, chainState, limiter, credentialLimiter };
  const caches = deps.caches ?? createApiCaches({ notifier: deps.notifier, sql: readSql });
  const log = deps.log ?? createLogger(deps.config.LOG_LEVEL);
  return new Elysia({ serve: serveOptions })
    .use(requestMetrics(deps.observeRequest))
    .use(createErrorHandler(log))
    .use(bodyLimit())
    .use(textGuard())
    .use(idempotency({ ...routeDeps, log }))
    .use(docsRoutes({ webhooks: webhooksSection() }))
    .use(healthRoutes(routeDeps))
    .use(siweRoutes(routeDeps))
    .use(activityRoutes(routeDeps, caches.activity))
    .use(subscriptionRoutes(routeDeps))
    .use(renewalRoutes(routeDeps))
    .use(checkRoutes(routeDeps, caches.check))
    .use(statsRoutes(routeDeps))
    .use(eventRoutes(routeDeps))
    .use(webhookRoutes(routeDeps))
    .use(apiKeyRoutes(routeDeps))
    .use(dashboardRoutes())
    .onStop(async () => {
      await chainState.stop();
      if (!deps.caches) await caches.stop();
    });
}
