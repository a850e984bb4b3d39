/** How the catch-up loop turns fetched ranges into batches: pieces already in join the batch they follow. */
import { describe, expect, test } from "bun:test";
import type { RawLog } from "../../src/chain/rpc";
import type { FetchedLogs } from "../../src/indexer/fetch";
import { joinArrived, type Piece } from "../../src/indexer/pipeline";

const log = (block: number, index: number): RawLog => ({
  address: "0xp",
  topics: [],
  data: "0x",
  blockNumber: `0x${block.toString(16)}`,
  blockHash: "0xh",
  transactionHash: "0xt",
  logIndex: `0x${index.toString(16)}`,
});

const fetched = (from: number, to: number, logs: number): FetchedLogs => ({
  from: BigInt(from),
  to: BigInt(to),
  processorLogs: Array.from({ length: logs }, (_, i) => log(from, i)),
  moduleLogs: [],
  queried: "all",
});

const piece = (f: FetchedLogs, arrived: boolean): Piece => ({
  from: f.from,
  to: f.to,
  promise: Promise.resolve(f),
  ...(arrived ? { done: f } : {}),
});

describe("joinArrived", () => {
  test("joins the pieces already in, in order, while the batch stays within the log limit", () => {
    const pending = [piece(fetched(13, 25, 3), true), piece(fetched(26, 37, 3), true), piece(fetched(38, 50, 3), true)];
    const joined = joinArrived(fetched(1, 12, 2), pending, 8);
    expect([joined.from, joined.to, joined.processorLogs.length]).toEqual([1n, 37n, 8]);
    expect(joined.processorLogs.map((l) => Number(l.blockNumber))).toEqual([1, 1, 13, 13, 13, 26, 26, 26]);
    expect(pending.map((p) => p.from)).toEqual([38n]);
  });

  test("stops at a piece not in yet, and never skips one", () => {
    const pending = [piece(fetched(13, 25, 1), false), piece(fetched(26, 37, 1), true)];
    const joined = joinArrived(fetched(1, 12, 1), pending, 100);
    expect([joined.from, joined.to]).toEqual([1n, 12n]);
    expect(pending).toHaveLength(2);
  });

  test("joins only the piece that starts where the batch ends", () => {
    const pending = [piece(fetched(20, 25, 1), true)];
    expect(joinArrived(fetched(1, 12, 1), pending, 100).to).toBe(12n);
    expect(pending).toHaveLength(1);
  });
});
