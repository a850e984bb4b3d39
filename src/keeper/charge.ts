import { encodeFunctionData, getAbiItem, getAddress, type Address } from "viem";
import { subscriptionProcessorAbi } from "../chain/abis";
import { ClaimTakenError, QUIET_REVERTS, revertName } from "./errors";
import { capFees, currentFees } from "./fees";
import type { NonceManager } from "./nonce";
import { claimSubscription, noteRecheck, recordOnClaim, releaseClaim, type DueSubscription } from "./queries";
import type { Receipts } from "./receipts";
import type { Fees, KeeperContext, TickResult } from "./types";

/** What one pass knows before it tries its charges. */
export type PassContext = {
  now: bigint;
  /** Newest indexed block, or null before the first batch. */
  indexed: bigint | null;
  head: bigint;
  baseFee: bigint | null;
  /** Network fees, read once per pass by the first send. */
  fees?: Promise<Fees>;
};

/** Tries one due subscription: claim, simulate, send (or skip with a reason). */
export type Charger = { tryCharge: (due: DueSubscription, pass: PassContext, result: TickResult) => Promise<void> };

const chargeFailedEvent = getAbiItem({ abi: subscriptionProcessorAbi, name: "ChargeFailed" });

/** `charge(module, id)` on the processor, to spread into viem's contract actions. */
const chargeCall = (processor: Address, module: Address, id: bigint) =>
  ({ address: processor, abi: subscriptionProcessorAbi, functionName: "charge", args: [module, id] }) as const;

/** eth_call of the charge against the next block: `success` false means it would record a ChargeFailed. */
function createSimulator(ctx: KeeperContext) {
  // Some RPCs refuse calls on the pending block; the latest one is the next best.
  let blockTag: "pending" | "latest" = "pending";
  return async function simulate(module: Address, id: bigint): Promise<{ success: boolean } | { revert: string }> {
    try {
      const call = { ...chargeCall(ctx.processor, module, id), account: ctx.address, blockTag };
      return { success: (await ctx.client.simulateContract(call)).result };
    } catch (err) {
      const name = revertName(err);
      if (name) return { revert: name };
      if (blockTag === "pending" && /pending|block tag|not supported|unsupported/i.test(String(err))) {
        blockTag = "latest";
        return simulate(module, id);
      }
      throw err;
    }
  };
}

/** Whether a ChargeFailed for this subscription was mined after the indexed block (another keeper's). */
async function freshFailureOnChain(ctx: KeeperContext, module: Address, id: bigint, pass: PassContext) {
  const { indexed, head } = pass;
  if (indexed === null || indexed >= head) return false;
  const fromBlock = indexed + 1n > head - 1000n ? indexed + 1n : head - 1000n;
  const logs = await ctx.client.getLogs({
    address: ctx.processor,
    event: chargeFailedEvent,
    args: { module, subscriptionId: id },
    fromBlock,
    toBlock: head,
  });
  return logs.length > 0;
}

/** A warning that repeats every pass (NotKeeper: this key is not allowed; a fee cap) is said once a minute. */
function createWarnOnce(ctx: KeeperContext) {
  const lastWarned = new Map<string, number>();
  return (kind: string, msg: string, fields: Record<string, unknown>) => {
    const last = lastWarned.get(kind) ?? 0;
    if (Date.now() - last < 60_000) return ctx.log("debug", msg, fields);
    lastWarned.set(kind, Date.now());
    const hint = kind === "NotKeeper" ? { keeper: ctx.address, hint: "the protocol owner must call setKeeper" } : {};
    ctx.log("warn", msg, { ...fields, ...hint });
  };
}

/** Creates the charge step of one keeper. */
export function createCharger(ctx: KeeperContext, nonces: NonceManager, receipts: Receipts): Charger {
  const { sql, client, chainId, processor, address, owner, log } = ctx;
  const simulate = createSimulator(ctx);
  const warnOnce = createWarnOnce(ctx);

  /** Simulates, then sends; returns a skip reason, or undefined once the charge is sent. */
  async function attempt(due: DueSubscription, pass: PassContext, result: TickResult): Promise<string | undefined> {
    const subscriptionId = due.subscription_id;
    const module = getAddress(due.module);
    const id = BigInt(subscriptionId);
    const sim = await simulate(module, id);
    if ("revert" in sim) {
      if (QUIET_REVERTS.has(sim.revert)) log("debug", "charge skipped", { subscriptionId, reason: sim.revert });
      else warnOnce(sim.revert, "charge would revert", { subscriptionId, module: due.module, reason: sim.revert });
      return sim.revert;
    }
    // Past its attempts (never paid): only a charge that would succeed is sent; approve() is not indexed.
    if (due.recheck && !sim.success) {
      await noteRecheck(sql, { chainId, subscriptionId, at: pass.now });
      return "attempts_exhausted";
    }
    // A payment failure changes no state, so a second keeper would record the same failure again.
    if (!sim.success && (await freshFailureOnChain(ctx, module, id, pass))) return "failure_already_recorded";
    const estimate = await client.estimateContractGas({ ...chargeCall(processor, module, id), account: address });
    pass.fees ??= currentFees(client);
    const fees = capFees(await pass.fees, ctx.maxFeePerGas, pass.baseFee);
    if (!fees) {
      warnOnce("fee_cap", "network fees are above KEEPER_MAX_FEE_GWEI; waiting", { subscriptionId });
      return "fee_cap";
    }
    const data = encodeFunctionData({ abi: subscriptionProcessorAbi, functionName: "charge", args: [module, id] });
    const tx = { data, gas: (estimate * 12n) / 10n + 10_000n, fees };
    // The claim names the transaction before the node has it: a keeper killed after the broadcast leaves a claim
    // that a new holder of the key can check, instead of one it would take as never sent.
    const { hash, nonce } = await nonces.send(
      tx,
      recordOnClaim(sql, { chainId, subscriptionId, owner, ttlMs: ctx.claimTtlMs }),
    );
    receipts.track({ module: due.module, subscriptionId, nonce, tx, hash });
    result.sent.push({ module: due.module, subscriptionId, hash });
    ctx.observer?.charge("sent");
    log("info", "charge sent", { subscriptionId, module: due.module, tx: hash, nonce, expectFailure: !sim.success });
    return undefined;
  }

  return {
    async tryCharge(due, pass, result) {
      const subscriptionId = due.subscription_id;
      const skip = (reason: string) => result.skipped.push({ module: due.module, subscriptionId, reason });
      if (!(await claimSubscription(sql, { chainId, subscriptionId, owner, ttlMs: ctx.claimTtlMs })))
        return void skip("claimed");
      let sent = false;
      try {
        const reason = await attempt(due, pass, result);
        sent = reason === undefined;
        if (reason) skip(reason);
      } catch (err) {
        sent = receipts.has(subscriptionId);
        const name = revertName(err);
        if (err instanceof ClaimTakenError) {
          // Our claim expired and another keeper took it between the claim and the send: nothing was broadcast.
          log("debug", "charge skipped", { subscriptionId, reason: "claimed" });
          skip("claimed");
        } else if (name) {
          // The estimate or the send itself reverted: the state moved between simulation and now.
          log(QUIET_REVERTS.has(name) ? "debug" : "warn", "charge skipped", { subscriptionId, reason: name });
          skip(name);
        } else {
          result.errors += 1;
          log("warn", "charge attempt failed", { subscriptionId, err });
        }
      } finally {
        if (!sent) await releaseClaim(sql, { chainId, subscriptionId, owner }).catch(() => {});
      }
    },
  };
}
