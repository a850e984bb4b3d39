/**
 * Renewal reads cannot be poisoned (renewals.md §3): a plan token whose `balanceOf` burns every unit of gas, returns
 * nothing or reverts leaves out its own values only, never those of the other tokens read beside it, through
 * Multicall3 and through JSON-RPC batches (which hold 100 calls at most). The hostile token is real EVM code
 * (contracts/hostile/HostileToken.sol, compiled here) installed on anvil.
 */
import { afterAll, afterEach, beforeAll, describe, expect, setDefaultTimeout, test } from "bun:test";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import solc from "solc";
import { maxUint256, pad, toHex, type Address, type Hex } from "viem";
import { MULTICALL3_ADDRESS } from "../../src/chain/multicall3";
import { BATCH_MAX_CALLS, createRenewalReader, type ReadRequest } from "../../src/renewals/reader";
import { createTestChain, type TestChain } from "../../testkit/chain";

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
  ["through Multicall3", () => chain, "multicall"],
  ["through JSON-RPC batches", () => bare, "batch"],
] as const)("a hostile token %s", (_name, which, via) => {
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
    if (via === "batch") {
      // Batches of 100 calls at most, every call sent.
      expect(Math.max(...sizes)).toBe(BATCH_MAX_CALLS);
      expect(sizes.reduce((a, b) => a + b, 0)).toBeGreaterThanOrEqual(1 + 2 * (n + 4) + 1);
    }
  });
});
