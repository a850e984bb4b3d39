/**
 * The keeper of Base Spend Permissions (spend-permissions spec §5): with a merchant's spender key, it sends
 * `spend(permission, allowance − spent in period)` on the manager for each permission of that spender due now, once
 * per period. The module keeper's machinery carries it: one lock, nonce and claim set per key, a simulation before
 * every send, receipts, replacements and take-over (`core.ts`).
 */
import { decodeFunctionData, getAddress, hashTypedData, parseAbi, parseEventLogs, type Address } from "viem";
import { spendPermissionManagerAbi } from "../chain/abis";
import {
  SPEND_PERMISSION_TYPES,
  periodAt,
  remainingInPeriod,
  secondsToPeriodEnd,
  spendPermissionDomain,
  type SpendPermission,
} from "../domain/spend-permission";
import { createChargeSteps, createSimulator, type Charger, type KeeperCall } from "./charge";
import { keeperContext, runKeeper } from "./core";
import type { NonceManager } from "./nonce";
import type { Receipts } from "./receipts";
import { findDuePermissions, notePermissionFailure, type DuePermission } from "./spend-permission-queries";
import type { ChargeTarget, Keeper, KeeperBaseConfig, KeeperContext, KeeperOptions } from "./types";

/** The Spend Permission keeper's config: the chain's manager besides what every keeper reads. */
export type SpendPermissionKeeperConfig = KeeperBaseConfig & { manager: string };

// A `spend` the account refuses (the manager is no longer one of its owners) reverts with the account's error; with
// it in the ABI a simulation names that reason. A token's failure comes back as the manager's SafeERC20FailedOperation.
const spendAbi = [...spendPermissionManagerAbi, ...parseAbi(["error Unauthorized()"])];

/**
 * Reverts that mean "the index is behind": a charge of this period (by the merchant itself) or a revocation not
 * indexed yet. Logged quietly; the log that explains them restarts the failure count when it is indexed.
 */
const QUIET_SPEND_REVERTS = new Set(["ExceededSpendPermission", "UnauthorizedSpendPermission"]);

/** The struct `spend` takes, from a due row. */
function permissionOf(d: DuePermission): SpendPermission {
  return {
    account: getAddress(d.subscriber),
    spender: getAddress(d.spender),
    token: getAddress(d.token),
    allowance: BigInt(d.allowance),
    period: Number(d.period_s),
    start: Number(d.start_s),
    end: Number(d.end_s),
    salt: BigInt(d.salt),
    extraData: d.extra_data as `0x${string}`,
  };
}

/** The keeper's target: the manager's `spend(permission, value)`, a SpendPermissionUsed when mined. */
export function spendPermissionTarget(chainId: number, manager: Address): ChargeTarget {
  return {
    address: manager,
    decode: (input) => {
      try {
        const call = decodeFunctionData({ abi: spendPermissionManagerAbi, data: input });
        if (call.functionName !== "spend") return null;
        const hash = hashTypedData({
          domain: spendPermissionDomain(chainId, manager),
          types: SPEND_PERMISSION_TYPES,
          primaryType: "SpendPermission",
          message: call.args[0],
        });
        return { module: manager, subscriptionId: BigInt(hash).toString() };
      } catch {
        return null;
      }
    },
    outcome: (r) => {
      const used = parseEventLogs({ abi: spendPermissionManagerAbi, eventName: "SpendPermissionUsed", logs: r.logs });
      return used.length > 0 ? { outcome: "succeeded" } : null;
    },
  };
}

/**
 * The charge step: a permission is skipped when less than two poll intervals remain in its period (a spend mined
 * after the period's end would charge the next one and leave this one unpaid); else it is claimed and `spend` is
 * simulated from the spender at the pending block, and sent only when that passes. A failed simulation is counted
 * in `keeper_rechecks` (never an activity record) and retried on the schedule.
 */
function createPermissionCharger(
  ctx: KeeperContext,
  nonces: NonceManager,
  receipts: Receipts,
  pollMs: number,
): Charger<DuePermission> {
  const { sql, chainId, target, log } = ctx;
  const simulate = createSimulator(ctx);
  const steps = createChargeSteps(ctx, nonces, receipts);

  async function attempt(d: DuePermission, p: SpendPermission, now: number, at: bigint) {
    const subscriptionId = d.subscription_id;
    const lastPeriod =
      d.last_period_start === null
        ? null
        : {
            start: Number(d.last_period_start),
            end: Number(d.last_period_end),
            spend: BigInt(d.last_period_spent ?? 0),
          };
    const amount = remainingInPeriod(p, lastPeriod, now) ?? 0n;
    if (amount <= 0n) return "period_spent";
    const call: KeeperCall = { address: target.address, abi: spendAbi, functionName: "spend", args: [p, amount] };
    const sim = await simulate(call);
    if ("revert" in sim) {
      const failures = await notePermissionFailure(sql, {
        chainId,
        subscriptionId,
        at,
        periodEnd: periodAt(p, now)!.end,
        timesExecuted: d.times_executed,
      });
      // The subscriber's side (a short balance, the manager removed as owner), not the operator's: no warning.
      const fields = { subscriptionId, hash: d.hash, reason: sim.revert, failures };
      log(
        QUIET_SPEND_REVERTS.has(sim.revert) ? "debug" : "info",
        "spend would revert; retried on the schedule",
        fields,
      );
      return sim.revert;
    }
    return { call, amount };
  }

  return {
    async tryCharge(d, pass, result) {
      const p = permissionOf(d);
      const now = Number(pass.now);
      const left = secondsToPeriodEnd(p, now);
      if (left === null || left * 1000 < 2 * pollMs) {
        result.skipped.push({ module: d.module, subscriptionId: d.subscription_id, reason: "period_ending" });
        return;
      }
      await steps.claimed(d, result, async () => {
        const ready = await attempt(d, p, now, pass.now);
        if (typeof ready === "string") return ready;
        return steps.send(d, ready.call, pass, result, { hash: d.hash, amount: ready.amount.toString() });
      });
    },
  };
}

/**
 * Creates the Spend Permission keeper of one spender key on one chain: each pass, while it holds the key's lock, it
 * reads the spender's due permissions from the index and spends each one whose simulation passes.
 */
export function createSpendPermissionKeeper(opts: KeeperOptions<SpendPermissionKeeperConfig>): Keeper {
  const { config } = opts;
  const manager = getAddress(config.manager);
  const ctx = keeperContext(opts, spendPermissionTarget(config.chainId, manager));
  const retrySchedule = config.retrySchedule.length ? config.retrySchedule : [86_400];
  return runKeeper(ctx, opts, {
    findDue: (q) =>
      findDuePermissions(ctx.sql, { ...q, chainId: ctx.chainId, manager, spender: ctx.address, retrySchedule }),
    charger: (nonces, receipts) => createPermissionCharger(ctx, nonces, receipts, config.POLL_INTERVAL_MS),
    describe: { source: "spend_permission", manager },
  });
}
