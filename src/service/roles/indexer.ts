import { zeroAddress } from "viem";
import { withPermissionEvents } from "../../events/spend-permission-events";
import { publicClientFor } from "../../chain/clients";
import { requireChain } from "../../common/config";
import { createIndexer, type Indexer } from "../../indexer";
import { statsRollupsHook } from "../../indexer/rollups";
import { eventsHook } from "../../events/hook";
import { mrrAnalytics } from "../../analytics/hook";
import { enqueueFanOut } from "../../webhooks/fanout";
import { chainRenewals, type ChainRenewals } from "../../renewals";
import type { Role } from "../context";

/**
 * Role `indexer`: follows each configured chain into the database, one indexer per chain, each with its own poll
 * loop, RPC client and leader lock (so one chain's failing RPC or reorg never holds another back, and the chains
 * of a deployment can also be split over processes).
 */
export const indexerRole: Role = {
  name: "indexer",
  async start({ config, db, notifier, chains, log, service, indexerHooks, metrics }) {
    requireChain(config);
    const started: Indexer[] = [];
    const renewals: ChainRenewals[] = [];
    for (const chain of chains.indexed ?? []) {
      // Renewal outlooks: evaluated by this chain's indexer leader, with their own RPC client (renewals.md §3).
      const outlooks = chainRenewals({
        sql: db.sql,
        config,
        // A permission-only chain has no module subscriptions, so nothing is ever read from its (absent) processor.
        chain: { ...chain, processor: chain.processor ?? zeroAddress },
        log,
        onEvents: enqueueFanOut,
        metrics: metrics?.renewals,
      });
      const mrr = mrrAnalytics();
      const indexer = createIndexer({
        sql: db.sql,
        db,
        client: chains.get(chain.chainId) ?? publicClientFor(chain.rpcUrl, config.RPC_TIMEOUT_MS),
        config: {
          PROCESSOR_ADDRESS: chain.processor ?? undefined,
          START_BLOCK: chain.startBlock,
          CONFIRMATIONS: chain.confirmations,
          POLL_INTERVAL_MS: chain.pollIntervalMs,
          chainId: chain.chainId,
          spendPermissions: chain.spendPermissions,
          // The subscription goes with RPC_URL (the same provider and key).
          wsUrl: chain.rpcVariable === "RPC_URL" ? config.RPC_WS_URL : undefined,
        },
        notifier,
        log,
        tuning: { deferIndexes: config.BACKFILL_DEFER_INDEXES === "1" },
        hooks: [
          statsRollupsHook(),
          eventsHook({ onEvents: enqueueFanOut, extra: withPermissionEvents(outlooks.upcoming), derive: mrr.derive }),
          mrr.hook,
          outlooks.hook,
          ...indexerHooks,
        ],
        observer: metrics?.indexer(chain.chainId),
      });
      await indexer.start();
      started.push(indexer);
      outlooks.start(() => indexer.status().leader);
      renewals.push(outlooks);
      service.indexers.set(chain.chainId, indexer);
    }
    service.indexer = service.indexers.get(chains.defaultChainId) ?? started[0];
    return async () => {
      await Promise.all(renewals.map((r) => r.stop()));
      await Promise.all(started.map((i) => i.stop()));
    };
  },
};
