/**
 * Renewal reads cannot be poisoned (renewals.md §3): a plan token whose `balanceOf` burns every unit of gas, returns
 * nothing or reverts leaves out its own values only, never those of the other tokens read beside it, through
 * Multicall3 and through JSON-RPC batches (which hold 100 calls at most). The hostile token is real EVM code
 * (contracts/hostile/HostileToken.sol, compiled here) installed on anvil. The loop judges each (wallet, token) group
 * on its own, and quarantines a token whose reads fail pass after pass.
 */
import { afterAll, afterEach, beforeAll, describe, expect, setDefaultTimeout, test } from "bun:test";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import solc from "solc";
import { maxUint256, pad, toHex, type Address, type Hex } from "viem";
import { MULTICALL3_ADDRESS } from "../../src/chain/multicall3";
import type { Db } from "../../src/db/client";
import { createRenewalLoop, type PassReport } from "../../src/renewals/loop";
import { cappedAggregateCode } from "../../src/renewals/capped-aggregate-code";
import { BATCH_MAX_CALLS, CALL_GAS, createRenewalReader, type ReadRequest } from "../../src/renewals/reader";
import { compileCappedAggregate } from "../../contracts/build-capped";
import { createTestChain, type TestChain } from "../../testkit/chain";
import { createTestDb } from "../../testkit/db";
import { indexOnce } from "../../testkit/indexer";

setDefaultTimeout(60_000);

/** The runtime code of contracts/hostile/HostileToken.sol. */
function hostileTokenCode(): Hex {
  const path = join(import.meta.dir, "..", "..", "contracts", "hostile", "HostileToken.sol");
  const input = {
    language: "Solidity",
    sources: { "HostileToken.sol": { content: readFileSync(path, "utf8") } },
    settings: {
      optimizer: { enabled: true, runs: 200 },
      evmVersion: "cancun",
      outputSelection: { "*": { "*": ["evm.deployedBytecode.object"] } },
    },
  };
  const out = JSON.parse(solc.compile(JSON.stringify(input)));
  const errors = (out.errors ?? []).filter((e: { severity: string }) => e.severity === "error");
  if (errors.length > 0) throw new Error(JSON.stringify(errors));
  return `0x${out.contracts["HostileToken.sol"].HostileToken.evm.deployedBytecode.object}`;
}

const MODES = { burns: 1, mute: 2, reverts: 3 } as const;
type Hostile = Record<keyof typeof MODES, Address>;

let chain: TestChain;
let bare: TestChain;
let code: Hex;
const lower = (a: string) => a.toLowerCase();

/** Installs a hostile token of each mode on `c`. */
async function installHostile(c: TestChain): Promise<Hostile> {
  const out = {} as Hostile;
  for (const [name, mode] of Object.entries(MODES)) {
    const address = pad(toHex(0xbad000 + mode), { size: 20 }) as Address;
    await c.testClient.setCode({ address, bytecode: code });
    await c.testClient.setStorageAt({ address, index: 0, value: pad(toHex(mode)) });
    out[name as keyof Hostile] = address;
  }
  return out;
}

/** A real token with alice funded, and `n` other wallets (unfunded: balance 0). */
async function goodToken(c: TestChain) {
  const token = await c.deployToken();
  await c.fund("alice", token, 1_000n);
  return lower(token);
}

const wallets = (n: number) => Array.from({ length: n }, (_, i) => lower(pad(toHex(0x1000 + i), { size: 20 })));

/** The hostile pairs first (the burner starves every call after it in its chunk), then `n` good ones and alice's. */
function request(c: TestChain, hostile: Hostile, token: string, n: number): ReadRequest {
  const alice = lower(c.address("alice"));
  return {
    pairs: [
      { wallet: alice, token: lower(hostile.burns) },
      { wallet: alice, token: lower(hostile.mute) },
      ...wallets(n).map((wallet) => ({ wallet, token })),
      { wallet: alice, token: lower(hostile.reverts) },
      { wallet: alice, token },
    ],
    credits: [{ key: "x", module: token, subscriptionId: 1n }], // creditOf of an unknown id is 0
  };
}

test("GasCappedAggregate: the committed runtime code is the compiled contract, its per-call gas the reader's", async () => {
  expect(compileCappedAggregate()).toBe(cappedAggregateCode);
  const source = readFileSync(
    join(import.meta.dir, "..", "..", "contracts", "multicall", "GasCappedAggregate.sol"),
    "utf8",
  );
  expect(source).toContain(`CALL_GAS = ${CALL_GAS.toLocaleString("en-US").replaceAll(",", "_")};`);
});

beforeAll(async () => {
  code = hostileTokenCode();
  [chain, bare] = await Promise.all([createTestChain(), createTestChain({ multicall: false })]);
}, 60_000);
afterAll(async () => {
  await Promise.all([chain?.stop(), bare?.stop()]);
});
const afterTest: (() => void)[] = [];
afterEach(() => {
  for (const f of afterTest.splice(0)) f();
});

describe.each([
  ["through Multicall3 with a gas limit per call (state override)", () => chain, "multicall", true],
  ["through Multicall3 alone (a node without state override)", () => chain, "multicall", false],
  ["through JSON-RPC batches", () => bare, "batch", true],
] as const)("a hostile token %s", (_name, which, via, stateOverride) => {
  test("fails its own reads only; every other pair and credit is read; the token is named as rejected", async () => {
    const c = which();
    const hostile = await installHostile(c);
    const token = await goodToken(c);
    // A real HTTP hop in front of anvil that records how many calls each request carries.
    const sizes: number[] = [];
    const hop = Bun.serve({
      port: 0,
      hostname: "127.0.0.1",
      async fetch(req) {
        const body = await req.text();
        const parsed = JSON.parse(body);
        sizes.push(Array.isArray(parsed) ? parsed.length : 1);
        const res = await fetch(c.rpcUrl, { method: "POST", headers: { "content-type": "application/json" }, body });
        return new Response(await res.text(), { headers: { "content-type": "application/json" } });
      },
    });
    afterTest.push(() => hop.stop(true));
    const reader = createRenewalReader({
      rpcUrl: `http://127.0.0.1:${hop.port}`,
      processor: c.processor,
      multicall: MULTICALL3_ADDRESS,
      concurrency: 2,
      stateOverride,
    });
    const n = 300;
    const block = await c.publicClient.getBlockNumber();
    const r = await reader.read(block, request(c, hostile, token, n));
    expect(r.via).toBe(via);
    const alice = lower(c.address("alice"));
    expect(r.funds.get(`${alice}:${token}`)).toEqual({ balance: 1_000n, allowance: maxUint256 });
    for (const w of wallets(n)) expect(r.funds.get(`${w}:${token}`), w).toEqual({ balance: 0n, allowance: 0n });
    expect(r.credits.get("x")).toBe(0n);
    for (const h of Object.values(hostile)) expect(r.funds.has(`${alice}:${lower(h)}`)).toBe(false);
    expect(r.failed).toBe(6); // balanceOf and allowance of each hostile token
    expect([...r.rejected].sort()).toEqual(Object.values(hostile).map(lower).sort());
    if (via === "multicall" && stateOverride) {
      // Each call had its own gas: one aggregate3 for all of them, after the eth_getCode; nothing asked again.
      expect(sizes).toEqual([1, 1]);
    }
    if (via === "batch") {
      // Batches of 100 calls at most, every call sent.
      expect(Math.max(...sizes)).toBe(BATCH_MAX_CALLS);
      expect(sizes.reduce((a, b) => a + b, 0)).toBeGreaterThanOrEqual(1 + 2 * (n + 4) + 1);
    }
  });
});

describe("the loop with a hostile plan token", () => {
  let db: Db;
  afterAll(async () => {
    await db?.close();
  });

  test("judges each (wallet, token) group on its own, keeps the hostile group's outlook, and quarantines the token after failing passes (logged once)", async () => {
    db = await createTestDb();
    const hostile = await installHostile(chain);
    const setMode = async (mode: number) => {
      await chain.testClient.setStorageAt({ address: hostile.burns, index: 0, value: pad(toHex(mode)) });
      await chain.mineAt((await chain.now()) + 1n);
      await indexOnce(db.sql, chain.rpcUrl, chain.processor, { db, startBlock: chain.startBlock });
    };
    const good = await chain.deployToken();
    const mod = await chain.createModule("merchant");
    await chain.createPlan("merchant", mod, { planId: 1, token: good, amount: 10n, interval: 86_400 });
    await chain.createPlan("merchant", mod, { planId: 2, token: hostile.burns, amount: 10n, interval: 86_400 });
    await chain.fund("alice", good, 1_000n);
    const paid = await chain.subscribe("alice", mod, 1);
    await chain.charge(mod, paid);
    const other = await chain.subscribe("alice", mod, 2);
    const alice = lower(chain.address("alice"));
    const logs: { msg: string; fields: unknown }[] = [];
    const passes: PassReport[] = [];
    const loop = createRenewalLoop({
      sql: db.sql,
      chainId: chain.chainId,
      reader: createRenewalReader({
        rpcUrl: chain.rpcUrl,
        processor: chain.processor,
        multicall: MULTICALL3_ADDRESS,
        concurrency: 2,
      }),
      isLeader: () => true,
      horizonS: 604_800,
      intervalS: 900,
      pollMs: 100,
      quarantineAfterPasses: 2,
      log: (_level, msg, fields) => void logs.push({ msg, fields }),
      onPass: (r) => passes.push(r),
    });
    const pass = async () => {
      loop.markDirty([alice], 0n);
      await loop.runOnce();
      return passes.at(-1)!;
    };
    const outlooks = async () =>
      new Map(
        (
          await db.sql<{ id: string; outlook: string; block: string }[]>`
            select subscription_id::text as id, outlook, checked_block::text as block from renewal_outlooks
            where subscriber = ${alice}`
        ).map((r) => [BigInt(r.id), r]),
      );

    // The token answers: both groups judged.
    await setMode(0);
    expect((await pass()).failedWallets).toBe(0);
    const first = await outlooks();
    expect(first.get(paid)?.outlook).toBe("will_renew");
    expect(first.get(other)?.outlook).toBe("will_renew");

    // It burns the gas of every read: the good group is judged at the new block, the hostile one keeps its outlook.
    await setMode(1);
    const failing = await pass();
    expect(failing.failedWallets).toBe(1);
    const second = await outlooks();
    expect(BigInt(second.get(paid)!.block)).toBeGreaterThan(BigInt(first.get(paid)!.block));
    expect(second.get(other)).toEqual(first.get(other)!);
    expect(failing.newlyQuarantined).toEqual([]);

    // The second failing pass in a row quarantines it; later passes leave it out of the reads.
    await setMode(1);
    expect((await pass()).newlyQuarantined).toEqual([lower(hostile.burns)]);
    await setMode(1);
    const later = await pass();
    expect(later).toMatchObject({ failedWallets: 0, quarantined: 1, newlyQuarantined: [] });
    const third = await outlooks();
    expect(BigInt(third.get(paid)!.block)).toBeGreaterThan(BigInt(second.get(paid)!.block));
    expect(third.get(other)).toEqual(first.get(other)!);
    expect(logs.filter((l) => l.msg.includes("quarantined"))).toHaveLength(1);
  });
});

describe.each([
  ["ignores it (answers as if the address had no code)", "ignore"],
  ["refuses it (a JSON-RPC error)", "refuse"],
] as const)("a node that %s: the state override", (_name, how) => {
  test("the reader falls back to Multicall3 and reads every good pair", async () => {
    const hostile = await installHostile(chain);
    const token = await goodToken(chain);
    let overridden = 0;
    const hop = Bun.serve({
      port: 0,
      hostname: "127.0.0.1",
      async fetch(req) {
        const body = JSON.parse(await req.text());
        if (!Array.isArray(body) && body.method === "eth_call" && body.params.length === 3) {
          overridden++;
          if (how === "refuse") {
            const error = { code: -32602, message: "state override is not supported" };
            return Response.json({ jsonrpc: "2.0", id: body.id, error });
          }
          body.params = body.params.slice(0, 2);
        }
        const res = await fetch(chain.rpcUrl, {
          method: "POST",
          headers: { "content-type": "application/json" },
          body: JSON.stringify(body),
        });
        return new Response(await res.text(), { headers: { "content-type": "application/json" } });
      },
    });
    afterTest.push(() => hop.stop(true));
    const reader = createRenewalReader({
      rpcUrl: `http://127.0.0.1:${hop.port}`,
      processor: chain.processor,
      multicall: MULTICALL3_ADDRESS,
      concurrency: 1,
    });
    const block = await chain.publicClient.getBlockNumber();
    for (let i = 0; i < 2; i++) {
      const r = await reader.read(block, request(chain, hostile, token, 50));
      const alice = lower(chain.address("alice"));
      expect(r.funds.get(`${alice}:${token}`)).toEqual({ balance: 1_000n, allowance: maxUint256 });
      for (const w of wallets(50)) expect(r.funds.has(`${w}:${token}`)).toBe(true);
      expect([...r.rejected].sort()).toEqual(Object.values(hostile).map(lower).sort());
    }
    expect(overridden).toBe(1); // tried once, never again
  });
});
