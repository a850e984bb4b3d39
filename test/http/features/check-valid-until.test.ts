/**
 * `indexed.valid_until` of `GET /v0/auth/check` against a real anvil indexed by the real indexer: the instant the
 * answer stops being true with no event, computed here independently from the charge's block and the plan, and
 * confirmed by the contract's own `isActive` one second before and at that instant (anvil time travel).
 */
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import type { Address } from "viem";
import { subscriptionModuleAbi } from "../../../src/chain/abis";
import { createApp } from "../../../src/http/app";
import { createChainRegistry } from "../../../src/chain/clients";
import type { Db } from "../../../src/db/client";
import { createTestDb } from "../../../testkit/db";
import { createTestChain, type TestChain, type WalletName } from "../../../testkit/chain";
import { request, testConfig } from "../../../testkit/app";
import { indexOnce } from "../../../testkit/indexer";

const INTERVAL = 3_600;
const GRACE = 600;

let chain: TestChain;
let db: Db;
let app: ReturnType<typeof createApp>;
let module: Address;
let chargedAt: bigint;
let aliceSub: bigint;

const check = (wallet: WalletName, plans = "1") =>
  request(app, `/v0/auth/check?module_address=${module}&wallet=${chain.address(wallet)}&plan_ids=${plans}`, {});

const isActive = (wallet: WalletName) =>
  chain.publicClient.readContract({
    address: module,
    abi: subscriptionModuleAbi,
    functionName: "isActive",
    args: [chain.address(wallet), 1],
  });

const index = () => indexOnce(db.sql, chain.rpcUrl, chain.processor, { startBlock: chain.startBlock });

beforeAll(async () => {
  chain = await createTestChain();
  db = await createTestDb();
  const token = await chain.deployToken();
  module = await chain.createModule("merchant");
  await chain.createPlan("merchant", module, {
    planId: 1,
    token,
    amount: 1_000n,
    interval: INTERVAL,
    gracePeriod: GRACE,
  });
  await chain.createPlan("merchant", module, { planId: 2, token, amount: 1_000n, interval: 10 * INTERVAL });
  await chain.fund("alice", token, 10_000_000n);
  await chain.fund("bob", token, 10_000_000n);
  aliceSub = await chain.subscribe("alice", module, 1);
  const receipt = await chain.charge(module, aliceSub);
  chargedAt = (await chain.publicClient.getBlock({ blockNumber: receipt.blockNumber })).timestamp;
  const alice2 = await chain.subscribe("alice", module, 2);
  await chain.charge(module, alice2);
  await chain.subscribe("bob", module, 1); // PENDING: never paid
  await index();
  const config = testConfig({ RPC_URL: chain.rpcUrl, CHAIN_ID: String(chain.chainId) });
  app = createApp({ sql: db.sql, config, chains: await createChainRegistry(config) });
}, 60_000);

afterAll(async () => {
  await db?.close();
  await chain?.stop();
});

describe("indexed.valid_until", () => {
  test("an ACTIVE allocation: last charge + interval + grace + 1 s; the earliest of several; null when unpaid", async () => {
    const expiry = new Date(Number(chargedAt + BigInt(INTERVAL + GRACE + 1)) * 1000).toISOString();
    const one = await check("alice");
    expect(one.status).toBe(200);
    expect(one.body.indexed.valid_until).toBe(expiry);
    // Plan 2 (10 h) expires later: the answer for both plans changes first when plan 1 expires.
    const both = await check("alice", "1,2");
    expect(both.body.indexed.matching_plan_ids).toEqual(["1", "2"]);
    expect(both.body.indexed.valid_until).toBe(expiry);
    const bob = await check("bob");
    expect(bob.body.authorized).toBe(false);
    expect(bob.body.indexed.valid_until).toBeNull();
    expect((await check("carol")).body.indexed.valid_until).toBeNull();
  });

  test("the contract agrees: active one second before valid_until, not at it; the index then says EXPIRED", async () => {
    const expiryS = chargedAt + BigInt(INTERVAL + GRACE + 1);
    await chain.mineAt(expiryS - 1n);
    expect(await isActive("alice")).toBe(true);
    await index();
    expect((await check("alice")).body.indexed.valid_until).toBe(new Date(Number(expiryS) * 1000).toISOString());
    await chain.mineAt(expiryS);
    expect(await isActive("alice")).toBe(false);
    await index();
    const after = await check("alice");
    expect(after.body.authorized).toBe(false);
    expect(after.body.indexed.details[0].status).toBe("EXPIRED");
    expect(after.body.indexed.valid_until).toBeNull();
  });
});
