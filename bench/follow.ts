/**
 * Following the head through a hosted provider: anvil mines a block every `--block-time` seconds behind the
 * provider profile of testkit/provider-proxy.ts (60 ms a request, Alchemy's compute units, 330 CU/s, 429s beyond),
 * and the service (api + indexer, in this process, RPC_CU_PER_SECOND=330) follows it. Two phases of `--blocks`
 * blocks each:
 *   idle   — no event in the blocks: the indexer's compute units an hour (each head's logsBloom spares its
 *            eth_getLogs; the check route the bench probes may add eth_call, printed apart);
 *   events — a processor module event in every block: compute units an hour, and the latency from the block's
 *            appearance on anvil to the first `X-Indexed-Block` ≥ it on `GET /v0/auth/check` (p50, p99).
 *
 *   bun run bench/follow.ts [--blocks 300] [--block-time 2] [--poll-ms 1000]
 *
 * DATABASE_URL (a server's admin URL) selects Postgres; without it, PGlite. Prints one line per phase and the
 * compute units by method.
 */
import { encodeFunctionData } from "viem";
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
    ROLES: "api,indexer",
    POLL_INTERVAL_MS: String(POLL_MS),
    RPC_CU_PER_SECOND: "330",
    RATE_LIMIT_PER_MINUTE: "100000000",
  },
);
const { m2 } = scenario.modules;
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
    let last = first;
    proxy.reset();
    const t0 = performance.now();
    let indexedSeen = first;
    while (last < first + BigInt(BLOCKS)) {
      const n = await chain.publicClient.getBlockNumber({ cacheTime: 0 });
      const now = performance.now();
      for (let b = last + 1n; b <= n; b++) {
        seenAt.set(b, now);
        if (withEvents) {
          // One module event in the next block: block, then unblock, a subscriber.
          const data = encodeFunctionData({
            abi: subscriptionModuleAbi,
            functionName: blocked ? "unblockSubscriber" : "blockSubscriber",
            args: [chain.address("dave")],
          });
          blocked = !blocked;
          await chain.wallet("merchant2").sendTransaction({ to: m2, data, gas: 300_000n });
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
    // The bench's own probes of GET /v0/auth/check may read the chain (eth_call): the indexer's share is the rest.
    const apiCu = stats.byMethod.eth_call?.cu ?? 0;
    const perHour = Math.round((stats.computeUnits - apiCu) / hours);
    const byMethod = Object.fromEntries(Object.entries(stats.byMethod).map(([m, v]) => [m, v.calls]));
    const lat = withEvents
      ? `, latency to X-Indexed-Block p50 ${quantile(latency, 0.5).toFixed(0)} ms p99 ${quantile(latency, 0.99).toFixed(0)} ms (${latency.length} blocks)`
      : "";
    console.log(
      `follow ${name}: ${BLOCKS} blocks every ${BLOCK_TIME} s, poll ${POLL_MS} ms: indexer ${stats.computeUnits - apiCu} CU = ${perHour} CU/hour (+${apiCu} CU of the check's eth_call), ${stats.httpRequests} requests, ${stats.throttled} throttled${lat}; calls ${JSON.stringify(byMethod)}`,
    );
  };
  await phase("idle", false);
  await phase("events", true);
} finally {
  await service.stop();
  proxy.stop();
  await chain.stop();
}
