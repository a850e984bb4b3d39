/** The renewal outlook of one indexed chain: its reader, evaluation loop and indexer hook, wired together. */
import type { Address } from "viem";
import type { Config } from "../common/config";
import type { Logger } from "../common/log";
import type { Sql } from "../db/client";
import type { IndexerHook } from "../indexer/hooks";
import { MULTICALL3_ADDRESS } from "../chain/multicall3";
import { renewalsHook } from "./hook";
import { createRenewalLoop, type RenewalLoop, type RenewalLoopOptions } from "./loop";
import { createRenewalReader } from "./reader";
import { upcomingEvents } from "./upcoming";
import { permissionUpcomingEvents } from "./permission-upcoming";
import type { ExtraEvents, OnEvents } from "../events/hook";
import { writeObservations } from "./observations";
import type { RenewalMetrics } from "../metrics/renewals";

/** What the indexer role starts per chain. */
export type ChainRenewals = {
  hook: IndexerHook;
  /**
   * The `renewal_upcoming` events of a batch (module subscriptions and spend permissions), for the events hook (none
   * when RENEWAL_NOTICE_S is 0).
   */
  upcoming: ExtraEvents;
  loop: RenewalLoop;
  start(isLeader: () => boolean): void;
  stop(): Promise<void>;
};

/** The renewals of one chain, from the service's configuration (RENEWAL_*, MULTICALL_ADDRESS_<id>). */
export function chainRenewals(opts: {
  sql: Sql;
  config: Pick<
    Config,
    | "RENEWAL_HORIZON_S"
    | "RENEWAL_NOTICE_S"
    | "RENEWAL_CHECK_INTERVAL_S"
    | "RENEWAL_RPC_CONCURRENCY"
    | "RPC_TIMEOUT_MS"
    | "multicallAddresses"
  >;
  chain: { chainId: number; rpcUrl: string; processor: string; pollIntervalMs: number };
  log?: Logger;
  /** The webhook fan-out of the observation events, in their transaction. */
  onEvents?: OnEvents;
  /** Metrics: each pass, and each charge against the outlook that stood for it. */
  metrics?: Pick<RenewalMetrics, "pass" | "prediction">;
  extra?: Pick<RenewalLoopOptions, "onPass" | "now" | "walletsPerPass">;
}): ChainRenewals {
  const { config, chain } = opts;
  const reader = createRenewalReader({
    rpcUrl: chain.rpcUrl,
    processor: chain.processor,
    multicall: (config.multicallAddresses[chain.chainId] as Address | undefined) ?? MULTICALL3_ADDRESS,
    concurrency: config.RENEWAL_RPC_CONCURRENCY,
    // A chunk of 1,500 calls does more work than one indexer call: a longer budget than RPC_TIMEOUT_MS alone.
    timeoutMs: Math.max(config.RPC_TIMEOUT_MS, 30_000),
  });
  let leader: () => boolean = () => false;
  const loop = createRenewalLoop({
    sql: opts.sql,
    chainId: chain.chainId,
    reader,
    isLeader: () => leader(),
    horizonS: config.RENEWAL_HORIZON_S,
    intervalS: config.RENEWAL_CHECK_INTERVAL_S,
    pollMs: Math.max(chain.pollIntervalMs, 100),
    log: opts.log,
    onPass: opts.metrics ? (r) => opts.metrics!.pass(chain.chainId, r) : undefined,
    onSaved: async (tx, rows, checked) => {
      await writeObservations(tx, chain.chainId, rows, checked, opts.onEvents);
    },
    ...opts.extra,
  });
  return {
    hook: renewalsHook(loop, opts.metrics?.prediction),
    upcoming: async (tx, ctx, inFlight) => [
      ...(await upcomingEvents(tx, ctx, inFlight, config.RENEWAL_NOTICE_S)),
      ...(await permissionUpcomingEvents(tx, ctx, inFlight, config.RENEWAL_NOTICE_S)),
    ],
    loop,
    start(isLeader) {
      leader = isLeader;
      loop.start();
    },
    stop: () => loop.stop(),
  };
}
