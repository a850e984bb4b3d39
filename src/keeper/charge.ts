import {
  decodeFunctionData,
  encodeFunctionData,
  getAbiItem,
  getAddress,
  parseEventLogs,
  type Abi,
  type Address,
  type EncodeFunctionDataParameters,
} from "viem";
import { subscriptionProcessorAbi } from "../chain/abis";
import { failureReasonName } from "../domain/failure-reasons";
import { ClaimTakenError, QUIET_REVERTS, revertName } from "./errors";
import { capFees, currentFees } from "./fees";
import type { NonceManager } from "./nonce";
import { claimSubscription, noteRecheck, recordOnClaim, releaseClaim, type DueSubscription } from "./queries";
import type { Receipts } from "./receipts";
import type { ChargeTarget, Fees, KeeperContext, TickResult } from "./types";

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

/** What a pass needs of a due item: its id, and the wallet and token whose balance it draws on. */
export type DueCharge = { module: string; subscription_id: string; subscriber: string; token: string };

/** Tries one due item: claim, simulate, send (or skip with a reason). */
export type Charger<D extends DueCharge = DueSubscription> = {
  tryCharge: (due: D, pass: PassContext, result: TickResult) => Promise<void>;
};

/** One contract call of the keeper, to spread into viem's contract actions. */
export type KeeperCall = { address: Address; abi: Abi; functionName: string; args: readonly unknown[] };

const chargeFailedEvent = getAbiItem({ abi: subscriptionProcessorAbi, name: "ChargeFailed" });

/** `charge(module, id)` on the processor, to spread into viem's contract actions. */
const chargeCall = (processor: Address, module: Address, id: bigint) =>
  ({ address: processor, abi: subscriptionProcessorAbi, functionName: "charge", args: [module, id] }) as const;

/** The module keeper's target: the processor's `charge(module, id)`, ChargeSucceeded or ChargeFailed when mined. */
export function processorTarget(processor: Address): ChargeTarget {
  return {
    address: processor,
    decode: (input) => {
      try {
        const call = decodeFunctionData({ abi: subscriptionProcessorAbi, data: input });
        if (call.functionName !== "charge") return null;
        return { module: call.args[0], subscriptionId: call.args[1].toString() };
      } catch {
        return null;
      }
    },
    outcome: (r) => {
      const [ev] = parseEventLogs({
        abi: subscriptionProcessorAbi,
        eventName: ["ChargeSucceeded", "ChargeFailed"],
        logs: r.logs,
      });
      if (ev?.eventName === "ChargeSucceeded") return { outcome: "succeeded" };
      if (ev?.eventName === "ChargeFailed")
        return { outcome: "failed", reason: failureReasonName(Number(ev.args.reason)) };
      return null;
    },
  };
}

/** eth_call of a call from the keeper against the next block: its result, or the name of its revert. */
export function createSimulator(ctx: KeeperContext) {
  // Some RPCs refuse calls on the pending block; the latest one is the next best.
  let blockTag: "pending" | "latest" = "pending";
  return async function simulate(call: KeeperCall): Promise<{ result: unknown } | { revert: string }> {
    try {
      return { result: (await ctx.client.simulateContract({ ...call, account: ctx.address, blockTag })).result };
    } catch (err) {
      const name = revertName(err);
      if (name) return { revert: name };
      if (blockTag === "pending" && /pending|block tag|not supported|unsupported/i.test(String(err))) {
        blockTag = "latest";
        return simulate(call);
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
    address: ctx.target.address,
    event: chargeFailedEvent,
    args: { module, subscriptionId: id },
    fromBlock,
    toBlock: head,
  });
  return logs.length > 0;
}

/** A warning that repeats every pass (NotKeeper: this key is not allowed; a fee cap) is said once a minute. */
export function createWarnOnce(ctx: KeeperContext) {
  const lastWarned = new Map<string, number>();
  return (kind: string, msg: string, fields: Record<string, unknown>) => {
    const last = lastWarned.get(kind) ?? 0;
    if (Date.now() - last < 60_000) return ctx.log("debug", msg, fields);
    lastWarned.set(kind, Date.now());
    const hint = kind === "NotKeeper" ? { keeper: ctx.address, hint: "the protocol owner must call setKeeper" } : {};
    ctx.log("warn", msg, { ...fields, ...hint });
  };
}

/**
 * The steps every charge takes, whatever it calls: `claimed` holds the database claim around an attempt (released
 * unless a transaction was sent), `send` estimates, prices within the fee cap and sends a call recorded on the claim
 * before its broadcast.
 */
export function createChargeSteps(ctx: KeeperContext, nonces: NonceManager, receipts: Receipts) {
  const { sql, client, chainId, address, owner, log } = ctx;
  const warnOnce = createWarnOnce(ctx);

  /** Sends `call` for `due`; returns a skip reason, or undefined once the charge is sent. */
  async function send(
    due: DueCharge,
    call: KeeperCall,
    pass: PassContext,
    result: TickResult,
    fields: Record<string, unknown> = {},
  ): Promise<string | undefined> {
    const subscriptionId = due.subscription_id;
    const estimate = await client.estimateContractGas({ ...call, account: address });
    pass.fees ??= currentFees(client);
    const fees = capFees(await pass.fees, ctx.maxFeePerGas, pass.baseFee);
    if (!fees) {
      warnOnce("fee_cap", "network fees are above KEEPER_MAX_FEE_GWEI; waiting", { subscriptionId });
      return "fee_cap";
    }
    const data = encodeFunctionData(call as EncodeFunctionDataParameters);
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
    log("info", "charge sent", { subscriptionId, module: due.module, tx: hash, nonce, ...fields });
    return undefined;
  }

  /** Claims `due`, runs `attempt` (a skip reason, or undefined once sent), and releases the claim unless it sent. */
  async function claimed(due: DueCharge, result: TickResult, attempt: () => Promise<string | undefined>) {
    const subscriptionId = due.subscription_id;
    const skip = (reason: string) => result.skipped.push({ module: due.module, subscriptionId, reason });
    if (!(await claimSubscription(sql, { chainId, subscriptionId, owner, ttlMs: ctx.claimTtlMs })))
      return void skip("claimed");
    let sent = false;
    try {
      const reason = await attempt();
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
  }

  return { send, claimed, warnOnce };
}

/** Creates the charge step of one module keeper: `charge(module, id)` on the processor. */
export function createCharger(ctx: KeeperContext, nonces: NonceManager, receipts: Receipts): Charger {
  const { sql, chainId, log } = ctx;
  const simulate = createSimulator(ctx);
  const steps = createChargeSteps(ctx, nonces, receipts);

  /** Simulates, then sends; returns a skip reason, or undefined once the charge is sent. */
  async function attempt(due: DueSubscription, pass: PassContext, result: TickResult): Promise<string | undefined> {
    const subscriptionId = due.subscription_id;
    const module = getAddress(due.module);
    const id = BigInt(subscriptionId);
    const call = chargeCall(ctx.target.address, module, id);
    const sim = await simulate(call);
    if ("revert" in sim) {
      if (QUIET_REVERTS.has(sim.revert)) log("debug", "charge skipped", { subscriptionId, reason: sim.revert });
      else
        steps.warnOnce(sim.revert, "charge would revert", { subscriptionId, module: due.module, reason: sim.revert });
      return sim.revert;
    }
    const success = sim.result as boolean;
    // Past its attempts (never paid): only a charge that would succeed is sent; approve() is not indexed.
    if (due.recheck && !success) {
      await noteRecheck(sql, { chainId, subscriptionId, at: pass.now });
      return "attempts_exhausted";
    }
    // A payment failure changes no state, so a second keeper would record the same failure again.
    if (!success && (await freshFailureOnChain(ctx, module, id, pass))) return "failure_already_recorded";
    return steps.send(due, call, pass, result, { expectFailure: !success });
  }

  return { tryCharge: (due, pass, result) => steps.claimed(due, result, () => attempt(due, pass, result)) };
}
