/**
 * The leader follows heads pushed over WebSocket (RPC_WS_URL, anvil's behind the provider proxy): a pushed head is
 * indexed without reading the head over HTTP; with the socket down the head is polled; blocks mined while it was
 * down and never pushed are fetched by range with the first head after the reconnect, none skipped.
 */
import { afterAll, afterEach, beforeAll, expect, setDefaultTimeout, test } from "bun:test";
import type { Address } from "viem";
import { publicClientFor } from "../../src/chain/clients";
import type { Db } from "../../src/db/client";
import type { Indexer } from "../../src/indexer";
import { createTestChain, type TestChain } from "../../testkit/chain";
import { until } from "../../testkit/cli";
import { createTestDb, testDbKind } from "../../testkit/db";
import { testIndexer } from "../../testkit/indexer";
import { startProviderProxy, type ProviderProxy } from "../../testkit/provider-proxy";
import { moduleCall, oneChargedSubscription } from "../../testkit/scenario";

setDefaultTimeout(60_000);

let chain: TestChain;
let module: Address;
let blocked = false;
const cleanups: (() => Promise<void> | void)[] = [];

beforeAll(async () => {
  chain = await createTestChain();
  ({ module } = await oneChargedSubscription(chain));
});

afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c();
});

afterAll(async () => {
  await chain?.stop();
});

/** One module event in a block of its own (the merchant blocks, then unblocks, bob); returns the block. */
async function eventBlock(): Promise<bigint> {
  const receipt = await moduleCall(chain, "merchant", module, blocked ? "unblockSubscriber" : "blockSubscriber", [
    chain.address("bob"),
  ]);
  blocked = !blocked;
  return receipt.blockNumber;
}

/** Blocks of the module events indexed so far. */
async function indexedEventBlocks(db: Db): Promise<bigint[]> {
  const rows = await db.sql<{ b: string }[]>`
    select block_number::text as b from events
    where chain_id = ${chain.chainId} and name in ('SubscriberBlocked', 'SubscriberUnblocked') order by block_number`;
  return rows.map((r) => BigInt(r.b));
}

/** A started indexer of a fresh database through `proxy`, heads from its WebSocket. */
async function follow(proxy: ProviderProxy, pollMs: number): Promise<{ db: Db; indexer: Indexer }> {
  const db = await createTestDb();
  const indexer = testIndexer(db, chain, {
    client: publicClientFor(proxy.url, 2000),
    pollMs,
    wsUrl: proxy.wsUrl,
  });
  cleanups.push(
    () => db.close(),
    () => indexer.stop(),
  );
  await indexer.start();
  await indexer.waitForBlock(await chain.publicClient.getBlockNumber({ cacheTime: 0 }), 30_000);
  return { db, indexer };
}

const subscribed = (proxy: ProviderProxy) => until("the subscription", async () => proxy.stats.wsMessages > 0, 10_000);
const headReads = (proxy: ProviderProxy) => proxy.stats.headers.filter((h) => h === "latest").length;

test(`pushed heads drive the index with a poll of a minute; the blocks of a dropped socket come by range after it (${testDbKind})`, async () => {
  const proxy = startProviderProxy(chain.rpcUrl, { latencyMs: 0, stripBlockTimestamp: false });
  cleanups.push(() => proxy.stop());
  const { db, indexer } = await follow(proxy, 60_000);
  await subscribed(proxy);

  // A poll a minute away: each block is indexed on its pushed head, and the head is never read over HTTP.
  proxy.reset();
  for (let i = 0; i < 3; i++) await indexer.waitForBlock(await eventBlock(), 20_000);
  expect(headReads(proxy)).toBe(0);
  expect(proxy.stats.wsMessages).toBeGreaterThanOrEqual(3);

  // The socket drops and is refused: three blocks are mined that no head announces, and the poll is a minute away.
  proxy.acceptSockets = false;
  proxy.dropSockets();
  const gap = [await eventBlock(), await eventBlock(), await eventBlock()];
  proxy.reset();
  proxy.acceptSockets = true;
  await subscribed(proxy);
  // The first head after the reconnect: the blocks before it are fetched in one range with it.
  const after = await eventBlock();
  await indexer.waitForBlock(after, 20_000);
  expect(await indexedEventBlocks(db)).toEqual(expect.arrayContaining([...gap, after]));
  const ranges = proxy.stats.getLogs.filter((r) => r.includes("-")).map((r) => r.split("-").map(BigInt));
  expect(ranges.some(([from, to]) => from! <= gap[0]! && to! >= after)).toBe(true);
  expect(headReads(proxy)).toBe(0);
});

test(`while the socket is refused the head is polled over HTTP; once it is up, pushed heads take over (${testDbKind})`, async () => {
  const proxy = startProviderProxy(chain.rpcUrl, { latencyMs: 0, stripBlockTimestamp: false });
  cleanups.push(() => proxy.stop());
  proxy.acceptSockets = false;
  const { db, indexer } = await follow(proxy, 100);

  const polled = await eventBlock();
  await indexer.waitForBlock(polled, 20_000);
  expect(headReads(proxy)).toBeGreaterThan(0);

  proxy.acceptSockets = true;
  await subscribed(proxy);
  // A poll may be under way as the subscription goes live: the counting starts at the next block.
  await indexer.waitForBlock(await eventBlock(), 20_000);
  proxy.reset();
  const pushed = [await eventBlock(), await eventBlock()];
  await indexer.waitForBlock(pushed[1]!, 20_000);
  expect(headReads(proxy)).toBe(0);
  expect(await indexedEventBlocks(db)).toEqual(expect.arrayContaining([polled, ...pushed]));
});
