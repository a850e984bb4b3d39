import { publicClientFor } from "../../chain/clients";
import { requireChain } from "../../common/config";
import { createIndexer } from "../../indexer";
import { statsRollupsHook } from "../../indexer/rollups";
import { eventsHook } from "../../events/hook";
import { fanOut } from "../../webhooks/fanout";
import type { Role } from "../context";

/** Role `indexer`: follows the chain into the database (one leader per chain, the others wait as standbys). */
export const indexerRole: Role = {
  name: "indexer",
  async start({ config, db, notifier, chains, chainId, log, service, indexerHooks, metrics }) {
    requireChain(config);
    const indexer = createIndexer({
      sql: db.sql,
      db,
      client: chains.get(chainId) ?? publicClientFor(config.RPC_URL, config.RPC_TIMEOUT_MS),
      config: {
        PROCESSOR_ADDRESS: config.PROCESSOR_ADDRESS,
        START_BLOCK: config.START_BLOCK,
        CONFIRMATIONS: config.CONFIRMATIONS,
        POLL_INTERVAL_MS: config.POLL_INTERVAL_MS,
        chainId,
      },
      notifier,
      log,
      hooks: [statsRollupsHook(), eventsHook({ onEvents: fanOut }), ...indexerHooks],
      observer: metrics?.indexer(chainId),
    });
    await indexer.start();
    service.indexer = indexer;
    return () => indexer.stop();
  },
};
