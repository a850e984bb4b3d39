import { afterAll, beforeAll, describe, expect, setDefaultTimeout, test } from "bun:test";
import { getAddress, maxUint256, type Address } from "viem";
import { testTokenAbi } from "../../src/chain/abis";
import { MULTICALL3_ADDRESS } from "../../src/chain/multicall3";
import { multicall3RuntimeCode } from "../../src/chain/multicall3-code";
import { createRenewalReader, type ReadRequest } from "../../src/renewals/reader";
import { compileMulticall3 } from "../../contracts/build-multicall";
import { createTestChain, type TestChain } from "../../testkit/chain";
import { deploySpendPermissions } from "../../testkit/spend-permissions";
import { NATIVE_TOKEN } from "../../src/domain/spend-permission";

// Real chains and services: slower than bun's default 5 s per test when files run together.
setDefaultTimeout(60_000);

let chain: TestChain;
let bare: TestChain;
let token: Address;
let module: Address;
let subA: bigint;
let subB: bigint;
let pinned: bigint;
const lower = (a: string) => a.toLowerCase();

beforeAll(async () => {
  [chain, bare] = await Promise.all([createTestChain(), createTestChain({ multicall: false })]);
  token = await chain.deployToken();
  module = await chain.createModule("merchant");
  await chain.createPlan("merchant", module, { planId: 1, token, amount: 10n, interval: 86_400 });
  await chain.fund("alice", token, 1_000n);
  await chain.fund("bob", token, 25n, 7n);
  subA = await chain.subscribe("alice", module, 1);
  subB = await chain.subscribe("bob", module, 1);
  await chain.send(
    chain
      .wallet("alice")
      .writeContract({ ...chain.processorContract, functionName: "refill", args: [module, subA, 30n] }),
  );
  pinned = await chain.publicClient.getBlockNumber();
  // After the pinned block: alice moves funds away; a read pinned to the block must not see it.
  await chain.send(
    chain.wallet("alice").writeContract({
      address: token,
      abi: testTokenAbi,
      functionName: "transfer",
      args: [chain.address("carol"), 900n],
    }),
  );
}, 60_000);
afterAll(async () => {
  await Promise.all([chain?.stop(), bare?.stop()]);
});

const request = (): ReadRequest => ({
  pairs: [
    { wallet: lower(chain.address("alice")), token: lower(token) },
    { wallet: lower(chain.address("bob")), token: lower(token) },
  ],
  credits: [
    { key: "a", module: lower(module), subscriptionId: subA },
    { key: "b", module: lower(module), subscriptionId: subB },
  ],
});

describe("Multicall3 on the test chain", () => {
  test("its runtime code sits at the canonical address, compiled from contracts/multicall/Multicall3.sol", async () => {
    expect(MULTICALL3_ADDRESS).toBe(getAddress("0xcA11bde05977b3631167028862bE2a173976CA11"));
    expect(await chain.publicClient.getCode({ address: MULTICALL3_ADDRESS })).toBe(multicall3RuntimeCode);
    expect(compileMulticall3()).toBe(multicall3RuntimeCode);
    expect(await bare.publicClient.getCode({ address: MULTICALL3_ADDRESS })).toBeUndefined();
  }, 60_000); // solc's first compile can take seconds on a busy machine
});

describe("createRenewalReader", () => {
  test("reads balances, allowances and credits through aggregate3, pinned to the block", async () => {
    const reader = createRenewalReader({
      rpcUrl: chain.rpcUrl,
      processor: chain.processor,
      multicall: MULTICALL3_ADDRESS,
      concurrency: 2,
    });
    const r = await reader.read(pinned, request());
    expect(r.via).toBe("multicall");
    expect(r.failed).toBe(0);
    // alice: minted 1000, refilled 30 into credit; bob: minted 25, approved 7.
    expect(r.funds.get(`${lower(chain.address("alice"))}:${lower(token)}`)).toEqual({
      balance: 970n,
      allowance: maxUint256,
    }); // unlimited stays unlimited;
    expect(r.funds.get(`${lower(chain.address("bob"))}:${lower(token)}`)).toEqual({ balance: 25n, allowance: 7n });
    expect(r.credits).toEqual(
      new Map([
        ["a", 30n],
        ["b", 0n],
      ]),
    );
    const latest = await reader.read(await chain.publicClient.getBlockNumber(), request());
    expect(latest.funds.get(`${lower(chain.address("alice"))}:${lower(token)}`)!.balance).toBe(70n);
  });

  test("chunks: one aggregate3 per chunk of calls, at most the concurrency in flight", async () => {
    const reader = createRenewalReader({
      rpcUrl: chain.rpcUrl,
      processor: chain.processor,
      multicall: MULTICALL3_ADDRESS,
      concurrency: 2,
      chunkSize: 2,
    });
    const r = await reader.read(pinned, request());
    // 6 calls in chunks of 2 → 3 aggregate3 calls, plus the one eth_getCode that found Multicall3.
    expect(reader.requests()).toBe(4);
    expect(r.credits.get("a")).toBe(30n);
    await reader.read(pinned, request());
    expect(reader.requests()).toBe(7); // found once, not asked again
  });

  test("reads side by side (a pass's slices) share the concurrency: never more requests in flight", async () => {
    // A real HTTP hop in front of anvil that holds each request 20 ms and counts those in flight.
    let now = 0;
    let most = 0;
    const hop = Bun.serve({
      port: 0,
      hostname: "127.0.0.1",
      async fetch(req) {
        most = Math.max(most, ++now);
        try {
          const body = await req.text();
          await Bun.sleep(20);
          const res = await fetch(chain.rpcUrl, {
            method: "POST",
            headers: { "content-type": "application/json" },
            body,
          });
          return new Response(await res.text(), { headers: { "content-type": "application/json" } });
        } finally {
          now--;
        }
      },
    });
    try {
      const reader = createRenewalReader({
        rpcUrl: `http://127.0.0.1:${hop.port}`,
        processor: chain.processor,
        multicall: MULTICALL3_ADDRESS,
        concurrency: 2,
        chunkSize: 1,
      });
      const reads = await Promise.all([1, 2, 3].map(() => reader.read(pinned, request())));
      for (const r of reads) expect(r.credits.get("a")).toBe(30n);
      expect(most).toBe(2);
    } finally {
      hop.stop(true);
    }
  });

  test("without Multicall3: a JSON-RPC batch of eth_call at the block gives the same values", async () => {
    const t = await bare.deployToken();
    await bare.fund("alice", t, 55n, 44n);
    const reader = createRenewalReader({
      rpcUrl: bare.rpcUrl,
      processor: bare.processor,
      multicall: MULTICALL3_ADDRESS,
      concurrency: 2,
    });
    const block = await bare.publicClient.getBlockNumber();
    const r = await reader.read(block, {
      pairs: [{ wallet: lower(bare.address("alice")), token: lower(t) }],
      credits: [{ key: "x", module: lower(t), subscriptionId: 1n }], // not a module: creditOf of an unknown id is 0
    });
    expect(r.via).toBe("batch");
    expect(r.funds.get(`${lower(bare.address("alice"))}:${lower(t)}`)).toEqual({ balance: 55n, allowance: 44n });
    expect(r.credits.get("x")).toBe(0n);
    // 3 eth_calls in one batch request, plus the eth_getCode.
    expect(reader.requests()).toBe(2);
  });

  test("a call that fails leaves only its value out; a node that is down fails the read", async () => {
    const reader = createRenewalReader({
      rpcUrl: chain.rpcUrl,
      processor: chain.processor,
      multicall: MULTICALL3_ADDRESS,
      concurrency: 1,
    });
    const r = await reader.read(pinned, {
      pairs: [
        { wallet: lower(chain.address("alice")), token: lower(token) },
        { wallet: lower(chain.address("alice")), token: lower(module) }, // a module has no balanceOf: reverts
      ],
      credits: [],
    });
    expect(r.failed).toBe(2);
    expect([...r.funds.keys()]).toEqual([`${lower(chain.address("alice"))}:${lower(token)}`]);
    const down = createRenewalReader({
      rpcUrl: "http://127.0.0.1:1",
      processor: chain.processor,
      multicall: MULTICALL3_ADDRESS,
      concurrency: 1,
      timeoutMs: 500,
    });
    await expect(down.read(pinned, request())).rejects.toThrow();
  });

  test("spend permissions: the native balance and whether the manager owns the account, by aggregate3 and by batch", async () => {
    for (const c of [chain, bare]) {
      const kit = await deploySpendPermissions(c);
      const owned = lower(await kit.createAccount("alice"));
      const left = lower(await kit.createAccount("bob", { managerOwner: false }));
      await c.testClient.setBalance({ address: owned as Address, value: 1234n });
      const manager = lower(kit.manager);
      const eoa = lower(c.address("carol"));
      const block = await c.publicClient.getBlockNumber();
      for (const stateOverride of [true, false]) {
        const reader = createRenewalReader({
          rpcUrl: c.rpcUrl,
          processor: c.processor,
          multicall: MULTICALL3_ADDRESS,
          concurrency: 2,
          stateOverride,
        });
        const r = await reader.read(block, {
          pairs: [{ wallet: owned, token: lower(NATIVE_TOKEN) }],
          credits: [],
          owners: [owned, left, eoa].map((wallet) => ({ wallet, manager })),
        });
        expect(r.via).toBe(c === chain ? "multicall" : "batch");
        // The native token has no allowance to the processor: it reads as 0.
        expect(r.funds.get(`${owned}:${lower(NATIVE_TOKEN)}`)).toEqual({ balance: 1234n, allowance: 0n });
        expect(r.owners.get(`${owned}:${manager}`)).toBe(true);
        expect(r.owners.get(`${left}:${manager}`)).toBe(false);
        // An EOA answers nothing: not that kind of wallet, the check is skipped (null), and no failure is counted.
        expect(r.owners.get(`${eoa}:${manager}`)).toBeNull();
        expect([r.failed, r.rejected.size]).toEqual([0, 0]);
      }
    }
  });

  test("a pair only spend permissions charge skips the allowance read", async () => {
    const reader = createRenewalReader({
      rpcUrl: chain.rpcUrl,
      processor: chain.processor,
      multicall: MULTICALL3_ADDRESS,
      concurrency: 1,
    });
    const wallet = lower(chain.address("bob"));
    const r = await reader.read(pinned, { pairs: [{ wallet, token: lower(token), allowance: false }], credits: [] });
    expect(r.funds.get(`${wallet}:${lower(token)}`)).toEqual({ balance: 25n, allowance: 0n });
  });
});
