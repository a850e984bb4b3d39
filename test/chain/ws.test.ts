/**
 * The `newHeads` feed (src/chain/ws.ts) against anvil's WebSocket, behind the provider proxy: heads as they are
 * mined, the bytes billed at 0.04 CU on both sides alike, a dropped socket reconnected (with backoff) and subscribed
 * again, nothing after `stop`.
 */
import { afterAll, beforeAll, expect, setDefaultTimeout, test } from "bun:test";
import { CuBudget, defaultBudgetSettings } from "../../src/chain/budget";
import { createHeadFeed, WS_CU_PER_BYTE } from "../../src/chain/ws";
import { createTestChain, type TestChain } from "../../testkit/chain";
import { until } from "../../testkit/cli";
import { startProviderProxy, type ProviderProxy } from "../../testkit/provider-proxy";

setDefaultTimeout(30_000);

let chain: TestChain;
let proxy: ProviderProxy;

beforeAll(async () => {
  chain = await createTestChain({ multicall: false });
  proxy = startProviderProxy(chain.rpcUrl, { latencyMs: 0 });
});

afterAll(async () => {
  proxy?.stop();
  await chain?.stop();
});

const mine = async () => {
  await chain.testClient.mine({ blocks: 1 });
  return chain.publicClient.getBlock({ blockTag: "latest" });
};

test("pushes each mined head, bills its bytes, reconnects after a drop and stops for good", async () => {
  const budget = new CuBudget({ ...defaultBudgetSettings, cuPerSecond: 0 });
  const feed = createHeadFeed(proxy.wsUrl, { budget, minBackoffMs: 20, maxBackoffMs: 100 });
  expect(feed.live()).toBe(false);
  feed.start();
  try {
    await until("the subscription", async () => feed.live());
    const block = await mine();
    await until("the head", async () => feed.latest()?.header.number === block.number);
    const { header } = feed.latest()!;
    expect(header.hash).toBe(block.hash!);
    expect(header.parentHash).toBe(block.parentHash);
    expect(header.timestamp).toBe(Number(block.timestamp));
    expect(header.logsBloom).toBe(block.logsBloom!);
    // What the proxy pushed is what the budget billed: every byte at 0.04 CU, plus the subscribe call.
    expect(proxy.stats.wsBytes).toBeGreaterThan(500);
    expect(budget.spent.get("eth_subscription")).toBeCloseTo(proxy.stats.wsBytes * WS_CU_PER_BYTE, 6);
    expect(budget.spent.get("eth_subscribe")).toBe(10);

    // Dropped and refused: not live, and heads mined meanwhile are not pushed.
    proxy.acceptSockets = false;
    expect(proxy.dropSockets()).toBe(1);
    await until("the drop", async () => !feed.live());
    const pushes = feed.pushes();
    await mine();
    await mine();
    expect(feed.pushes()).toBe(pushes);
    // Accepted again: reconnected and subscribed again; the next head is pushed.
    proxy.acceptSockets = true;
    await until("the reconnect", async () => feed.live(), 10_000);
    expect(budget.spent.get("eth_subscribe")).toBe(20);
    const next = await mine();
    await until("the next head", async () => feed.latest()?.header.number === next.number);
  } finally {
    feed.stop();
  }
  expect(feed.live()).toBe(false);
  const pushes = feed.pushes();
  await mine();
  await Bun.sleep(200); // a head a live socket would push in a few ms
  expect(feed.pushes()).toBe(pushes);
});
