/**
 * The first block of a batch at or after a unix second, whatever the batch's bounds: the blocks it holds (logs,
 * reorg-window headers, its last block) bracket the answer, and headers of the blocks between bisect the gap.
 */
import type { PublicClient } from "viem";
import { getHeader, type RetryPolicy } from "../chain/rpc";
import { ChainBehindError } from "./errors";
import type { PreparedBatch } from "./fetch";
import type { Cursor } from "./store";

/** A block's number and hash. */
export type BlockRef = { number: bigint; hash: string };

/**
 * Finds, for a unix second `t` with `prev.time < t <= to.time`, the first block of the batch whose timestamp is at
 * least `t`. Block times never decrease, so the answer lies between the newest known block before `t` and the oldest
 * known one at or after it; headers fetched to narrow that gap are kept for later calls. Gaps only occur below the
 * reorg window (whose headers the batch holds), where blocks are final.
 */
export function createBlockAt(client: PublicClient, policy: RetryPolicy, batch: PreparedBatch, prev: Cursor | null) {
  const known = new Map<bigint, { hash: string; time: number }>();
  for (const ev of batch.events) known.set(ev.blockNumber, { hash: ev.blockHash, time: ev.blockTime });
  for (const h of batch.windowHeaders) known.set(h.number, { hash: h.hash, time: h.timestamp });
  known.set(batch.to, { hash: batch.toHeader.hash, time: batch.toHeader.timestamp });
  const last: BlockRef = { number: batch.to, hash: batch.toHeader.hash };

  return async (t: number): Promise<BlockRef> => {
    if (batch.toHeader.timestamp < t) return last;
    let lo = prev && prev.time < t ? prev.block : batch.from - 1n;
    let hi = batch.to;
    for (const [n, b] of known) {
      if (b.time >= t) {
        if (n < hi) hi = n;
      } else if (n > lo) lo = n;
    }
    while (hi - lo > 1n) {
      const mid = (lo + hi) / 2n;
      const h = await getHeader(client, mid, policy);
      if (!h) throw new ChainBehindError(`block ${mid} is not available from the node`);
      known.set(mid, { hash: h.hash, time: h.timestamp });
      if (h.timestamp >= t) hi = mid;
      else lo = mid;
    }
    return { number: hi, hash: known.get(hi)!.hash };
  };
}
