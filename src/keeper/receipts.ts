import { TransactionReceiptNotFoundError, type Hash, type PublicClient, type TransactionReceipt } from "viem";
import { eachBounded } from "../common/async";
import { ClaimTakenError, isNonceUsed } from "./errors";
import { currentFees, replacementFees } from "./fees";
import type { NonceManager, TxRequest } from "./nonce";
import { recordOnClaim, releaseClaim } from "./queries";
import type { KeeperContext, TickResult } from "./types";

/** A charge sent and not yet reflected by the index; every version sent at its nonce is in `hashes`. */
type InFlight = {
  module: string;
  subscriptionId: string;
  nonce: number;
  tx: TxRequest;
  hashes: Hash[];
  sentAt: number;
  lastSentAt: number;
  receiptBlock?: bigint;
  minedAt?: number;
};

/** Timing of {@link createReceipts}. */
export type ReceiptTimings = { txDeadlineMs: number; txTimeoutMs: number; awaitIndexTimeoutMs: number };

/** Sent charges: receipts, replacement of slow ones, and forgetting them once the indexer has them. */
export type Receipts = {
  track: (c: { module: string; subscriptionId: string; nonce: number; tx: TxRequest; hash: Hash }) => void;
  has: (subscriptionId: string) => boolean;
  /** Charges sent and not yet forgotten. */
  size: () => number;
  /** Charges sent and not yet mined. */
  pending: () => number;
  /** One round: receipts of pending charges (replacing overdue ones), then forgets what the index reached. */
  collect: (indexed: bigint | null, result: TickResult) => Promise<void>;
  /** Releases the claims of mined charges (another keeper's simulation sees them). */
  handOver: () => Promise<void>;
};

/** The receipt of whichever version was mined (newest first), or null when none was. */
async function findReceipt(client: PublicClient, hashes: Hash[]): Promise<TransactionReceipt | null> {
  for (const hash of [...hashes].reverse()) {
    try {
      return await client.getTransactionReceipt({ hash });
    } catch (err) {
      if (!(err instanceof TransactionReceiptNotFoundError)) throw err;
    }
  }
  return null;
}

/** Tells the observer how a mined charge ended (the target reads it: ChargeSucceeded, ChargeFailed, Used). */
function reportOutcome(ctx: KeeperContext, r: TransactionReceipt) {
  if (!ctx.observer) return;
  const ended = ctx.target.outcome(r);
  if (ended) ctx.observer.charge(ended.outcome, ended.reason ?? null);
}

/** Creates the in-flight registry of one keeper. */
export function createReceipts(ctx: KeeperContext, nonces: NonceManager, timing: ReceiptTimings): Receipts {
  const { sql, client, chainId, owner, log } = ctx;
  // By subscription id (unique per chain).
  const inFlight = new Map<string, InFlight>();

  const forget = async (t: InFlight) => {
    inFlight.delete(t.subscriptionId);
    await releaseClaim(sql, { chainId, subscriptionId: t.subscriptionId, owner });
  };

  async function mined(t: InFlight, r: TransactionReceipt, result: TickResult) {
    t.receiptBlock = r.blockNumber;
    t.minedAt = ctx.now();
    const fields = { subscriptionId: t.subscriptionId, tx: r.transactionHash, block: r.blockNumber };
    result.mined.push({ subscriptionId: t.subscriptionId, hash: r.transactionHash, status: r.status });
    if (r.status === "success") {
      reportOutcome(ctx, r);
      return log("info", "charge mined", fields);
    }
    ctx.observer?.charge("reverted");
    // A reverted charge records nothing on chain: forget it, the next pass simulates again.
    log("warn", "charge reverted", fields);
    await forget(t);
  }

  /** Re-sends an overdue charge at its nonce with fees raised by at least 12.5 %, within the fee cap. */
  async function replace(t: InFlight, result: TickResult) {
    const previous = t.hashes[t.hashes.length - 1]!;
    const fields = { subscriptionId: t.subscriptionId, nonce: t.nonce, tx: previous };
    const fees = replacementFees(t.tx.fees, await currentFees(client), ctx.maxFeePerGas);
    t.lastSentAt = ctx.now();
    if (!fees) return log("warn", "charge not mined and the fee cap leaves no room to replace it; waiting", fields);
    try {
      // The claim names the replacement (and is renewed) before the node has it, as for a first send.
      const claim = { chainId, subscriptionId: t.subscriptionId, owner, ttlMs: ctx.claimTtlMs };
      const hash = await nonces.resend(t.nonce, { ...t.tx, fees }, recordOnClaim(sql, claim));
      t.hashes.push(hash);
      t.tx = { ...t.tx, fees };
      result.replaced.push({ subscriptionId: t.subscriptionId, nonce: t.nonce, replaced: previous, hash });
      log("info", "charge not mined in time, replaced with higher fees", { ...fields, replacement: hash, ...fees });
    } catch (err) {
      // A version already mined makes the nonce used: the next round finds its receipt.
      if (isNonceUsed(err)) return log("debug", "replacement not needed, the nonce is used", fields);
      // Our claim expired and another keeper's took its place: ours stays pending as it is, unreplaced.
      if (err instanceof ClaimTakenError)
        return log("warn", "charge not replaced: another keeper holds its claim", fields);
      result.errors += 1;
      log("warn", "charge replacement failed", { ...fields, err });
    }
  }

  async function check(t: InFlight, result: TickResult) {
    try {
      const receipt = await findReceipt(client, t.hashes);
      if (receipt) return await mined(t, receipt, result);
      if (ctx.now() - t.sentAt > timing.txTimeoutMs) {
        log("warn", "charge not mined in time, giving up", { subscriptionId: t.subscriptionId, tx: t.hashes });
        nonces.reset();
        return await forget(t);
      }
      if (ctx.now() - t.lastSentAt > timing.txDeadlineMs) await replace(t, result);
    } catch (err) {
      result.errors += 1;
      log("warn", "receipt lookup failed", { tx: t.hashes[t.hashes.length - 1], err });
    }
  }

  const unmined = () => [...inFlight.values()].filter((t) => t.receiptBlock === undefined);

  return {
    track: (c) => {
      const now = ctx.now();
      const { hash, ...rest } = c;
      inFlight.set(c.subscriptionId, { ...rest, hashes: [hash], sentAt: now, lastSentAt: now });
    },
    has: (id) => inFlight.has(id),
    size: () => inFlight.size,
    pending: () => unmined().length,
    collect: async (indexed, result) => {
      await eachBounded(unmined(), 8, (t) => check(t, result));
      for (const t of [...inFlight.values()]) {
        if (t.receiptBlock === undefined) continue;
        const reached = indexed !== null && indexed >= t.receiptBlock;
        const stale = ctx.now() - (t.minedAt ?? t.sentAt) > timing.awaitIndexTimeoutMs;
        if (!reached && stale)
          log("warn", "indexer has not reached a mined charge", { subscriptionId: t.subscriptionId });
        if (reached || stale) await forget(t);
      }
    },
    handOver: async () => {
      for (const t of inFlight.values()) {
        if (t.receiptBlock !== undefined)
          await releaseClaim(sql, { chainId, subscriptionId: t.subscriptionId, owner }).catch(() => {});
      }
    },
  };
}
