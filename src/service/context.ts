import type { ChainRegistry } from "../chain/clients";
import type { Config } from "../common/config";
import type { Logger } from "../common/log";
import type { Db } from "../db/client";
import type { Notifier } from "../db/notify";
import type { IndexerHook } from "../indexer/hooks";
import type { Indexer } from "../indexer";
import type { Keeper, KeeperOptions } from "../keeper";
import type { Dispatcher } from "../webhooks/dispatcher";
import type { Metrics } from "../metrics";

/** Options for `startService`: everything defaults to what `bun start` does. */
export type ServiceOptions = {
  log?: Logger;
  /** An open database to use instead of opening DATABASE_URL / DATA_DIR; `stop` closes it too. */
  db?: Db;
  /** Keeper tuning (tests use short timeouts). */
  keeper?: Partial<Omit<KeeperOptions, "sql" | "client" | "wallet" | "config" | "log">>;
  /** How long `stop` lets in-flight HTTP requests finish before cutting them (default 10 s). */
  drainTimeoutMs?: number;
};

/** A started service. */
export type Service = {
  /** Base URL of the HTTP API (loopback address), or null when the `api` role is off. */
  url: string | null;
  port: number | null;
  roles: string[];
  chainId: number;
  db: Db;
  notifier: Notifier;
  /** The default chain's indexer and keeper; every chain's in `indexers` / `keepers`. */
  indexer?: Indexer;
  keeper?: Keeper;
  indexers: Map<number, Indexer>;
  keepers: Map<number, Keeper>;
  /** The Spend Permission keepers, one per chain and spender key of SPEND_PERMISSION_KEEPER_KEYS. */
  spendPermissionKeepers: { chainId: number; keeper: Keeper }[];
  webhooks?: Dispatcher;
  /** URL of `GET /metrics` when METRICS_PORT is set. */
  metricsUrl?: string;
  /** Graceful stop: HTTP drained, indexer batch and keeper pass finished, database closed. Idempotent. */
  stop: () => Promise<void>;
};

/** What every role gets when it starts; roles publish what they started on `service`. */
export type RoleContext = {
  config: Config;
  opts: ServiceOptions;
  db: Db;
  notifier: Notifier;
  chains: ChainRegistry;
  chainId: number;
  log: Logger;
  service: Service;
  /** Hooks registered by earlier roles, run inside the indexer's transactions. */
  indexerHooks: IndexerHook[];
  /** The metrics registry when METRICS_PORT is set. */
  metrics?: Metrics;
  /** DATABASE_READ_URL's replica, for the API's index reads. */
  readDb?: Db;
};

/** A part of the service that ROLES can switch on: `start` returns its stop, or null when it stays off. */
export type Role = {
  name: string;
  start: (ctx: RoleContext) => Promise<(() => Promise<void>) | null>;
};
