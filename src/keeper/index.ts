import { getAddress } from "viem";
import { subscriptionProcessorAbi } from "../chain/abis";
import { createCharger, processorTarget } from "./charge";
import { keeperContext, runKeeper } from "./core";
import { findDueSubscriptions } from "./queries";
import type { Keeper, KeeperContext, KeeperOptions } from "./types";

export { KeeperConfigError } from "./errors";
export { createSpendPermissionKeeper, type SpendPermissionKeeperConfig } from "./spend-permissions";
export type * from "./types";

/** Warns when the processor does not allow the key. */
async function processorChecks(ctx: KeeperContext) {
  const { client, address, target, log } = ctx;
  const allowed = await client.readContract({
    address: target.address,
    abi: subscriptionProcessorAbi,
    functionName: "isKeeper",
    args: [address],
  });
  if (!allowed) log("warn", "keeper address is not an allowed keeper of the processor", { keeper: address });
}

/**
 * Creates the keeper of module subscriptions: each pass, while it holds its key's lock, reads due subscriptions from
 * the index and sends `charge(module, id)` for each one whose simulation passes; receipts are collected (and slow
 * transactions replaced) on later passes.
 */
export function createKeeper(opts: KeeperOptions): Keeper {
  const { config } = opts;
  const processor = getAddress(config.PROCESSOR_ADDRESS);
  const ctx = keeperContext(opts, processorTarget(processor));
  const retrySchedule = config.retrySchedule.length ? config.retrySchedule : [86_400];
  return runKeeper(ctx, opts, {
    findDue: (q) =>
      findDueSubscriptions(ctx.sql, {
        ...q,
        chainId: ctx.chainId,
        retrySchedule,
        maxAttempts: config.maxAttempts,
        recheckIntervalS: config.recheckIntervalS,
      }),
    charger: (nonces, receipts) => createCharger(ctx, nonces, receipts),
    startChecks: () => processorChecks(ctx),
    describe: { processor, maxAttempts: config.maxAttempts, recheckIntervalS: config.recheckIntervalS },
  });
}
