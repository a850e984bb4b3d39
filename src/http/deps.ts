import type { Sql } from "../db/client";
import type { Config } from "../common/config";
import type { ChainRegistry } from "../chain/clients";
import type { Notifier } from "../db/notify";
import type { ApiCaches } from "./cache";
import type { ChainState } from "./chain-state";

/** What the HTTP app needs from the process around it. */
export type AppDeps = {
  sql: Sql;
  config: Config;
  chains: ChainRegistry;
  notifier?: Notifier;
  /**
   * Response caches of the check and activity routes (src/http/cache.ts). Default: created over `notifier` with the
   * code defaults, and stopped with the app; without a notifier nothing is cached.
   */
  caches?: ApiCaches;
};

/** What every `/v0` feature receives: the app's dependencies plus the shared chain cache. */
export type RouteDeps = AppDeps & { chainState: ChainState };
