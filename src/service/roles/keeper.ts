import { createWalletClient, http, parseGwei } from "viem";
import { privateKeyToAccount } from "viem/accounts";
import { publicClientFor } from "../../chain/clients";
import { chainDefinition } from "../../chain/define";
import { requireChain } from "../../common/config";
import { createKeeper } from "../../keeper";
import type { Role } from "../context";

/** Role `keeper`: charges due subscriptions while it holds its key's lock; stays off without KEEPER_PRIVATE_KEY. */
export const keeperRole: Role = {
  name: "keeper",
  async start({ config, opts, db, chains, chainId, log, service, metrics }) {
    if (!config.KEEPER_PRIVATE_KEY) {
      log("info", "keeper off: KEEPER_PRIVATE_KEY is not set", {});
      return null;
    }
    requireChain(config);
    const wallet = createWalletClient({
      account: privateKeyToAccount(config.KEEPER_PRIVATE_KEY as `0x${string}`),
      chain: chainDefinition(chainId, config.RPC_URL),
      transport: http(config.RPC_URL, { timeout: config.RPC_TIMEOUT_MS, retryCount: 0 }),
    });
    const client = chains.get(chainId) ?? publicClientFor(config.RPC_URL, config.RPC_TIMEOUT_MS);
    const address = wallet.account.address;
    const keeper = createKeeper({
      ...opts.keeper,
      sql: db.sql,
      client,
      observer: metrics?.keeper(chainId, () => client.getBalance({ address })),
      wallet,
      config: {
        chainId,
        PROCESSOR_ADDRESS: config.PROCESSOR_ADDRESS,
        POLL_INTERVAL_MS: config.POLL_INTERVAL_MS,
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
    service.keeper = keeper;
    return () => keeper.stop();
  },
};
