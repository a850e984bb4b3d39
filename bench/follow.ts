/**
 * Following the head through a hosted provider: anvil mines a block every `--block-time` seconds behind the
 * provider profile of testkit/provider-proxy.ts (60 ms a request, Alchemy's compute units, 330 CU/s, 429s beyond),
 * and the service (api + indexer, in this process, RPC_CU_PER_SECOND=330) follows it. Two phases of `--blocks`
 * blocks each:
 *   idle   — no event in the blocks: the indexer's compute units an hour (each head's logsBloom spares its
 *            eth_getLogs; the check route the bench probes may add eth_call, printed apart);
 *   events — a module event in every block (the merchant blocks, then unblocks, a subscriber: each block holds a
 *            `subscription.status_changed`): compute units an hour, the latency from the block's appearance on anvil
 *            to the first `X-Indexed-Block` ≥ it on `GET /v0/auth/check`, and to the arrival of its webhook at a
 *            receiver in this process (an endpoint registered through the API with an API key, as a merchant
 *            does; the service runs the `webhooks` role) — p50 and p99 of each.
 *
 * With `--ws` the service follows the heads the proxy's WebSocket pushes (RPC_WS_URL; every byte pushed is billed at
 * 0.04 CU, as providers bill subscriptions) and polls only while it is down.
 *
 *   bun run bench/follow.ts [--blocks 300] [--block-time 2] [--poll-ms 1000] [--ws]
 *
 * DATABASE_URL (a server's admin URL) selects Postgres; without it, PGlite. Prints one line per phase and the
 * compute units by method.
 */
import { encodeFunctionData } from "viem";
import { createApiKey } from "../src/auth/api-keys";
import { subscriptionModuleAbi } from "../src/chain/abis";
import { createTestChain } from "../testkit/chain";
import { runScenario } from "../testkit/scenario";
import { startChainService } from "../testkit/service";
import { startProviderProxy, type ProviderStats } from "../testkit/provider-proxy";

const arg = (name: string, fallback: number) => {
  const i = process.argv.indexOf(`--${name}`);
  return i > 0 ? Number(process.argv[i + 1]) : fallback;
};
const BLOCKS = arg("blocks", 300);
const BLOCK_TIME = arg("block-time", 2);
const POLL_MS = arg("poll-ms", 1000);
const WS = process.argv.includes("--ws");

const quantile = (xs: number[], q: number) => {
  const s = [...xs].sort((a, b) => a - b);
  return s.length === 0 ? NaN : s[Math.min(s.length - 1, Math.floor(q * s.length))]!;
};

const chain = await createTestChain();
const scenario = await runScenario(chain);
const proxy = startProviderProxy(chain.rpcUrl, { stripBlockTimestamp: false });
const service = await startChainService(
  { ...chain, rpcUrl: proxy.url },
  {
    ROLES: "api,indexer,webhooks",
    WEBHOOK_ALLOW_PRIVATE_URLS: "1",
    POLL_INTERVAL_MS: String(POLL_MS),
    RPC_CU_PER_SECOND: "330",
    RATE_LIMIT_PER_MINUTE: "100000000",
    ...(WS ? { RPC_WS_URL: proxy.wsUrl } : {}),
  },
);
const { m2 } = scenario.modules;

// The receiver: the first arrival of each block's event (the payload's block_number), by the bench's clock.
const webhookAt = new Map<bigint, number>();
const receiver = Bun.serve({
  hostname: "127.0.0.1",
  port: 0,
  async fetch(req) {
    const at = performance.now();
    const event = (await req.json()) as { block_number: string };
    const block = BigInt(event.block_number);
    if (!webhookAt.has(block)) webhookAt.set(block, at);
    return new Response(null, { status: 204 });
  },
});
// merchant2's endpoint for status changes, registered as a merchant does: an API key, then the API.
const merchant = chain.address("merchant2").toLowerCase();
const { key } = await createApiKey(service.db.sql, { merchant, label: "follow bench" });
const created = await fetch(`${service.url}/v0/webhook_endpoints/${merchant}`, {
  method: "POST",
  headers: { authorization: `Bearer ${key}`, "content-type": "application/json" },
  body: JSON.stringify({
    url: `http://127.0.0.1:${receiver.port}/hook`,
    event_types: ["subscription.status_changed"],
  }),
});
if (created.status !== 201) throw new Error(`endpoint not created: ${created.status} ${await created.text()}`);

const checkUrl = `${service.url}/v0/auth/check?module_address=${m2.toLowerCase()}&wallet=${chain.address("alice").toLowerCase()}&plan_ids=1`;
const indexedBlock = async (): Promise<bigint | null> => {
  const res = await fetch(checkUrl);
  await res.arrayBuffer();
  const h = res.headers.get("x-indexed-block");
  return h ? BigInt(h) : null;
};

try {
  // Caught up with the chain as it stands, then blocks on a clock.
  const start = await chain.publicClient.getBlockNumber({ cacheTime: 0 });
  while (((await indexedBlock()) ?? -1n) < start) await Bun.sleep(50);
  await chain.testClient.request({ method: "evm_setAutomine", params: [false] } as never);
  await chain.testClient.request({ method: "evm_setIntervalMining", params: [BLOCK_TIME] } as never);

  const phase = async (name: string, withEvents: boolean) => {
    let blocked = false;
    const first = await chain.publicClient.getBlockNumber({ cacheTime: 0 });
    const seenAt = new Map<bigint, number>();
    const latency: number[] = [];
    const eventBlocks: bigint[] = [];
    let last = first;
    proxy.reset();
    const t0 = performance.now();
    let indexedSeen = first;
    const pending: `0x${string}`[] = [];
    while (last < first + BigInt(BLOCKS)) {
      const n = await chain.publicClient.getBlockNumber({ cacheTime: 0 });
      const now = performance.now();
      for (let b = last + 1n; b <= n; b++) {
        seenAt.set(b, now);
        if (withEvents) {
          // One module event in the next block: block, then unblock, a subscriber with a subscription on the module
          // (its status changes each time: one webhook a block).
          const data = encodeFunctionData({
            abi: subscriptionModuleAbi,
            functionName: blocked ? "unblockSubscriber" : "blockSubscriber",
            args: [chain.address("alice")],
          });
          blocked = !blocked;
          const hash = await chain.wallet("merchant2").sendTransaction({ to: m2, data, gas: 300_000n });
          pending.push(hash);
        }
      }
      last = n > last ? n : last;
      const indexed = withEvents ? await indexedBlock() : null;
      if (indexed !== null) {
        for (let b = indexedSeen + 1n; b <= indexed; b++) {
          const at = seenAt.get(b);
          if (at !== undefined) latency.push(performance.now() - at);
        }
        if (indexed > indexedSeen) indexedSeen = indexed;
      }
      await Bun.sleep(10);
    }
    const hours = (performance.now() - t0) / 3_600_000;
    const stats: ProviderStats = proxy.stats;
    // The blocks that hold the bench's transactions, and their webhooks (the last ones may still be on the way).
    for (const hash of pending) {
      const receipt = await chain.publicClient.getTransactionReceipt({ hash }).catch(() => null);
      if (receipt?.status === "success" && seenAt.has(receipt.blockNumber)) eventBlocks.push(receipt.blockNumber);
    }
    const deadline = performance.now() + 10_000;
    while (eventBlocks.some((b) => !webhookAt.has(b)) && performance.now() < deadline) await Bun.sleep(50);
    const hookLatency = eventBlocks.flatMap((b) => (webhookAt.has(b) ? [webhookAt.get(b)! - seenAt.get(b)!] : []));
    // The bench's own probes of GET /v0/auth/check may read the chain (eth_call): the indexer's share is the rest.
    const apiCu = stats.byMethod.eth_call?.cu ?? 0;
    const perHour = Math.round((stats.computeUnits - apiCu) / hours);
    const byMethod = Object.fromEntries(Object.entries(stats.byMethod).map(([m, v]) => [m, v.calls]));
    const p = (xs: number[], q: number) => quantile(xs, q).toFixed(0);
    const lat = withEvents
      ? `, latency to X-Indexed-Block p50 ${p(latency, 0.5)} ms p99 ${p(latency, 0.99)} ms (${latency.length} blocks)` +
        `, to the webhook p50 ${p(hookLatency, 0.5)} ms p99 ${p(hookLatency, 0.99)} ms (${hookLatency.length} of ${eventBlocks.length} blocks with an event)`
      : "";
    const ws = WS ? `, WebSocket ${stats.wsMessages} messages ${stats.wsBytes} bytes` : "";
    console.log(
      `follow ${name}${WS ? " (--ws)" : ""}: ${BLOCKS} blocks every ${BLOCK_TIME} s, poll ${POLL_MS} ms${ws}: indexer ${Math.round(stats.computeUnits - apiCu)} CU = ${perHour} CU/hour (+${apiCu} CU of the check's eth_call), ${stats.httpRequests} requests, ${stats.throttled} throttled${lat}; calls ${JSON.stringify(byMethod)}`,
    );
  };
  await phase("idle", false);
  await phase("events", true);
} finally {
  await service.stop();
  receiver.stop(true);
  proxy.stop();
  await chain.stop();
}
