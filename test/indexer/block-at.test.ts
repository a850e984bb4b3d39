import { afterAll, beforeAll, expect, test } from "bun:test";
import { publicClientFor } from "../../src/chain/clients";
import { defaultRetry, getHeader, type Header } from "../../src/chain/rpc";
import { createBlockAt } from "../../src/indexer/block-at";
import type { BatchEvent, PreparedBatch } from "../../src/indexer/fetch";
import { createTestChain, type TestChain } from "../../testkit/chain";

let chain: TestChain;
const headers: Header[] = [];

beforeAll(async () => {
  chain = await createTestChain();
  // Blocks at uneven times, some sharing a timestamp's neighbourhood: 30 blocks after the current head.
  let t = Number(await chain.now());
  for (let i = 0; i < 30; i++) {
    t += [1, 7, 13, 2, 60][i % 5]!;
    await chain.mineAt(t);
  }
  const head = await chain.publicClient.getBlockNumber({ cacheTime: 0 });
  const client = publicClientFor(chain.rpcUrl);
  for (let n = head - 30n; n <= head; n++) headers.push((await getHeader(client, n))!);
}, 60_000);

afterAll(async () => {
  await chain?.stop();
});

/** A batch over `headers[1..]` whose logs sit in the blocks at `withLogs` and whose window holds the last `window`. */
function batchOf(
  withLogs: number[],
  window: number,
): { batch: PreparedBatch; prev: { block: bigint; hash: string; time: number } } {
  const [base, ...rest] = headers;
  const events = withLogs.map(
    (i) => ({ blockNumber: rest[i]!.number, blockHash: rest[i]!.hash, blockTime: rest[i]!.timestamp }) as BatchEvent,
  );
  const batch: PreparedBatch = {
    from: rest[0]!.number,
    to: rest.at(-1)!.number,
    covered: rest.at(-1)!.number,
    events,
    toHeader: rest.at(-1)!,
    windowHeaders: rest.slice(rest.length - window),
  };
  return { batch, prev: { block: base!.number, hash: base!.hash, time: base!.timestamp } };
}

test("the first block at or after each second, whatever the batch holds: logs, window headers or neither", async () => {
  const client = publicClientFor(chain.rpcUrl);
  const rest = headers.slice(1);
  const first = headers[0]!.timestamp + 1;
  const lastTime = rest.at(-1)!.timestamp;
  for (const [logs, window] of [
    [[], 0],
    [[3, 4, 17], 0],
    [[0, 29], 5],
    [[10], 30],
  ] as [number[], number][]) {
    const { batch, prev } = batchOf(logs, window);
    const blockAt = createBlockAt(client, defaultRetry, batch, prev);
    for (let t = first; t <= lastTime; t++) {
      const expected = rest.find((h) => h.timestamp >= t)!;
      expect(await blockAt(t)).toEqual({ number: expected.number, hash: expected.hash });
    }
  }
}, 60_000);
