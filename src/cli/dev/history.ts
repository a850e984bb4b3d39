/**
 * The demo's months of growth: customers who sign up over the weeks (more each week), renew, upgrade and downgrade
 * (subscribing to the other plan and cancelling the old one in the same block, as a wallet would), cancel and come
 * back, pause and resume, fail renewals (balance, allowance, expired allowance) and recover, and one who is blocked.
 * A simulated keeper charges every due subscription once a day. Each simulated half-day is one block: the day's
 * transactions go to anvil in one JSON-RPC batch with automine off, then one `evm_mine` at the block's timestamp.
 * The story is drawn from a seeded generator, so every run tells the same one.
 */
import { encodeFunctionData, maxUint256, parseEventLogs, type Abi, type Address, type Hex, type RpcLog } from "viem";
import { subscriptionModuleAbi, subscriptionProcessorAbi, testTokenAbi } from "../../chain/abis";

const DAY = 86_400;
/** Gas sent with every transaction (no estimate: the state it would be estimated against is not mined yet). */
const GAS = 600_000n;

/** A plan the story uses. */
export type StoryPlan = { module: Address; planId: number; token: Address; amount: bigint; interval: number };
/** The plans by role: basic and plus monthly in USDC, weekly and team weekly in DAI, yearly in DAI. */
export type StoryPlans = Record<"basic" | "plus" | "weekly" | "team" | "yearly", StoryPlan>;
type PlanKey = keyof StoryPlans;

/** Where the story runs and who plays in it. */
export type HistoryOptions = {
  rpcUrl: string;
  processor: Address;
  keeper: Address;
  merchant: Address;
  customers: Address[];
  plans: StoryPlans;
  /** Unix second of day 0. */
  t0: number;
  /** The story's days: sign-ups happen before `lastDay - 4`, nothing after `lastDay`. */
  lastDay: number;
};

type Tx = { from: Address; to: Address; abi: Abi; fn: string; args: unknown[]; then?: (r: Receipt) => void };
type Receipt = { status: Hex; logs: RpcLog[] };
type Sub = {
  id: bigint;
  plan: StoryPlan;
  owner: Address;
  nextChargeAt: number;
  paused: boolean;
  stopped: boolean;
  failures: number;
  lastAttemptDay: number;
};
type Customer = { address: Address; subs: Partial<Record<PlanKey, Sub>> };
/** One step of a customer's story: on `day`, in the morning block (`act`) or the keeper's block. */
type Step = { day: number; block: "act" | "keeper"; txs: (day: number) => Tx[] };

/** mulberry32: a small seeded generator (the same story every run). */
function generator(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

/** A demo history runner: `runDays(from, to)` plays days [from, to) and leaves automine on. */
export function createHistory(o: HistoryOptions) {
  const subs: Sub[] = [];
  const steps: Step[] = [];
  const rand = generator(20_261_129);
  const between = (lo: number, hi: number) => lo + Math.floor(rand() * (hi - lo + 1));
  const blocks = new Map<Address, Set<Address>>(); // module → blocked wallets
  let created = 0;

  const mod = (from: Address, module: Address, fn: string, args: unknown[], then?: Tx["then"]): Tx => ({
    from,
    to: module,
    abi: subscriptionModuleAbi as Abi,
    fn,
    args,
    then,
  });
  const token = (from: Address, address: Address, fn: string, args: unknown[]): Tx => ({
    from,
    to: address,
    abi: testTokenAbi as Abi,
    fn,
    args,
  });
  const whole = (p: StoryPlan) => (p.token === o.plans.basic.token ? 10n ** 6n : 10n ** 18n);

  /** Subscribes `c` to `key` now; the keeper takes the first charge in the afternoon block. */
  const subscribe = (c: Customer, key: PlanKey, allowanceExpiry = 0n): Tx => {
    const plan = o.plans[key];
    return mod(c.address, plan.module, "subscribe", [plan.planId, 0, allowanceExpiry], (r) => {
      const [ev] = parseEventLogs({ abi: subscriptionModuleAbi, eventName: "SubscriptionCreated", logs: r.logs });
      if (!ev) throw new Error("demo history: subscribe emitted no SubscriptionCreated");
      const sub: Sub = {
        id: ev.args.subscriptionId,
        plan,
        owner: c.address,
        nextChargeAt: 0,
        paused: false,
        stopped: false,
        failures: 0,
        lastAttemptDay: -1,
      };
      created++;
      subs.push(sub);
      c.subs[key] = sub;
    });
  };
  const fund = (c: Customer, key: PlanKey, amount: bigint, allowance: bigint = maxUint256): Tx[] => [
    token(c.address, o.plans[key].token, "mint", [c.address, amount]),
    token(c.address, o.plans[key].token, "approve", [o.processor, allowance]),
  ];
  const cancel = (c: Customer, key: PlanKey): Tx[] => {
    const sub = c.subs[key];
    if (!sub || sub.stopped) return [];
    sub.stopped = true;
    delete c.subs[key];
    return [mod(c.address, sub.plan.module, "cancel", [sub.id])];
  };
  /** After the customer fixed what failed: the keeper tries again at its next round. */
  const retrySoon = (c: Customer) => {
    for (const s of Object.values(c.subs)) s.failures = 0;
  };
  const at = (day: number, block: Step["block"], txs: Step["txs"]) => {
    if (day <= o.lastDay) steps.push({ day, block, txs });
  };

  const upgrade: Partial<Record<PlanKey, PlanKey>> = { basic: "plus", weekly: "team" };
  const downgrade: Partial<Record<PlanKey, PlanKey>> = { plus: "basic", team: "weekly" };
  const n = o.customers.length;
  const blockedIndex = Math.floor(n * 0.3);
  o.customers.forEach((address, i) => {
    const c: Customer = { address, subs: {} };
    // Sign-ups grow over the weeks: the cumulative count rises with the square of time.
    // The first three arrive in the first days.
    const signup = i < 3 ? 1 + 2 * i : Math.floor(3 + (o.lastDay - 8) * Math.sqrt((i + 0.5) / n));
    const r = rand();
    const key: PlanKey = r < 0.42 ? "basic" : r < 0.62 ? "plus" : r < 0.82 ? "weekly" : r < 0.9 ? "team" : "yearly";
    const plan = o.plans[key];
    const fate = rand();
    const later = between(14, 45);
    if (fate < 0.12) {
      // Failed renewals: the wallet holds a few payments only; most top up later (before or after the grace).
      const periods = BigInt(key === "weekly" || key === "team" ? between(2, 5) : between(1, 2));
      at(signup, "act", () => [...fund(c, key, plan.amount * periods), subscribe(c, key)]);
      const failsOn = signup + Number(periods) * (plan.interval / DAY);
      if (rand() < 0.7)
        at(failsOn + between(1, 14), "act", () => {
          retrySoon(c);
          return [token(c.address, plan.token, "mint", [c.address, 1000n * whole(plan)])];
        });
      return;
    }
    if (fate < 0.18) {
      // An allowance with an end date: the renewal after it fails (AllowanceExpired) until the wallet extends it.
      const expiry = BigInt(o.t0 + (signup + between(20, 40)) * DAY);
      at(signup, "act", () => [...fund(c, key, 1000n * whole(plan)), subscribe(c, key, expiry)]);
      if (rand() < 0.6)
        at(signup + 45 + between(0, 15), "act", () => {
          retrySoon(c);
          const sub = c.subs[key];
          return sub ? [mod(c.address, plan.module, "setAllowanceExpiry", [sub.id, 0n])] : [];
        });
      return;
    }
    at(signup, "act", () => [...fund(c, key, 1000n * whole(plan)), subscribe(c, key)]);
    if (i === blockedIndex) {
      at(signup + later, "act", () => {
        const sub = c.subs[key];
        if (!sub) return [];
        for (const s of subs) if (s.owner === c.address && s.plan.module === plan.module) s.stopped = true;
        blocks.set(plan.module, (blocks.get(plan.module) ?? new Set()).add(c.address));
        return [mod(o.merchant, plan.module, "blockSubscriber", [c.address])];
      });
      return;
    }
    const target = fate < 0.34 ? upgrade[key] : fate < 0.44 ? downgrade[key] : undefined;
    if (target) {
      // A plan change: the new plan's first charge and the old plan's cancellation land in one block.
      at(signup + later, "act", () => [...fund(c, target, 1000n * whole(o.plans[target])), subscribe(c, target)]);
      at(signup + later, "keeper", () => cancel(c, key));
      return;
    }
    if (fate < 0.6) {
      at(signup + later, "act", () => cancel(c, key));
      if (rand() < 0.4) at(signup + later + between(10, 40), "act", () => [subscribe(c, key)]);
      return;
    }
    if (fate < 0.67) {
      at(signup + later, "act", () => [token(c.address, plan.token, "approve", [o.processor, 0n])]);
      if (rand() < 0.6)
        at(signup + later + between(8, 25), "act", () => {
          retrySoon(c);
          return [token(c.address, plan.token, "approve", [o.processor, maxUint256])];
        });
      return;
    }
    if (fate < 0.74) {
      const resume = signup + later + between(10, 30);
      at(signup + later, "act", () => {
        const sub = c.subs[key];
        if (!sub) return [];
        sub.paused = true;
        return [mod(c.address, plan.module, "pause", [sub.id])];
      });
      at(resume, "act", () => {
        const sub = c.subs[key];
        if (!sub) return [];
        sub.paused = false;
        return [mod(c.address, plan.module, "resume", [sub.id])];
      });
    }
  });

  const rpcUrl = o.rpcUrl;
  let rpcId = 0;
  async function rpc<T>(calls: { method: string; params: unknown[] }[]): Promise<T[]> {
    if (!calls.length) return [];
    const body = calls.map((c) => ({ jsonrpc: "2.0", id: ++rpcId, ...c }));
    const res = await fetch(rpcUrl, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify(body),
    });
    const out = (await res.json()) as { id: number; result?: T; error?: { message: string } }[];
    const byId = new Map(out.map((r) => [r.id, r]));
    return body.map((b) => {
      const r = byId.get(b.id);
      if (!r || r.error) throw new Error(`demo history: ${b.method} failed: ${r?.error?.message ?? "no answer"}`);
      return r.result as T;
    });
  }

  const nonces = new Map<Address, number>();
  /** Mines `txs` in one block at `timestamp` and hands each its receipt. */
  async function mineBlock(txs: Tx[], timestamp: number): Promise<void> {
    if (!txs.length) return;
    const unknown = [...new Set(txs.map((t) => t.from))].filter((a) => !nonces.has(a));
    const counts = await rpc<Hex>(unknown.map((a) => ({ method: "eth_getTransactionCount", params: [a, "pending"] })));
    unknown.forEach((a, i) => nonces.set(a, Number(counts[i])));
    const hashes = await rpc<Hex>(
      txs.map((t) => {
        const nonce = nonces.get(t.from)!;
        nonces.set(t.from, nonce + 1);
        const data = encodeFunctionData({ abi: t.abi, functionName: t.fn, args: t.args } as never);
        const tx = { from: t.from, to: t.to, data, gas: `0x${GAS.toString(16)}`, nonce: `0x${nonce.toString(16)}` };
        return { method: "eth_sendTransaction", params: [tx] };
      }),
    );
    await rpc([{ method: "evm_mine", params: [timestamp] }]);
    const [receipts] = await rpc<(Receipt & { transactionHash: Hex })[]>([
      { method: "eth_getBlockReceipts", params: ["latest"] },
    ]);
    const byHash = new Map(receipts!.map((r) => [r.transactionHash, r]));
    txs.forEach((t, i) => {
      const r = byHash.get(hashes[i]!);
      if (!r) throw new Error(`demo history: ${t.fn} from ${t.from} was not mined`);
      if (r.status !== "0x1") throw new Error(`demo history: ${t.fn} from ${t.from} reverted`);
      t.then?.(r);
    });
  }

  /** The keeper's round: every due subscription, failed ones again for three days and then weekly. */
  function keeperRound(day: number, now: number): Tx[] {
    const due = subs.filter(
      (s) =>
        !s.stopped &&
        !s.paused &&
        s.nextChargeAt <= now &&
        (s.failures < 3 || day - s.lastAttemptDay >= 7) &&
        !blocks.get(s.plan.module)?.has(s.owner),
    );
    return due.map((s) => ({
      from: o.keeper,
      to: o.processor,
      abi: subscriptionProcessorAbi as Abi,
      fn: "charge",
      args: [s.plan.module, s.id],
      then: (r: Receipt) => {
        s.lastAttemptDay = day;
        const logs = parseEventLogs({ abi: subscriptionProcessorAbi, logs: r.logs });
        if (logs.some((l) => l.eventName === "ChargeSucceeded")) {
          s.nextChargeAt = now + s.plan.interval;
          s.failures = 0;
        } else s.failures++;
      },
    }));
  }

  return {
    /** Subscriptions the story created so far. */
    get subscriptions() {
      return created;
    },
    /** Plays days [from, to): a morning block of the customers' steps, an afternoon block of the keeper's. */
    async runDays(from: number, to: number): Promise<void> {
      nonces.clear();
      await rpc([{ method: "evm_setAutomine", params: [false] }]);
      try {
        for (let day = from; day < to; day++) {
          const today = steps.filter((s) => s.day === day);
          const morning = o.t0 + day * DAY + 9 * 3600;
          await mineBlock(
            today.filter((s) => s.block === "act").flatMap((s) => s.txs(day)),
            morning,
          );
          const afternoon = o.t0 + day * DAY + 15 * 3600;
          const own = today.filter((s) => s.block === "keeper").flatMap((s) => s.txs(day));
          await mineBlock([...own, ...keeperRound(day, afternoon)], afternoon);
        }
      } finally {
        await rpc([{ method: "evm_setAutomine", params: [true] }]);
      }
    },
  };
}
