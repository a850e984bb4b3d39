import type { RequestObserver } from "./plugins/request-metrics";
import { createClientLimiter, createKeyLimiter, type KeyLimiter } from "./rate-limit";
import { createMerchantLimiter, type MerchantLimiter } from "./merchant-limit";
import type { Sql } from "../db/client";
import type { Config } from "../common/config";
import type { ChainRegistry } from "../chain/clients";
import type { Notifier } from "../db/notify";
import type { ApiCaches } from "./caches";
import type { ChainState } from "./chain-state";
import type { ClientLimiter } from "./rate-limit";
import type { Logger } from "../common/log";

/** What the HTTP app needs from the process around it. */
export type AppDeps = {
  /** The primary: auth, sessions, keys, webhook endpoints and every write. */
  sql: Sql;
  /** DATABASE_READ_URL's replica for the index reads (default: `sql`). */
  readSql?: Sql;
  config: Config;
  chains: ChainRegistry;
  notifier?: Notifier;
  /**
   * Response caches of the check and activity routes (src/http/cache.ts). Default: created over `notifier` with the
   * code defaults, and stopped with the app; without a notifier nothing is cached.
   */
  caches?: ApiCaches;
  /** Where unexpected errors are logged (default: JSON lines on stdout at LOG_LEVEL). */
  log?: Logger;
  /** Reports each answered request (the `/metrics` listener's HTTP metrics). */
  observeRequest?: RequestObserver;
  /**
   * Whether the per-merchant buckets are shared with other API processes through `sql` (Postgres); false or absent:
   * kept in this process's memory (PGlite's one process).
   */
  sharedLimits?: boolean;
  /** Clock of the rate limits in ms (default `Date.now`); tests freeze it. */
  now?: () => number;
  /**
   * Whether cache hits of `GET /v0/auth/check` are answered before routing (default true). False sends every check
   * through the route: the reference that test/http/features/check-hot.test.ts compares the fast path with.
   */
  hotCheck?: boolean;
};

/** What every `/v0` feature receives: the app's dependencies plus the shared chain cache and rate-limit stores. */
export type RouteDeps = AppDeps & {
  readSql: Sql;
  chainState: ChainState;
  /** Per client address (RATE_LIMIT_PER_MINUTE). */
  limiter: ClientLimiter;
  /** Per credential (RATE_LIMIT_PER_KEY_PER_MINUTE). */
  credentialLimiter: KeyLimiter;
  /** Per merchant over all its credentials (RATE_LIMIT_PER_MERCHANT_PER_MINUTE), shared by the API processes. */
  merchantLimiter: MerchantLimiter;
};

/** The rate-limit store of an app, configured from RATE_LIMIT_PER_MINUTE, TRUSTED_PROXY_HOPS and CLIENT_IP_HEADER. */
export function createAppLimiter(config: Config, now?: () => number): ClientLimiter {
  return createClientLimiter({
    now,
    perMinute: config.RATE_LIMIT_PER_MINUTE,
    trustedProxyHops: config.TRUSTED_PROXY_HOPS,
    clientIpHeader: config.CLIENT_IP_HEADER,
  });
}

/** The per-credential store of an app (RATE_LIMIT_PER_KEY_PER_MINUTE), keyed by the credential's id. */
export function createCredentialLimiter(config: Config, now?: () => number): KeyLimiter {
  return createKeyLimiter({ perMinute: config.RATE_LIMIT_PER_KEY_PER_MINUTE, now });
}

/** The per-merchant store of an app (RATE_LIMIT_PER_MERCHANT_PER_MINUTE): through the primary with `sharedLimits`. */
export function createAppMerchantLimiter(
  deps: Pick<AppDeps, "sql" | "config" | "sharedLimits" | "now">,
): MerchantLimiter {
  return createMerchantLimiter({
    perMinute: deps.config.RATE_LIMIT_PER_MERCHANT_PER_MINUTE,
    sql: deps.sharedLimits ? deps.sql : undefined,
    now: deps.now,
  });
}
