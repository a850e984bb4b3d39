import { createWalletClient, http, parseGwei } from "viem";
import { privateKeyToAccount } from "viem/accounts";
import { publicClientFor } from "../../chain/clients";
import { chainDefinition } from "../../chain/define";
import { requireChain } from "../../common/config";
import { createKeeper, type Keeper } from "../../keeper";
import type { Role } from "../context";

/** Role `keeper`: charges due subscriptions while it holds its key's lock; stays off without KEEPER_PRIVATE_KEY. */
export const keeperRole: Role = {
  name: "keeper",
  async start({ config, opts, db, chains, log, service, metrics }) {
    if (!config.KEEPER_PRIVATE_KEY) {
      log("info", "keeper off: KEEPER_PRIVATE_KEY is not set", {});
      return null;
    }
    requireChain(config);
    const account = privateKeyToAccount(config.KEEPER_PRIVATE_KEY as `0x${string}`);
    const started: Keeper[] = [];
    // One keeper per chain with the same key: nonces, locks and claims are per chain.
    for (const chain of chains.indexed ?? []) {
      const chainId = chain.chainId;
      // The keeper charges module subscriptions through the processor: a permission-only chain has none.
      if (!chain.processor) continue;
      const wallet = createWalletClient({
        account,
        chain: chainDefinition(chainId, chain.rpcUrl),
        transport: http(chain.rpcUrl, { timeout: config.RPC_TIMEOUT_MS, retryCount: 0 }),
      });
      const client = chains.get(chainId) ?? publicClientFor(chain.rpcUrl, config.RPC_TIMEOUT_MS);
      const keeper = createKeeper({
        ...opts.keeper,
        sql: db.sql,
        client,
        observer: metrics?.keeper(chainId, () => client.getBalance({ address: account.address })),
        wallet,
        config: {
          chainId,
          PROCESSOR_ADDRESS: chain.processor,
          POLL_INTERVAL_MS: chain.pollIntervalMs,
          retrySchedule: config.retrySchedule,
          maxAttempts: config.KEEPER_MAX_ATTEMPTS ?? config.retrySchedule.length,
          recheckIntervalS: config.KEEPER_RECHECK_INTERVAL_S,
          txDeadlineMs: config.KEEPER_TX_DEADLINE_MS,
          maxFeePerGas: parseGwei(config.KEEPER_MAX_FEE_GWEI),
        },
        dbKind: db.kind,
        log,
      });
      await keeper.start();
      started.push(keeper);
      service.keepers.set(chainId, keeper);
    }
    service.keeper = service.keepers.get(chains.defaultChainId) ?? started[0];
    return async () => {
      await Promise.all(started.map((k) => k.stop()));
    };
  },
};
