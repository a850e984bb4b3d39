import type { Hash } from "viem";
import { eachBounded } from "../common/async";
import { releaseSentClaim, releaseUnsentClaims, sentClaimsOfKey, type SentClaim } from "./queries";
import { nodeKnows } from "./nonce";
import type { KeeperContext } from "./types";

/** What a new holder of the key did with the claims the previous holder left. */
export type Takeover = {
  /** Claims without a transaction: never broadcast. */
  unsent: number;
  /** Claims whose transaction the node never saw and can no longer be mined, or whose nonce nothing holds. */
  released: string[];
  /** Claims whose transaction the node knows, or whose nonce another pending transaction holds: they expire. */
  kept: string[];
};

/**
 * Sorts the claims a dead holder of this key left (called right after taking the key's lock, so no other process
 * sends with it). A transaction is recorded on its claim before it is broadcast, so:
 *
 * - no transaction recorded: nothing was broadcast; released.
 * - a transaction the node knows (pending or mined): kept until the claim expires, so the charge is not sent again.
 * - a transaction the node does not know (killed between the record and the broadcast, or dropped): released when
 *   its nonce is below the account's mined count (another transaction took the nonce, it can never be mined) or at
 *   or above its pending count (nothing holds the nonce: this holder's next sends take it, so at most one charge at
 *   that nonce is mined). Kept while another pending transaction holds its nonce (a replacement recorded but never
 *   broadcast: the earlier version is pending) and when no nonce was recorded.
 */
export async function takeOverClaims(ctx: KeeperContext): Promise<Takeover> {
  const { sql, client, chainId, address, owner } = ctx;
  const unsent = await releaseUnsentClaims(sql, { chainId, address });
  const claims = await sentClaimsOfKey(sql, { chainId, address, owner });
  const result: Takeover = { unsent, released: [], kept: [] };
  if (claims.length === 0) return result;

  const unknown: SentClaim[] = [];
  await eachBounded(claims, 8, async (c) => {
    if (await nodeKnows(client, c.tx_hash as Hash)) result.kept.push(c.subscription_id);
    else unknown.push(c);
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
