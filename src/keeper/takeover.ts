import { isAddressEqual, type Hash, type Transaction } from "viem";
import { eachBounded } from "../common/async";
import { adoptSentClaim, releaseSentClaim, releaseUnsentClaims, sentClaimsOfKey, type SentClaim } from "./queries";
import { nodeTransaction, type TxRequest } from "./nonce";
import type { Receipts } from "./receipts";
import type { Fees, KeeperContext } from "./types";

/** What a new holder of the key did with the claims the previous holder left. */
export type Takeover = {
  /** Claims without a transaction: never broadcast. */
  unsent: number;
  /** Claims whose transaction the node never saw and can no longer be mined, or whose nonce nothing holds. */
  released: string[];
  /** Claims whose charge the node has pending: now this holder's, tracked as its own sends (receipt, replacement). */
  adopted: string[];
  /** Claims whose transaction the node has mined, or whose nonce another pending transaction holds: they expire. */
  kept: string[];
};

/** A pending charge of this key for the claim's subscription, as this keeper would track it; null for anything else. */
function pendingCharge(
  ctx: KeeperContext,
  claim: SentClaim,
  tx: Transaction,
): { module: string; nonce: number; tx: TxRequest } | null {
  if (tx.blockNumber !== null || !tx.to) return null;
  if (!isAddressEqual(tx.from, ctx.address) || !isAddressEqual(tx.to, ctx.target.address)) return null;
  const call = ctx.target.decode(tx.input);
  if (!call || call.subscriptionId !== claim.subscription_id) return null;
  let fees: Fees;
  if (tx.maxFeePerGas !== undefined && tx.maxPriorityFeePerGas !== undefined) {
    fees = { maxFeePerGas: tx.maxFeePerGas, maxPriorityFeePerGas: tx.maxPriorityFeePerGas };
  } else if (tx.gasPrice !== undefined) fees = { gasPrice: tx.gasPrice };
  else return null;
  return { module: call.module.toLowerCase(), nonce: tx.nonce, tx: { data: tx.input, gas: tx.gas, fees } };
}

/**
 * Sorts the claims a dead holder of this key left (called right after taking the key's lock, so no other process
 * sends with it). A transaction is recorded on its claim before it is broadcast, so:
 *
 * - no transaction recorded: nothing was broadcast; released.
 * - a charge the node has pending: adopted. The claim is renewed for this holder and the charge tracked as if this
 *   holder had sent it: its receipt is collected, and past the deadline it is replaced at its nonce with higher
 *   fees (left as it was, an underpriced one would hold every later nonce of the key). When the recorded transaction
 *   is a replacement the node never got, the newest earlier version the node knows stands for it.
 * - a transaction the node has mined: kept until the claim expires, so the charge is not sent again before the
 *   indexer records it.
 * - a transaction the node does not know (killed between the record and the broadcast, or dropped): released when
 *   its nonce is below the account's mined count (another transaction took the nonce, it can never be mined) or at
 *   or above its pending count (nothing holds the nonce: this holder's next sends take it, so at most one charge at
 *   that nonce is mined). Kept while another pending transaction holds its nonce and when no nonce was recorded.
 */
export async function takeOverClaims(ctx: KeeperContext, receipts: Receipts): Promise<Takeover> {
  const { sql, client, chainId, address, owner } = ctx;
  const unsent = await releaseUnsentClaims(sql, { chainId, address });
  const claims = await sentClaimsOfKey(sql, { chainId, address, owner });
  const result: Takeover = { unsent, released: [], adopted: [], kept: [] };
  if (claims.length === 0) return result;

  const unknown: SentClaim[] = [];
  await eachBounded(claims, 8, async (c) => {
    // The recorded transaction, else the newest earlier version the node knows (a replacement never broadcast).
    let tx = await nodeTransaction(client, c.tx_hash as Hash);
    for (let i = c.earlier_tx_hashes.length - 1; !tx && i >= 0; i--) {
      tx = await nodeTransaction(client, c.earlier_tx_hashes[i] as Hash);
    }
    if (!tx) return void unknown.push(c);
    const charge = pendingCharge(ctx, c, tx);
    const ttlMs = ctx.claimTtlMs;
    if (
      charge &&
      (await adoptSentClaim(sql, { chainId, claim: c, owner, ttlMs, nonce: charge.nonce, hash: tx.hash }))
    ) {
      receipts.track({ ...charge, subscriptionId: c.subscription_id, hash: tx.hash });
      result.adopted.push(c.subscription_id);
    } else {
      result.kept.push(c.subscription_id);
    }
  });
  if (unknown.length > 0) {
    const [mined, pending] = await Promise.all(
      (["latest", "pending"] as const).map((blockTag) => client.getTransactionCount({ address, blockTag })),
    );
    for (const c of unknown) {
      const nonce = c.tx_nonce === null ? null : Number(c.tx_nonce);
      if (nonce !== null && (nonce < mined! || nonce >= pending!)) {
        await releaseSentClaim(sql, { chainId, claim: c });
        result.released.push(c.subscription_id);
      } else {
        result.kept.push(c.subscription_id);
      }
    }
  }
  return result;
}
