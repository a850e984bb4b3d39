import { createWalletClient, http, parseGwei, type PrivateKeyAccount } from "viem";
import { privateKeyToAccount } from "viem/accounts";
import { publicClientFor } from "../../chain/clients";
import { chainDefinition } from "../../chain/define";
import { requireChain, type ChainConfig } from "../../common/config";
import { createKeeper, createSpendPermissionKeeper, type Keeper } from "../../keeper";
import type { Role } from "../context";

/**
 * Role `keeper`: charges due subscriptions while it holds its key's lock (with KEEPER_PRIVATE_KEY), and due spend
 * permissions with each spender key of SPEND_PERMISSION_KEEPER_KEYS; stays off without either.
 */
export const keeperRole: Role = {
  name: "keeper",
  async start({ config, opts, db, chains, log, service, metrics }) {
    const indexed = chains.indexed ?? [];
    const permissionKeys = indexed.some((c) => c.spendPermissions?.keeperKeys?.length);
    if (!config.KEEPER_PRIVATE_KEY && !permissionKeys) {
      log("info", "keeper off: neither KEEPER_PRIVATE_KEY nor SPEND_PERMISSION_KEEPER_KEYS is set", {});
      return null;
    }
    requireChain(config);
    const started: Keeper[] = [];
    const walletOf = (account: PrivateKeyAccount, chain: ChainConfig & { chainId: number }) =>
      createWalletClient({
        account,
        chain: chainDefinition(chain.chainId, chain.rpcUrl),
        transport: http(chain.rpcUrl, { timeout: config.RPC_TIMEOUT_MS, retryCount: 0 }),
      });
    const settings = {
      retrySchedule: config.retrySchedule,
      txDeadlineMs: config.KEEPER_TX_DEADLINE_MS,
      maxFeePerGas: parseGwei(config.KEEPER_MAX_FEE_GWEI),
    };
    const account = config.KEEPER_PRIVATE_KEY ? privateKeyToAccount(config.KEEPER_PRIVATE_KEY as `0x${string}`) : null;
    // One keeper per chain and key: nonces, locks and claims are per chain and key.
    for (const chain of indexed) {
      const chainId = chain.chainId;
      const client = chains.get(chainId) ?? publicClientFor(chain.rpcUrl, config.RPC_TIMEOUT_MS);
      const common = { ...opts.keeper, sql: db.sql, client, dbKind: db.kind, log };
      // Module subscriptions are charged through the processor: a permission-only chain has none.
      if (account && chain.processor) {
        const keeper = createKeeper({
          ...common,
          observer: metrics?.keeper(chainId, () => client.getBalance({ address: account.address }), {
            source: "subscription_module",
            address: account.address,
          }),
          wallet: walletOf(account, chain),
          config: {
            ...settings,
            chainId,
            PROCESSOR_ADDRESS: chain.processor,
            POLL_INTERVAL_MS: chain.pollIntervalMs,
            maxAttempts: config.KEEPER_MAX_ATTEMPTS ?? config.retrySchedule.length,
            recheckIntervalS: config.KEEPER_RECHECK_INTERVAL_S,
          },
        });
        await keeper.start();
        started.push(keeper);
        service.keepers.set(chainId, keeper);
      }
      const sp = chain.spendPermissions;
      for (const key of sp?.keeperKeys ?? []) {
        const spender = privateKeyToAccount(key as `0x${string}`);
        const keeper = createSpendPermissionKeeper({
          ...common,
          observer: metrics?.keeper(chainId, () => client.getBalance({ address: spender.address }), {
            source: "spend_permission",
            address: spender.address,
          }),
          wallet: walletOf(spender, chain),
          config: { ...settings, chainId, manager: sp!.manager, POLL_INTERVAL_MS: chain.pollIntervalMs },
        });
        await keeper.start();
        started.push(keeper);
        service.spendPermissionKeepers.push({ chainId, keeper });
      }
    }
    service.keeper = service.keepers.get(chains.defaultChainId) ?? service.keepers.values().next().value;
    return async () => {
      await Promise.all(started.map((k) => k.stop()));
    };
  },
};
