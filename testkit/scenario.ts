/**
 * A chain history that emits every event of docs/protocol.md at least once: three tokens (plain, no metadata,
 * transferFrom returning false), two merchants, charges that succeed (from allowance and from credit) and fail
 * for each FailureReason, refill and withdrawal, pause/resume/cancel, allowance expiry changes (up to uint64 max),
 * block/unblock, keeper and fee changes, and a module created and used in the very same block.
 */
import { getContractAddress, maxUint256, parseEventLogs, type Address, type TransactionReceipt } from "viem";
import { subscriptionModuleAbi, subscriptionProcessorAbi, testTokenAbi } from "../src/chain/abis";
import type { TestChain, WalletName } from "./chain";

/** Addresses and ids the scenario created. */
export type Scenario = {
  tokens: { tusd: Address; nometa: Address; falsy: Address };
  modules: { m1: Address; m2: Address; sameBlock: Address };
  subs: bigint[];
};

const MAX_UINT64 = 2n ** 64n - 1n;

/** Sends `functionName(args)` to a subscription module from wallet `who`. */
export function moduleCall(chain: TestChain, who: WalletName, module: Address, functionName: string, args: unknown[]) {
  return chain.send(
    chain.wallet(who).writeContract({ address: module, abi: subscriptionModuleAbi, functionName, args } as never),
  );
}

function processorCall(chain: TestChain, who: WalletName, functionName: string, args: unknown[]) {
  return chain.send(chain.wallet(who).writeContract({ ...chain.processorContract, functionName, args } as never));
}

/** A module of `merchant` with a 1-hour plan 1, alice and bob funded, alice subscribed and charged once. */
export async function oneChargedSubscription(chain: TestChain) {
  const token = await chain.deployToken();
  const module = await chain.createModule("merchant");
  await chain.createPlan("merchant", module, { planId: 1, token, amount: 1000n, interval: 3600 });
  await chain.fund("alice", token, 10_000_000n);
  await chain.fund("bob", token, 10_000_000n);
  const a = await chain.subscribe("alice", module, 1);
  await chain.charge(module, a);
  return { module, a };
}

/** Creates a module and, in the same block, a plan on it and a subscription to that plan. */
export async function sameBlockModule(chain: TestChain, owner: WalletName, token: Address, subscriber: WalletName) {
  const pc = chain.publicClient;
  const nonce = BigInt(await pc.getTransactionCount({ address: chain.processor }));
  const predicted = getContractAddress({ from: chain.processor, nonce });
  await chain.testClient.setAutomine(false);
  try {
    const ownerNonce = await pc.getTransactionCount({ address: chain.address(owner), blockTag: "pending" });
    const subNonce = await pc.getTransactionCount({ address: chain.address(subscriber), blockTag: "pending" });
    const gas = 3_000_000n;
    const hashes = [
      await chain.wallet(owner).writeContract({
        ...chain.processorContract,
        functionName: "createModule",
        nonce: ownerNonce,
        gas,
      }),
      await chain.wallet(owner).writeContract({
        address: predicted,
        abi: subscriptionModuleAbi,
        functionName: "createPlan",
        args: [9, token, 77n, 120, 30],
        nonce: ownerNonce + 1,
        gas,
      }),
      await chain.wallet(subscriber).writeContract({
        address: predicted,
        abi: subscriptionModuleAbi,
        functionName: "subscribe",
        args: [9, 2, 0n],
        nonce: subNonce,
        gas,
      }),
    ];
    await chain.testClient.mine({ blocks: 1 });
    const receipts = await Promise.all(hashes.map((h) => chain.send(h)));
    if (new Set(receipts.map((r) => r.blockNumber)).size !== 1) throw new Error("expected one block");
  } finally {
    await chain.testClient.setAutomine(true);
  }
  return predicted;
}

/** Runs the whole scenario on a fresh test chain. */
export async function runScenario(chain: TestChain): Promise<Scenario> {
  const tusd = await chain.deployToken({ symbol: "TUSD", decimals: 6 });
  const nometa = await chain.deployToken({ kind: "nometa" });
  const falsy = await chain.deployToken({ kind: "false", symbol: "FALSE", decimals: 18 });
  const m1 = await chain.createModule("merchant");
  const m2 = await chain.createModule("merchant2");
  await chain.createPlan("merchant", m1, {
    planId: 1,
    token: tusd,
    amount: 1_000_003n,
    interval: 3600,
    gracePeriod: 600,
  });
  await chain.createPlan("merchant", m1, { planId: 2, token: nometa, amount: 500n, interval: 86_400 });
  await chain.createPlan("merchant", m1, { planId: 3, token: falsy, amount: 700n, interval: 60 });
  await chain.createPlan("merchant2", m2, { planId: 1, token: tusd, amount: 42n, interval: 10, gracePeriod: 5 });

  await chain.fund("alice", tusd, 100_000_000n);
  await chain.fund("bob", tusd, 10n); // approved, but the balance is too low: InsufficientBalance
  await chain.fund("erin", falsy, 1_000_000n); // FalseToken: TransferFailed
  await chain.fund("dave", tusd, 100_000_000n);

  const now = await chain.now();
  const a1 = await chain.subscribe("alice", m1, 1, { maxExecutions: 5 });
  const b1 = await chain.subscribe("bob", m1, 1);
  const c1 = await chain.subscribe("carol", m1, 1); // never approves: InsufficientAllowance
  const d1 = await chain.subscribe("dave", m1, 1, { allowanceExpiry: now + 50n });
  const e1 = await chain.subscribe("erin", m1, 3);
  const a2 = await chain.subscribe("alice", m2, 1, { allowanceExpiry: MAX_UINT64 });
  const n1 = await chain.subscribe("alice", m1, 2);

  await chain.charge(m1, a1); // success from allowance
  await chain.charge(m1, b1); // InsufficientBalance
  await chain.charge(m1, c1); // InsufficientAllowance
  await chain.charge(m1, e1); // TransferFailed
  await chain.charge(m2, a2, "merchant2"); // the module owner charges its own subscription
  await chain.testClient.increaseTime({ seconds: 3600 });
  await chain.charge(m1, d1); // AllowanceExpired
  await processorCall(chain, "alice", "refill", [m1, a1, 2_000_006n]);
  await chain.charge(m1, a1); // success from credit
  await chain.charge(m1, c1); // fails again: the schedule is unchanged
  await processorCall(chain, "alice", "refill", [m1, a1, 5n]);
  await processorCall(chain, "alice", "withdrawCredit", [m1, a1]);

  await moduleCall(chain, "alice", m1, "pause", [a1]);
  await moduleCall(chain, "merchant", m1, "resume", [a1]);
  await moduleCall(chain, "alice", m1, "setAllowanceExpiry", [a1, MAX_UINT64]);
  await moduleCall(chain, "alice", m1, "setAllowanceExpiry", [a1, now + 100_000n]);
  await moduleCall(chain, "merchant", m1, "pause", [b1]);
  await moduleCall(chain, "bob", m1, "cancel", [b1]);
  await moduleCall(chain, "merchant", m1, "blockSubscriber", [chain.address("carol")]);
  await moduleCall(chain, "merchant", m1, "unblockSubscriber", [chain.address("carol")]);
  await moduleCall(chain, "merchant", m1, "blockSubscriber", [chain.address("bob")]);
  await moduleCall(chain, "merchant2", m2, "blockSubscriber", [chain.address("dave")]);

  await processorCall(chain, "deployer", "setKeeper", [chain.address("keeper2"), true]);
  await processorCall(chain, "deployer", "setKeeper", [chain.address("keeper2"), false]);
  await processorCall(chain, "deployer", "setFee", [100, chain.address("erin")]);
  await chain.testClient.increaseTime({ seconds: 10 });
  await chain.charge(m2, a2, "keeper"); // a fee of 100 bps now

  // A bob subscription re-created after cancel is blocked; the same-block module is used at once.
  await chain.send(
    chain.wallet("bob").writeContract({
      address: tusd,
      abi: testTokenAbi,
      functionName: "approve",
      args: [chain.processor, maxUint256],
    }),
  );
  const sameBlock = await sameBlockModule(chain, "dave", tusd, "alice");
  return { tokens: { tusd, nometa, falsy }, modules: { m1, m2, sameBlock }, subs: [a1, b1, c1, d1, e1, a2, n1] };
}

/** mulberry32: a small deterministic PRNG, so a failing seed can be replayed. */
export function prng(seed: number) {
  let a = seed >>> 0;
  const next = () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
  return {
    next,
    int: (n: number) => Math.floor(next() * n),
    pick: <T>(xs: readonly T[]) => xs[Math.floor(next() * xs.length)]!,
  };
}

/** One action of {@link randomBlockScenario} that the chain accepted, at its block's timestamp (unix seconds). */
export type BlockScenarioAction = { at: number; block: bigint } & BlockScenarioStep;

type BlockScenarioStep =
  | { kind: "subscribe"; wallet: WalletName; planId: number; id: bigint }
  | { kind: "charge"; id: bigint; succeeded: boolean }
  | { kind: "pause"; id: bigint }
  | { kind: "resume"; id: bigint }
  | { kind: "cancel"; id: bigint }
  | { kind: "block"; wallet: WalletName }
  | { kind: "unblock"; wallet: WalletName };

/** Plans of {@link randomBlockScenario}: short enough that time advances make paid allocations expire. */
export const BLOCK_SCENARIO_PLANS = [
  { planId: 1, interval: 3600, gracePeriod: 600 },
  { planId: 2, interval: 7200, gracePeriod: 0 },
  { planId: 3, interval: 1800, gracePeriod: 300 },
] as const;

/**
 * A random history on a fresh module of `merchant` where few wallets hold several allocations each (several plans,
 * cancel and subscribe again) and get blocked and unblocked often, with charges, pauses and time passing between.
 * Actions are mostly picked to be valid; any may still revert (a charge not due yet…), which changes nothing.
 * Returns the module and every action the chain accepted, in chain order, at its block's timestamp.
 */
export async function randomBlockScenario(
  chain: TestChain,
  seed: number,
  opts: { steps: number; merchant?: WalletName; wallets?: WalletName[] },
): Promise<{ module: Address; actions: BlockScenarioAction[] }> {
  const rnd = prng(seed);
  const merchant = opts.merchant ?? "merchant";
  const wallets = opts.wallets ?? ["alice", "bob", "carol"];
  const token = await chain.deployToken();
  const module = await chain.createModule(merchant);
  for (const p of BLOCK_SCENARIO_PLANS) await chain.createPlan(merchant, module, { ...p, token, amount: 1000n });
  for (const w of wallets) await chain.fund(w, token, 10n ** 15n);
  const actions: BlockScenarioAction[] = [];
  // What the generator believes, to pick mostly valid actions (the chain decides).
  const live: { id: bigint; wallet: WalletName; planId: number; paused: boolean }[] = [];
  const blocked = new Set<WalletName>();
  const send = async (
    step: BlockScenarioStep,
    tx: () => Promise<TransactionReceipt>,
    decode: (r: TransactionReceipt) => Partial<BlockScenarioStep> = () => ({}),
  ): Promise<BlockScenarioAction | undefined> => {
    const receipt = await tx().catch(() => undefined);
    if (!receipt) return undefined;
    const block = await chain.publicClient.getBlock({ blockNumber: receipt.blockNumber });
    const action = { ...step, ...decode(receipt), at: Number(block.timestamp), block: receipt.blockNumber };
    actions.push(action as BlockScenarioAction);
    return action as BlockScenarioAction;
  };
  const subscribe = async (wallet: WalletName, planId: number) => {
    const created = await send(
      { kind: "subscribe", wallet, planId, id: 0n },
      () => moduleCall(chain, wallet, module, "subscribe", [planId, 0, 0n]),
      (r) => ({
        id: parseEventLogs({ abi: subscriptionModuleAbi, eventName: "SubscriptionCreated", logs: r.logs })[0]!.args
          .subscriptionId,
      }),
    );
    if (created?.kind === "subscribe") live.push({ id: created.id, wallet, planId, paused: false });
  };
  for (let step = 0; step < opts.steps; step++) {
    const roll = rnd.int(100);
    const sub = live.length ? rnd.pick(live) : undefined;
    const free = wallets.flatMap((w) =>
      blocked.has(w)
        ? []
        : BLOCK_SCENARIO_PLANS.filter((p) => !live.some((s) => s.wallet === w && s.planId === p.planId)).map(
            (p) => [w, p.planId] as const,
          ),
    );
    if ((roll < 25 || !sub) && free.length) {
      await subscribe(...rnd.pick(free));
    } else if (roll < 45 && sub) {
      await send(
        { kind: "charge", id: sub.id, succeeded: false },
        () => chain.charge(module, sub.id),
        (r) => ({
          succeeded:
            parseEventLogs({ abi: subscriptionProcessorAbi, eventName: "ChargeSucceeded", logs: r.logs }).length > 0,
        }),
      );
    } else if (roll < 58 && sub) {
      const kind = sub.paused ? "resume" : "pause";
      const who = rnd.int(2) ? merchant : sub.wallet;
      if (await send({ kind, id: sub.id }, () => moduleCall(chain, who, module, kind, [sub.id])))
        sub.paused = !sub.paused;
    } else if (roll < 66 && sub) {
      if (await send({ kind: "cancel", id: sub.id }, () => moduleCall(chain, sub.wallet, module, "cancel", [sub.id])))
        live.splice(live.indexOf(sub), 1);
    } else if (roll < 84) {
      // Blocks and unblocks alternate per wallet (either one reverts when repeated).
      const wallet = rnd.pick(wallets);
      const kind = blocked.has(wallet) ? "unblock" : "block";
      const fn = kind === "block" ? "blockSubscriber" : "unblockSubscriber";
      if (await send({ kind, wallet }, () => moduleCall(chain, merchant, module, fn, [chain.address(wallet)]))) {
        if (kind === "block") blocked.add(wallet);
        else blocked.delete(wallet);
      }
    } else {
      await chain.testClient.increaseTime({ seconds: 600 + rnd.int(3 * 3600) });
      await chain.testClient.mine({ blocks: 1 });
    }
  }
  return { module, actions };
}
