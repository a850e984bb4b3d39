/**
 * The first block of a batch at or after a unix second, whatever the batch's bounds: the blocks it holds (logs,
 * reorg-window headers, its last block) bracket the answer, and headers of the blocks between bisect the gap.
 */
import type { PublicClient } from "viem";
import { getHeader, type Header, type RetryPolicy } from "../chain/rpc";
import { ChainBehindError } from "./errors";
import { firstAtOrAfter } from "../common/search";
import type { BatchEvent, PreparedBatch } from "./fetch";
import type { Cursor } from "./store";

/** A block as a search knows it. */
export type Known = { number: bigint; hash: string; time: number };

/** Most final headers kept between batches (a stretch of chain's worth of instants). */
const KEPT = 20_000;

/** A block's number and hash. */
export type BlockRef = { number: bigint; hash: string };

/**
 * Finds, for a unix second `t` with `prev.time < t <= to.time`, the first block of the batch whose timestamp is at
 * least `t`. Block times never decrease, so the answer lies between the newest known block before `t` and the oldest
 * known one at or after it; headers fetched to narrow that gap are kept in `fetched` for later calls and later
 * batches. Gaps only occur below the reorg window (whose headers the batch holds), where blocks are final.
 */
export function createBlockAt(
  client: PublicClient,
  policy: RetryPolicy,
  batch: PreparedBatch,
  prev: Cursor | null,
  fetched: Map<bigint, Promise<Known>> = new Map(),
) {
  const last: Known = { number: batch.to, hash: batch.toHeader.hash, time: batch.toHeader.timestamp };
  const fromEvent = (e: BatchEvent): Known => ({ number: e.blockNumber, hash: e.blockHash, time: e.blockTime });
  const fromHeader = (h: Header): Known => ({ number: h.number, hash: h.hash, time: h.timestamp });

  // One search per second asked (a batch's expiries and notices share few instants), shared by concurrent callers.
  const answers = new Map<number, Promise<BlockRef>>();
  const find = async (t: number): Promise<BlockRef> => {
    if (last.time < t) return last;
    // The answer lies after `before` and at or before `after`; the batch's logs and window headers (each in chain
    // order, and block times never decrease) narrow that gap by binary search, headers fetched close it.
    let after = last;
    let before = prev && prev.time < t ? prev.block : batch.from - 1n;
    const narrow = (k: Known) => {
      if (k.time >= t) {
        if (k.number < after.number) after = k;
      } else if (k.number > before) before = k.number;
    };
    const nearest = <T>(list: readonly T[], known: (x: T) => Known) => {
      const i = firstAtOrAfter(list.length, (j) => known(list[j]!).time >= t);
      if (i < list.length) narrow(known(list[i]!));
      if (i > 0) narrow(known(list[i - 1]!));
    };
    nearest(batch.events, fromEvent);
    nearest(batch.windowHeaders, fromHeader);
    while (after.number - before > 1n) {
      const mid = (before + after.number) / 2n;
      let pending = fetched.get(mid);
      if (!pending) {
        // Kept as a promise: concurrent searches of one stretch share each header.
        pending = getHeader(client, mid, policy).then((header) => {
          if (!header) throw new ChainBehindError(`block ${mid} is not available from the node`);
          return fromHeader(header);
        });
        if (fetched.size >= KEPT) fetched.clear();
        fetched.set(mid, pending);
        pending.catch(() => fetched.delete(mid));
      }
      const k = await pending;
      if (k.time >= t) after = k;
      else before = mid;
    }
    return { number: after.number, hash: after.hash };
  };
  return (t: number): Promise<BlockRef> => {
    let answer = answers.get(t);
    if (!answer) {
      answer = find(t);
      answers.set(t, answer);
      answer.catch(() => answers.delete(t));
    }
    return answer;
  };
}
