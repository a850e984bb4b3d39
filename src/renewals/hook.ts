/** The indexer hook that tells the renewal loop which wallets a batch's logs touched (renewals.md §3). */
import type { IndexerHook } from "../indexer/hooks";
import type { RenewalLoop } from "./loop";

/**
 * Marks the subscriber of every allocation a batch creates or touches (charge, refill, pause, resume, cancel,
 * allowance expiry, block): the loop evaluates those wallets at its first pass after the batch committed. Nothing is
 * written: a batch that fails only marks wallets early, and the loop waits for the index to reach the block.
 */
export function renewalsHook(loop: Pick<RenewalLoop, "markDirty">): IndexerHook {
  return {
    name: "renewals",
    async onBatch(_tx, ctx) {
      const wallets = new Set<string>();
      for (const s of ctx.rows.before.values()) wallets.add(s.subscriber);
      for (const s of ctx.rows.derived.subscriptions) wallets.add(s.subscriber);
      for (const b of ctx.rows.derived.blocked) wallets.add(b.subscriber);
      if (wallets.size > 0) loop.markDirty(wallets, ctx.toBlock);
    },
    async onRollback(tx, ctx) {
      // The renewal_upcoming notices of removed blocks are withdrawn with their events: they may be announced again.
      const above = (ctx.ancestor ?? -1n).toString();
      await tx`delete from renewal_notices where chain_id = ${ctx.chainId} and block_number > ${above}`;
    },
  };
}
