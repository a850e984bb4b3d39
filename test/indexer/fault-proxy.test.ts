/** The test kit's fault proxy draws its faults from a seed: the same seed replays the same faults. */
import { afterAll, beforeAll, expect, test } from "bun:test";
import type { Server } from "bun";
import { seededRandom, startRpcProxy, type Faults } from "../../testkit/rpc-proxy";

let upstream: Server<undefined>;

beforeAll(() => {
  // A JSON-RPC server that answers every call with the block number 1.
  upstream = Bun.serve({
    port: 0,
    hostname: "127.0.0.1",
    fetch: async (req) =>
      Response.json({ jsonrpc: "2.0", id: ((await req.json()) as { id: unknown }).id, result: "0x1" }),
  });
});
afterAll(() => upstream?.stop(true));

const FAULTS: Partial<Faults> = { http500: 0.2, http429: 0.2, rpcError: 0.2 };

/** What the proxy answers to `n` calls in a row, one by one: the HTTP status and the JSON-RPC error code if any. */
async function answers(seed: number, n = 60): Promise<string[]> {
  const proxy = startRpcProxy(upstream.url.href, FAULTS, { seed });
  try {
    const out: string[] = [];
    for (let id = 0; id < n; id++) {
      const res = await fetch(proxy.url, {
        method: "POST",
        headers: { "content-type": "application/json" },
        body: JSON.stringify({ jsonrpc: "2.0", id, method: "eth_blockNumber", params: [] }),
      });
      const text = await res.text();
      out.push(
        `${res.status} ${res.status === 200 ? ((JSON.parse(text) as { error?: { code: number } }).error?.code ?? "ok") : ""}`,
      );
    }
    expect(proxy.seed).toBe(seed);
    return out;
  } finally {
    proxy.stop();
  }
}

test("the same seed gives the same faults for the same requests; another seed, others", async () => {
  const first = await answers(7);
  expect(new Set(first).size).toBe(4); // 500s, 429s, JSON-RPC errors and answers all occur
  expect(await answers(7)).toEqual(first);
  expect(await answers(8)).not.toEqual(first);
});

test("seededRandom: floats in [0, 1), a function of the seed", () => {
  const a = seededRandom(42);
  const draws = Array.from({ length: 1000 }, a);
  expect(draws.every((x) => x >= 0 && x < 1)).toBe(true);
  expect(Math.min(...draws)).toBeLessThan(0.01);
  expect(Math.max(...draws)).toBeGreaterThan(0.99);
  const b = seededRandom(42);
  expect(Array.from({ length: 1000 }, b)).toEqual(draws);
});
