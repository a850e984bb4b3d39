import {
  BaseError,
  ContractFunctionRevertedError,
  TransactionReceiptNotFoundError,
  encodeFunctionData,
  getAbiItem,
  getAddress,
  type Account,
  type Address,
  type Chain,
  type Hash,
  type PublicClient,
  type Transport,
  type WalletClient,
} from "viem";
import { subscriptionProcessorAbi } from "../chain/abis";
import { chainDefinition } from "../chain/define";
import type { Sql } from "../db/client";
import { silentLogger, type Logger } from "../common/log";
import {
  claimSubscription,
  findDueSubscriptions,
  indexedBlock,
  noteClaimTx,
  releaseAllClaims,
  releaseClaim,
  type DueSubscription,
} from "./queries";

/** A viem wallet client with the keeper's account attached (a local private-key account). */
export type KeeperWallet = WalletClient<Transport, Chain | undefined, Account>;

/** The part of the service config the keeper reads. */
export type KeeperConfig = {
  chainId: number;
  PROCESSOR_ADDRESS: string;
  POLL_INTERVAL_MS: number;
  /** Seconds to wait after the 1st, 2nd, … consecutive failed charge; the last entry repeats. */
  retrySchedule: number[];
};

/** Options for {@link createKeeper}; the tuning knobs have production defaults. */
export type KeeperOptions = {
  sql: Sql;
  client: PublicClient;
  wallet: KeeperWallet;
  config: KeeperConfig;
  log?: Logger;
  /** Most transactions sent and not yet mined at once (default 64). */
  maxInFlight?: number;
  /** Subscriptions simulated in parallel; sends stay serialized by nonce (default 4). */
  concurrency?: number;
  /** How long a database claim keeps other keepers off a subscription (default 120 s). */
  claimTtlMs?: number;
  /** A sent transaction without a receipt after this long is given up and the nonce resynced (default 180 s). */
  txTimeoutMs?: number;
  /** A mined charge the indexer has not reached after this long is forgotten (default 600 s). */
  awaitIndexTimeoutMs?: number;
  /** Most due subscriptions read per tick (default 500). */
  batchLimit?: number;
};

/** A charge the keeper sent this tick. */
export type SentCharge = { module: string; subscriptionId: string; hash: Hash };

/** A due subscription the keeper did not send, and why (`NotDue`, `NotChargeable`, `claimed`, …). */
export type SkippedCharge = { module: string; subscriptionId: string; reason: string };

/** What one keeper pass did. */
export type TickResult = {
  /** Unix seconds used as "now": the later of the wall clock and the latest block. */
  now: string;
  /** Due subscriptions found in the index (after the retry schedule). */
  due: number;
  sent: SentCharge[];
  skipped: SkippedCharge[];
  /** Receipts received this pass, with their status. */
  mined: { subscriptionId: string; hash: Hash; status: "success" | "reverted" }[];
  /** RPC or database errors on single subscriptions (the pass went on). */
  errors: number;
};

/** The running keeper. */
export type Keeper = {
  /** Starts polling every POLL_INTERVAL_MS. */
  start: () => Promise<void>;
  /** Stops polling, finishes the current pass and collects outstanding receipts (bounded). */
  stop: () => Promise<void>;
  /** Runs one pass now (serialized with the polling loop). */
  tick: () => Promise<TickResult>;
  /** Charges sent and not yet seen by the indexer. */
  inFlight: () => number;
  /** The keeper's address. */
  address: Address;
};

/** Thrown when the wallet's chain disagrees with the configured chain. */
export class KeeperConfigError extends Error {
  override name = "KeeperConfigError";
}

type InFlight = {
  module: string;
  subscriptionId: string;
  hash: Hash;
  sentAt: number;
  receiptBlock?: bigint;
  minedAt?: number;
};

type Fees = { maxFeePerGas: bigint; maxPriorityFeePerGas: bigint } | { gasPrice: bigint };

const chargeFailedEvent = getAbiItem({ abi: subscriptionProcessorAbi, name: "ChargeFailed" });

// Reverts that mean "nothing to do right now": another keeper took it, or the state changed under us.
const QUIET_REVERTS = new Set(["NotDue", "NotChargeable"]);

/** The custom error name of a reverted call, or undefined when the error is not a revert (RPC trouble). */
function revertName(err: unknown): string | undefined {
  if (!(err instanceof BaseError)) return undefined;
  const reverted = err.walk((e) => e instanceof ContractFunctionRevertedError);
  if (reverted instanceof ContractFunctionRevertedError)
    return reverted.data?.errorName ?? reverted.reason ?? "reverted";
  return undefined;
}

/** Runs `fn` over `items` with at most `limit` at once. */
async function eachBounded<T>(items: T[], limit: number, fn: (item: T) => Promise<void>): Promise<void> {
  let next = 0;
  const lanes = Array.from({ length: Math.min(limit, items.length) }, async () => {
    while (next < items.length) await fn(items[next++]!);
  });
  await Promise.all(lanes);
}

/**
 * Creates the keeper: each pass reads due subscriptions from the index and sends `charge(module, id)` for
 * each one whose simulation passes, with its own nonce tracking and receipts collected on later passes.
 */
export function createKeeper(opts: KeeperOptions): Keeper {
  const { sql, client, wallet, config } = opts;
  const log = opts.log ?? silentLogger;
  const poll = config.POLL_INTERVAL_MS;
  const maxInFlight = opts.maxInFlight ?? 64;
  const concurrency = opts.concurrency ?? 4;
  const claimTtlMs = opts.claimTtlMs ?? 120_000;
  const txTimeoutMs = opts.txTimeoutMs ?? 180_000;
  const awaitIndexTimeoutMs = opts.awaitIndexTimeoutMs ?? 600_000;
  const batchLimit = opts.batchLimit ?? 500;
  const retrySchedule = config.retrySchedule.length ? config.retrySchedule : [86_400];
  const chainId = config.chainId;
  const processor = getAddress(config.PROCESSOR_ADDRESS);
  const account = wallet.account;
  const address = account.address;
  const owner = `${address.toLowerCase()}:${crypto.randomUUID().slice(0, 8)}`;
  if (wallet.chain && wallet.chain.id !== chainId) {
    throw new KeeperConfigError(`keeper wallet is on chain ${wallet.chain.id}, the service on chain ${chainId}`);
  }
  const chain = wallet.chain ?? chainDefinition(chainId);

  // Sent and not yet reflected by the index, by subscription id (unique per chain).
  const inFlight = new Map<string, InFlight>();
  let nonce: number | undefined;
  let sendQueue: Promise<unknown> = Promise.resolve();
  let simulateTag: "pending" | "latest" = "pending";
  let tickQueue: Promise<unknown> = Promise.resolve();
  let running = false;
  let loopDone: Promise<void> | undefined;
  let wake: (() => void) | undefined;

  // An unexpected revert (NotKeeper: this key is not allowed) repeats every pass: say so once a minute.
  const lastWarned = new Map<string, number>();
  function warnOnce(kind: string, msg: string, fields: Record<string, unknown>) {
    const last = lastWarned.get(kind) ?? 0;
    if (Date.now() - last < 60_000) return log("debug", msg, fields);
    lastWarned.set(kind, Date.now());
    log(
      "warn",
      msg,
      kind === "NotKeeper" ? { ...fields, keeper: address, hint: "the protocol owner must call setKeeper" } : fields,
    );
  }

  /** Serializes sends so nonces go out in order; a failed send forgets the nonce (resync on the next one). */
  function sendCharge(module: Address, id: bigint, gas: bigint, fees: Fees): Promise<Hash> {
    const run = async () => {
      if (nonce === undefined) nonce = await client.getTransactionCount({ address, blockTag: "pending" });
      try {
        const hash = await wallet.sendTransaction({
          account,
          chain,
          to: processor,
          data: encodeFunctionData({ abi: subscriptionProcessorAbi, functionName: "charge", args: [module, id] }),
          gas,
          nonce,
          ...fees,
        } as Parameters<KeeperWallet["sendTransaction"]>[0]);
        nonce += 1;
        return hash;
      } catch (err) {
        nonce = undefined;
        throw err;
      }
    };
    const result = sendQueue.then(run, run);
    sendQueue = result.catch(() => {});
    return result;
  }

  async function currentFees(): Promise<Fees> {
    try {
      const f = await client.estimateFeesPerGas();
      return { maxFeePerGas: f.maxFeePerGas, maxPriorityFeePerGas: f.maxPriorityFeePerGas };
    } catch (err) {
      if ((err as Error).name !== "Eip1559FeesNotSupportedError") throw err;
      return { gasPrice: await client.getGasPrice() };
    }
  }

  /** eth_call of the charge against the next block: `success` false means it would record a ChargeFailed. */
  async function simulate(module: Address, id: bigint): Promise<{ success: boolean } | { revert: string }> {
    try {
      const { result } = await client.simulateContract({
        address: processor,
        abi: subscriptionProcessorAbi,
        functionName: "charge",
        args: [module, id],
        account: address,
        blockTag: simulateTag,
      });
      return { success: result };
    } catch (err) {
      const name = revertName(err);
      if (name) return { revert: name };
      if (simulateTag === "pending" && /pending|block tag|not supported|unsupported/i.test(String(err))) {
        // Some RPCs refuse calls on the pending block; the latest one is the next best.
        simulateTag = "latest";
        return simulate(module, id);
      }
      throw err;
    }
  }

  /** Whether a ChargeFailed for this subscription was mined after the indexed block (another keeper's). */
  async function freshFailureOnChain(module: Address, id: bigint, indexed: bigint | null, head: bigint) {
    if (indexed === null || indexed >= head) return false;
    const fromBlock = indexed + 1n > head - 1000n ? indexed + 1n : head - 1000n;
    const logs = await client.getLogs({
      address: processor,
      event: chargeFailedEvent,
      args: { module, subscriptionId: id },
      fromBlock,
      toBlock: head,
    });
    return logs.length > 0;
  }

  /** Collects receipts of sent charges (bounded concurrency) and forgets those the indexer has reached. */
  async function collect(indexed: bigint | null, result: TickResult) {
    const waiting = [...inFlight.values()].filter((t) => t.receiptBlock === undefined);
    await eachBounded(waiting, 8, async (t) => {
      try {
        const r = await client.getTransactionReceipt({ hash: t.hash });
        t.receiptBlock = r.blockNumber;
        t.minedAt = Date.now();
        result.mined.push({ subscriptionId: t.subscriptionId, hash: t.hash, status: r.status });
        if (r.status === "success") {
          log("info", "charge mined", { subscriptionId: t.subscriptionId, tx: t.hash, block: r.blockNumber });
        } else {
          // A reverted charge records nothing on chain: forget it, the next pass simulates again.
          log("warn", "charge reverted", { subscriptionId: t.subscriptionId, tx: t.hash, block: r.blockNumber });
          inFlight.delete(t.subscriptionId);
          await releaseClaim(sql, { chainId, subscriptionId: t.subscriptionId, owner });
        }
      } catch (err) {
        if (!(err instanceof TransactionReceiptNotFoundError)) {
          result.errors += 1;
          log("warn", "receipt lookup failed", { tx: t.hash, err });
          return;
        }
        if (Date.now() - t.sentAt > txTimeoutMs) {
          log("warn", "charge not mined in time, giving up", { subscriptionId: t.subscriptionId, tx: t.hash });
          inFlight.delete(t.subscriptionId);
          nonce = undefined;
          await releaseClaim(sql, { chainId, subscriptionId: t.subscriptionId, owner });
        }
      }
    });
    for (const t of [...inFlight.values()]) {
      if (t.receiptBlock === undefined) continue;
      const reached = indexed !== null && indexed >= t.receiptBlock;
      const stale = Date.now() - (t.minedAt ?? t.sentAt) > awaitIndexTimeoutMs;
      if (!reached && !stale) continue;
      if (stale && !reached)
        log("warn", "indexer has not reached a mined charge", { subscriptionId: t.subscriptionId });
      inFlight.delete(t.subscriptionId);
      await releaseClaim(sql, { chainId, subscriptionId: t.subscriptionId, owner });
    }
  }

  async function tryCharge(
    due: DueSubscription,
    ctx: { indexed: bigint | null; head: bigint; fees?: Promise<Fees> },
    result: TickResult,
  ) {
    const subscriptionId = due.subscription_id;
    const module = getAddress(due.module);
    const id = BigInt(subscriptionId);
    const skip = (reason: string) => result.skipped.push({ module: due.module, subscriptionId, reason });
    if (!(await claimSubscription(sql, { chainId, subscriptionId, owner, ttlMs: claimTtlMs }))) return skip("claimed");
    let sent = false;
    try {
      const sim = await simulate(module, id);
      if ("revert" in sim) {
        if (QUIET_REVERTS.has(sim.revert)) log("debug", "charge skipped", { subscriptionId, reason: sim.revert });
        else warnOnce(sim.revert, "charge would revert", { subscriptionId, module: due.module, reason: sim.revert });
        return skip(sim.revert);
      }
      // A payment failure changes no state, so a second keeper would record the same failure again.
      if (!sim.success && (await freshFailureOnChain(module, id, ctx.indexed, ctx.head))) {
        return skip("failure_already_recorded");
      }
      const estimate = await client.estimateContractGas({
        address: processor,
        abi: subscriptionProcessorAbi,
        functionName: "charge",
        args: [module, id],
        account: address,
      });
      ctx.fees ??= currentFees();
      const hash = await sendCharge(module, id, (estimate * 12n) / 10n + 10_000n, await ctx.fees);
      sent = true;
      inFlight.set(subscriptionId, { module: due.module, subscriptionId, hash, sentAt: Date.now() });
      result.sent.push({ module: due.module, subscriptionId, hash });
      log("info", "charge sent", { subscriptionId, module: due.module, tx: hash, expectFailure: !sim.success });
      await noteClaimTx(sql, { chainId, subscriptionId, owner, txHash: hash });
    } catch (err) {
      const name = revertName(err);
      if (name) {
        // The estimate or the send itself reverted: the state moved between simulation and now.
        log(QUIET_REVERTS.has(name) ? "debug" : "warn", "charge skipped", { subscriptionId, reason: name });
        skip(name);
      } else {
        result.errors += 1;
        log("warn", "charge attempt failed", { subscriptionId, err });
      }
    } finally {
      if (!sent) await releaseClaim(sql, { chainId, subscriptionId, owner }).catch(() => {});
    }
  }

  async function runTick(): Promise<TickResult> {
    const head = await client.getBlock({ blockTag: "latest" });
    const wall = BigInt(Math.floor(Date.now() / 1000));
    const now = head.timestamp > wall ? head.timestamp : wall;
    const result: TickResult = { now: now.toString(), due: 0, sent: [], skipped: [], mined: [], errors: 0 };
    const indexed = await indexedBlock(sql, chainId);
    await collect(indexed, result);

    const due = await findDueSubscriptions(sql, { chainId, now, retrySchedule, owner, limit: batchLimit });
    result.due = due.length;
    const todo: DueSubscription[] = [];
    for (const d of due) {
      if (inFlight.has(d.subscription_id))
        result.skipped.push({ module: d.module, subscriptionId: d.subscription_id, reason: "in_flight" });
      else todo.push(d);
    }
    const room = Math.max(0, maxInFlight - [...inFlight.values()].filter((t) => t.receiptBlock === undefined).length);
    for (const d of todo.splice(room)) {
      result.skipped.push({ module: d.module, subscriptionId: d.subscription_id, reason: "capacity" });
    }
    const ctx: { indexed: bigint | null; head: bigint; fees?: Promise<Fees> } = { indexed, head: head.number };
    await eachBounded(todo, concurrency, async (d) => {
      await tryCharge(d, ctx, result);
    });
    if (result.sent.length || result.errors) {
      log("debug", "keeper pass", {
        now: result.now,
        due: result.due,
        sent: result.sent.length,
        errors: result.errors,
      });
    }
    return result;
  }

  function tick(): Promise<TickResult> {
    const next = tickQueue.then(runTick, runTick);
    tickQueue = next.catch(() => {});
    return next;
  }

  async function loop() {
    let failures = 0;
    while (running) {
      let delay = poll;
      try {
        const r = await tick();
        // Every attempt failing means the RPC or database is in trouble: back off like a failed pass.
        if (r.errors > 0 && r.sent.length === 0) throw new Error(`${r.errors} charge attempts failed`);
        failures = 0;
      } catch (err) {
        failures += 1;
        delay = Math.min(poll * 2 ** failures, 30_000);
        log("warn", "keeper pass failed", { err, retryInMs: delay });
      }
      if (!running) break;
      await new Promise<void>((resolve) => {
        const timer = setTimeout(resolve, delay);
        wake = () => {
          clearTimeout(timer);
          resolve();
        };
      });
      wake = undefined;
    }
  }

  return {
    address,
    inFlight: () => inFlight.size,
    tick,
    start: async () => {
      if (running) return;
      running = true;
      try {
        await releaseAllClaims(sql, { chainId, owner });
        const allowed = await client.readContract({
          address: processor,
          abi: subscriptionProcessorAbi,
          functionName: "isKeeper",
          args: [address],
        });
        if (!allowed) log("warn", "keeper address is not an allowed keeper of the processor", { keeper: address });
      } catch (err) {
        log("warn", "keeper start checks failed", { err });
      }
      log("info", "keeper started", { keeper: address, processor, chainId, pollMs: poll, retrySchedule });
      loopDone = loop();
    },
    stop: async () => {
      if (!running && !loopDone) return;
      running = false;
      wake?.();
      await loopDone;
      loopDone = undefined;
      // Collect what is still outstanding for a little while so the log says how it ended.
      const deadline = Date.now() + Math.min(5_000, txTimeoutMs);
      while ([...inFlight.values()].some((t) => t.receiptBlock === undefined) && Date.now() < deadline) {
        try {
          const scratch: TickResult = { now: "0", due: 0, sent: [], skipped: [], mined: [], errors: 0 };
          await collect(await indexedBlock(sql, chainId), scratch);
        } catch {
          break;
        }
        await Bun.sleep(Math.min(poll, 200));
      }
      // Mined charges are safe to hand over: another keeper's simulation sees them.
      for (const t of inFlight.values()) {
        if (t.receiptBlock !== undefined)
          await releaseClaim(sql, { chainId, subscriptionId: t.subscriptionId, owner }).catch(() => {});
      }
      log("info", "keeper stopped", { keeper: address, inFlight: inFlight.size });
    },
  };
}
