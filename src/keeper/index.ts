import { getAddress } from "viem";
import { subscriptionProcessorAbi } from "../chain/abis";
import { chainDefinition } from "../chain/define";
import { createPollLoop, eachBounded } from "../common/async";
import { AppError } from "../common/errors";
import { silentLogger } from "../common/log";
import { createCharger, type PassContext } from "./charge";
import { KeeperConfigError } from "./errors";
import { createKeeperLock, type KeeperLock } from "./lock";
import { createNonceManager } from "./nonce";
import { findDueSubscriptions, indexedBlock, releaseAllClaims, releaseUnsentClaims } from "./queries";
import { createReceipts } from "./receipts";
import { emptyResult, type Keeper, type KeeperContext, type KeeperOptions, type TickResult } from "./types";

export { KeeperConfigError } from "./errors";
export type * from "./types";

/** Every pass failed all its attempts: the RPC or the database is in trouble, so the loop backs off. */
class KeeperPassError extends AppError {}

/** The shared context of one keeper, checked: the wallet must be on the configured chain. */
function keeperContext(opts: KeeperOptions): KeeperContext {
  const { sql, client, wallet, config } = opts;
  const chainId = config.chainId;
  if (wallet.chain && wallet.chain.id !== chainId) {
    throw new KeeperConfigError(`keeper wallet is on chain ${wallet.chain.id}, the service on chain ${chainId}`, {
      fields: { walletChainId: wallet.chain.id, chainId },
    });
  }
  const address = wallet.account.address;
  return {
    sql,
    client,
    wallet,
    chain: wallet.chain ?? chainDefinition(chainId),
    chainId,
    processor: getAddress(config.PROCESSOR_ADDRESS),
    address,
    owner: `${address.toLowerCase()}:${crypto.randomUUID().slice(0, 8)}`,
    log: opts.log ?? silentLogger,
    claimTtlMs: opts.claimTtlMs ?? 120_000,
    maxFeePerGas: config.maxFeePerGas,
  };
}

/** Whether other processes can reach this database (so an advisory lock is needed): Postgres with a pool. */
async function sharedDatabase(opts: KeeperOptions): Promise<boolean> {
  const poolSize = (opts.sql as unknown as { options?: { max?: number } }).options?.max ?? 10;
  if (poolSize < 2) return false;
  if (opts.dbKind) return opts.dbKind === "postgres";
  const [row] = await opts.sql<{ v: string }[]>`select version() as v`;
  return !row!.v.includes("PGlite");
}

/**
 * Creates the keeper: each pass, while it holds its key's lock, reads due subscriptions from the index and sends
 * `charge(module, id)` for each one whose simulation passes; receipts are collected (and slow transactions
 * replaced) on later passes.
 */
export function createKeeper(opts: KeeperOptions): Keeper {
  const ctx = keeperContext(opts);
  const { sql, client, chainId, address, owner, log, processor } = ctx;
  const { config } = opts;
  const retrySchedule = config.retrySchedule.length ? config.retrySchedule : [86_400];
  const nonces = createNonceManager(ctx);
  const receipts = createReceipts(ctx, nonces, {
    txDeadlineMs: config.txDeadlineMs ?? 30_000,
    txTimeoutMs: opts.txTimeoutMs ?? 180_000,
    awaitIndexTimeoutMs: opts.awaitIndexTimeoutMs ?? 600_000,
  });
  const charger = createCharger(ctx, nonces, receipts);
  let lock: KeeperLock | undefined;
  let standbyLogged = false;
  let tickQueue: Promise<unknown> = Promise.resolve();

  /** Whether this instance may send now; a change of holder resets the nonce and the dead holder's claims. */
  async function holdLock(): Promise<boolean> {
    lock ??= createKeeperLock(sql, chainId, address, await sharedDatabase(opts));
    const state = await lock.hold();
    if (state.lost) log("warn", "keeper lost its key's lock: standing by", { keeper: address });
    if (state.acquired) {
      nonces.reset();
      await releaseUnsentClaims(sql, { chainId, address });
      log("info", "keeper holds its key's lock: sending charges", { keeper: address, chainId });
    } else if (!state.held && !standbyLogged) {
      log("info", "keeper is a standby: another process sends with this key", { keeper: address, chainId });
    }
    standbyLogged = !state.held;
    return state.held;
  }

  async function runTick(): Promise<TickResult> {
    if (!(await holdLock())) return emptyResult("0", true);
    const head = await client.getBlock({ blockTag: "latest" });
    const wall = BigInt(Math.floor(Date.now() / 1000));
    const now = head.timestamp > wall ? head.timestamp : wall;
    const result = emptyResult(now.toString());
    const indexed = await indexedBlock(sql, chainId);
    await receipts.collect(indexed, result);
    const due = await findDueSubscriptions(sql, {
      chainId,
      now,
      retrySchedule,
      owner,
      limit: opts.batchLimit ?? 500,
      maxAttempts: config.maxAttempts,
      recheckIntervalS: config.recheckIntervalS,
    });
    result.due = due.length;
    let room = Math.max(0, (opts.maxInFlight ?? 64) - receipts.pending());
    const todo = due.filter((d) => {
      const reason = receipts.has(d.subscription_id) ? "in_flight" : room-- > 0 ? null : "capacity";
      if (reason) result.skipped.push({ module: d.module, subscriptionId: d.subscription_id, reason });
      return !reason;
    });
    const pass: PassContext = { now, indexed, head: head.number, baseFee: head.baseFeePerGas ?? null };
    await eachBounded(todo, opts.concurrency ?? 4, (d) => charger.tryCharge(d, pass, result));
    if (result.sent.length || result.replaced.length || result.errors) {
      const { sent, replaced, errors } = result;
      log("debug", "keeper pass", {
        now: result.now,
        due: result.due,
        sent: sent.length,
        replaced: replaced.length,
        errors,
      });
    }
    return result;
  }

  function tick(): Promise<TickResult> {
    const next = tickQueue.then(runTick, runTick);
    tickQueue = next.catch(() => {});
    return next;
  }

  const loop = createPollLoop({
    intervalMs: config.POLL_INTERVAL_MS,
    step: async () => {
      const r = await tick();
      // Every attempt failing means the RPC or database is in trouble: back off like a failed pass.
      if (r.errors > 0 && r.sent.length === 0) throw new KeeperPassError(`${r.errors} charge attempts failed`);
      return false;
    },
    onError: (err, _failures, delay) => log("warn", "keeper pass failed", { err, retryInMs: delay }),
  });

  /** Collects what is still outstanding for a little while (so the log says how it ended), then hands over. */
  async function drain() {
    const deadline = Date.now() + Math.min(5_000, opts.txTimeoutMs ?? 180_000);
    while (receipts.pending() > 0 && Date.now() < deadline) {
      try {
        await receipts.collect(await indexedBlock(sql, chainId), emptyResult());
      } catch {
        break;
      }
      await Bun.sleep(Math.min(config.POLL_INTERVAL_MS, 200));
    }
    await receipts.handOver();
  }

  return {
    address,
    inFlight: () => receipts.size(),
    tick,
    start: async () => {
      if (loop.running()) return;
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
      log("info", "keeper started", {
        keeper: address,
        processor,
        chainId,
        pollMs: config.POLL_INTERVAL_MS,
        retrySchedule,
      });
      loop.start();
    },
    stop: async () => {
      await loop.stop();
      await tickQueue;
      await drain();
      await lock?.release();
      log("info", "keeper stopped", { keeper: address, inFlight: receipts.size() });
    },
  };
}
