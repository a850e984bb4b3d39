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
  type Known = { number: bigint; hash: string; time: number };
  let sorted: Known[] | null = null; // the batch's own blocks in chain order, built on first use
  const fetched = new Map<bigint, Known>();
  const own = (): Known[] => {
    if (sorted) return sorted;
    const byNumber = new Map<bigint, Known>();
    for (const ev of batch.events)
      byNumber.set(ev.blockNumber, { number: ev.blockNumber, hash: ev.blockHash, time: ev.blockTime });
    for (const h of batch.windowHeaders) byNumber.set(h.number, { number: h.number, hash: h.hash, time: h.timestamp });
    byNumber.set(batch.to, { number: batch.to, hash: batch.toHeader.hash, time: batch.toHeader.timestamp });
    return (sorted = [...byNumber.values()].sort((x, y) => (x.number < y.number ? -1 : 1)));
  };

  return async (t: number): Promise<BlockRef> => {
    const blocks = own();
    if (batch.toHeader.timestamp < t) return { number: batch.to, hash: batch.toHeader.hash };
    // The first of the batch's blocks at or after `t` (times never decrease), and the newest known block before it.
    let lo = 0;
    let hi = blocks.length - 1;
    while (lo < hi) {
      const mid = (lo + hi) >> 1;
      if (blocks[mid]!.time >= t) hi = mid;
      else lo = mid + 1;
    }
    let after: Known = blocks[hi]!;
    let before = hi > 0 ? blocks[hi - 1]!.number : prev && prev.time < t ? prev.block : batch.from - 1n;
    while (after.number - before > 1n) {
      const mid = (before + after.number) / 2n;
      let h = fetched.get(mid);
      if (!h) {
        const header = await getHeader(client, mid, policy);
        if (!header) throw new ChainBehindError(`block ${mid} is not available from the node`);
        h = { number: mid, hash: header.hash, time: header.timestamp };
        fetched.set(mid, h);
      }
      if (h.time >= t) after = h;
      else before = mid;
    }
    return { number: after.number, hash: after.hash };
  };
}
