/**
 * Differential test: random scenarios on a real anvil through the real indexer, then for every wallet and plan the
 * API's `mode=both` must show indexed == onchain, and every subscription record must equal the contract's state.
 */
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import type { Address } from "viem";
import { subscriptionModuleAbi } from "../../src/chain/abis";
import { createApp } from "../../src/http/app";
import { createChainRegistry } from "../../src/chain/clients";
import type { Db } from "../../src/db/client";
import { createTestDb } from "../../testkit/db";
import { createTestChain, type TestChain, type WalletName } from "../../testkit/chain";
import { indexOnce } from "../../testkit/indexer";
import { request, testConfig } from "../../testkit/app";

const DAY = 86_400;
const PLANS = [
  { planId: 1, interval: DAY, gracePeriod: 3_600 },
  { planId: 2, interval: 7 * DAY, gracePeriod: DAY },
  { planId: 3, interval: 2 * DAY, gracePeriod: 0 },
];
const WALLETS: WalletName[] = ["alice", "bob", "carol", "dave", "erin"];
const SEEDS = [7, 4242, 99_991];
const STEPS = 70;

/** mulberry32: a small deterministic PRNG, so a failing seed can be replayed. */
function prng(seed: number) {
  let a = seed >>> 0;
  const next = () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
  return { next, int: (n: number) => Math.floor(next() * n), pick: <T>(xs: T[]) => xs[Math.floor(next() * xs.length)] };
}

let chain: TestChain;
let db: Db;
let app: ReturnType<typeof createApp>;
let token: Address;
/** How often each answer came up across all scenarios: both must, or the comparison proves little. */
const seen = { authorized: 0, unauthorized: 0 };

beforeAll(async () => {
  chain = await createTestChain();
  db = await createTestDb();
  token = await chain.deployToken({ symbol: "USDC", decimals: 6 });
  for (const w of WALLETS) await chain.fund(w, token, 10n ** 15n);
  const config = testConfig({ RPC_URL: chain.rpcUrl, CHAIN_ID: String(chain.chainId) });
  app = createApp({ sql: db.sql, config, chains: await createChainRegistry(config) });
});

afterAll(async () => {
  await db?.close();
  await chain?.stop();
});

/** Runs one random scenario on a fresh module; returns the module and every subscription id it created. */
async function scenario(
  seed: number,
  checkpoint: (module: Address, ids: bigint[]) => Promise<void>,
): Promise<{ module: Address; ids: bigint[]; actions: Record<string, number> }> {
  const rnd = prng(seed);
  const module = await chain.createModule("merchant");
  for (const p of PLANS) {
    await chain.createPlan("merchant", module, { ...p, token, amount: BigInt(1 + rnd.int(5_000_000)) });
  }
  const ids: bigint[] = [];
  const actions: Record<string, number> = {};
  const read = (id: bigint) =>
    chain.publicClient.readContract({
      address: module,
      abi: subscriptionModuleAbi,
      functionName: "getSubscription",
      args: [id],
    });
  // Every action may revert on chain (e.g. pausing a paused subscription): a revert changes nothing, which is fine.
  const attempt = async (name: string, fn: () => Promise<unknown>) => {
    try {
      await fn();
      actions[name] = (actions[name] ?? 0) + 1;
    } catch {
      actions[`${name} (reverted)`] = (actions[`${name} (reverted)`] ?? 0) + 1;
    }
  };
  const write = (who: WalletName, functionName: string, args: unknown[]) =>
    chain.send(
      chain.wallet(who).writeContract({ address: module, abi: subscriptionModuleAbi, functionName, args } as never),
    );

  for (let step = 0; step < STEPS; step++) {
    const wallet = rnd.pick(WALLETS);
    const plan = rnd.pick(PLANS);
    const id = ids.length ? rnd.pick(ids) : 0n;
    const roll = rnd.int(100);
    if (roll < 25 || !ids.length) {
      await attempt("subscribe", async () => {
        const max = rnd.int(4) === 0 ? 1 + rnd.int(3) : 0;
        ids.push(await chain.subscribe(wallet, module, plan.planId, { maxExecutions: max }));
      });
    } else if (roll < 45) {
      await attempt("charge", () => chain.charge(module, id));
    } else if (roll < 52) {
      const s = await read(id);
      await attempt("pause", () => write(rnd.int(2) ? "merchant" : (findName(s.subscriber) ?? "alice"), "pause", [id]));
    } else if (roll < 59) {
      const s = await read(id);
      await attempt("resume", () =>
        write(rnd.int(2) ? "merchant" : (findName(s.subscriber) ?? "alice"), "resume", [id]),
      );
    } else if (roll < 63) {
      const s = await read(id);
      await attempt("cancel", () => write(findName(s.subscriber) ?? "alice", "cancel", [id]));
    } else if (roll < 67) {
      await attempt("block", () => write("merchant", "blockSubscriber", [chain.address(wallet)]));
    } else if (roll < 72) {
      await attempt("unblock", () => write("merchant", "unblockSubscriber", [chain.address(wallet)]));
    } else if (roll < 76) {
      await attempt("approve", () =>
        chain.send(
          chain.wallet(wallet).writeContract({
            address: token,
            abi: [
              {
                type: "function",
                name: "approve",
                stateMutability: "nonpayable",
                inputs: [{ type: "address" }, { type: "uint256" }],
                outputs: [{ type: "bool" }],
              },
            ],
            functionName: "approve",
            args: [chain.processor, rnd.int(2) ? 0n : 10n ** 15n],
          }),
        ),
      );
    } else if (roll < 86) {
      // Jump close to somebody's grace boundary: exactly on it, or one second past it.
      const s = await read(id);
      const p = PLANS.find((x) => x.planId === Number(s.planId))!;
      const edge = s.lastPaidAt + BigInt(p.interval + p.gracePeriod) + BigInt(rnd.int(2));
      if (edge > (await chain.now())) {
        await attempt("time to grace edge", () => chain.mineAt(edge));
        await checkpoint(module, ids);
      }
    } else {
      await attempt("time", async () => {
        await chain.testClient.increaseTime({ seconds: 1 + rnd.int(DAY) });
        await chain.testClient.mine({ blocks: 1 });
      });
    }
  }
  // Settle up: charge whatever is due, so the final state has paid subscriptions as well as lapsed ones.
  for (const id of ids) if (rnd.int(4)) await attempt("charge", () => chain.charge(module, id));
  await checkpoint(module, ids);
  return { module, ids, actions };
}

/** The named account of an address, if any. */
function findName(address: Address): WalletName | undefined {
  return WALLETS.find((w) => chain.address(w).toLowerCase() === address.toLowerCase());
}

/** Indexes up to the head, then compares the API with the contracts for every wallet, plan and subscription. */
async function compare(seed: number, module: Address, ids: bigint[]): Promise<void> {
  // The checks below read "now" from the newest indexed block: make sure it is the chain's head.
  await indexOnce(db.sql, chain.rpcUrl, chain.processor, { db, chainId: chain.chainId });
  checkpoints++;
  for (const w of WALLETS) {
    for (const plans of ["1", "2", "3", "1,2,3", "3,1"]) {
      const res = await request(
        app,
        `/v0/auth/check?module_address=${module}&wallet=${chain.address(w)}&plan_ids=${plans}&mode=both`,
        {},
      );
      expect(res.status).toBe(200);
      const where = `seed ${seed}, ${w}, plans ${plans}`;
      expect({ where, indexed: res.body.indexed.authorized }).toEqual({
        where,
        indexed: res.body.onchain.authorized,
      });
      expect(res.body.authorized).toBe(res.body.onchain.authorized);
      if (res.body.authorized) seen.authorized++;
      else seen.unauthorized++;
    }
  }

  const merchant = chain.address("merchant").toLowerCase();
  for (const id of ids) {
    const s = await chain.publicClient.readContract({
      address: module,
      abi: subscriptionModuleAbi,
      functionName: "getSubscription",
      args: [id],
    });
    const blocked = await chain.publicClient.readContract({
      address: module,
      abi: subscriptionModuleAbi,
      functionName: "isBlocked",
      args: [s.subscriber],
    });
    const res = await request(app, `/v0/subscriptions/${merchant}/${id}?chain_id=${chain.chainId}`, {
      authorization: "Bearer test-admin-key-0123456789abcdef",
    });
    expect(res.status).toBe(200);
    const rec = res.body;
    const exhausted = s.maxExecutions !== 0 && s.timesExecuted >= s.maxExecutions;
    const queued = !s.cancelled && !s.paused && !blocked && !exhausted;
    expect(rec).toMatchObject({
      allocation_id: `${chain.chainId}:${module.toLowerCase()}:${id}`,
      on_chain_id: id.toString(),
      module_address: module.toLowerCase(),
      user_address: s.subscriber.toLowerCase(),
      plan_id: `${chain.chainId}:${module.toLowerCase()}:${s.planId}`,
      total_spent: s.totalSpent.toString(),
      times_executed: s.timesExecuted,
      next_charge_date: queued ? new Date(Number(s.nextChargeAt) * 1000).toISOString() : null,
      expires_at: s.allowanceExpiry === 0n ? null : s.allowanceExpiry.toString(),
      remaining_executions: s.maxExecutions === 0 ? null : s.maxExecutions - s.timesExecuted,
      created_at: new Date(Number(s.createdAt) * 1000).toISOString(),
      is_blocked: blocked,
    });
    // A live allocation is ACTIVE exactly when the contract's isActive says so.
    if (!s.cancelled) {
      const isActive = await chain.publicClient.readContract({
        address: module,
        abi: subscriptionModuleAbi,
        functionName: "isActive",
        args: [s.subscriber, s.planId],
      });
      expect({ id: id.toString(), active: rec.status === "ACTIVE" }).toEqual({ id: id.toString(), active: isActive });
    } else {
      expect(rec.status === "CANCELLED" || rec.status === "BLOCKED").toBe(true);
    }
  }
}

let checkpoints = 0;

describe.each(SEEDS)("random scenario, seed %d", (seed) => {
  test("indexed == onchain for every wallet and plan; every subscription equals the contract", async () => {
    const { ids, actions } = await scenario(seed, (module, ids) => compare(seed, module, ids));
    expect(ids.length).toBeGreaterThan(3);
    expect(actions.charge ?? 0).toBeGreaterThan(3);
  });
});

test("the scenarios reached both answers", () => {
  expect(seen.authorized).toBeGreaterThan(5);
  expect(seen.unauthorized).toBeGreaterThan(5);
  expect(checkpoints).toBeGreaterThan(SEEDS.length);
});
