import { getAddress } from "viem";
import { subscriptionProcessorAbi } from "../chain/abis";
import { chainDefinition } from "../chain/define";
import { createPollLoop } from "../common/async";
import { AppError } from "../common/errors";
import { silentLogger } from "../common/log";
import { createCharger } from "./charge";
import { KeeperConfigError } from "./errors";
import { createKeeperLock, type KeeperLock } from "./lock";
import { createNonceManager } from "./nonce";
import { createPass } from "./pass";
import { indexedBlock, releaseAllClaims } from "./queries";
import { createReceipts, type Receipts } from "./receipts";
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
  // Charges are signed here so that their hash is recorded before the node sees them (nonce.ts).
  if (wallet.account.type !== "local") {
    throw new KeeperConfigError(`the keeper signs its charges itself: its account must be a local (private-key) one`, {
      fields: { accountType: wallet.account.type },
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
    observer: opts.observer,
    now: opts.clock ?? Date.now,
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

/** Drops this instance's stale claims and warns when the processor does not allow the key. */
async function startChecks(ctx: KeeperContext) {
  const { sql, client, chainId, owner, address, processor, log } = ctx;
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
}

/** At stop: collects what is still outstanding for up to `forMs` (so the log says how it ended), then hands over. */
async function drain(ctx: KeeperContext, receipts: Receipts, forMs: number, pollMs: number) {
  const deadline = Date.now() + forMs;
  while (receipts.pending() > 0 && Date.now() < deadline) {
    const result = emptyResult();
    try {
      await receipts.collect(await indexedBlock(ctx.sql, ctx.chainId), result);
    } catch {
      break;
    }
    // The node does not answer (a stopping dev chain, an outage): waiting longer only repeats the warnings.
    if (result.errors > 0) break;
    await Bun.sleep(Math.min(pollMs, 200));
  }
  await receipts.handOver();
}

/**
 * Creates the keeper: each pass, while it holds its key's lock, reads due subscriptions from the index and sends
 * `charge(module, id)` for each one whose simulation passes; receipts are collected (and slow transactions
 * replaced) on later passes.
 */
export function createKeeper(opts: KeeperOptions): Keeper {
  const ctx = keeperContext(opts);
  const { sql, chainId, address, log, processor } = ctx;
  const { config } = opts;
  const nonces = createNonceManager(ctx);
  const receipts = createReceipts(ctx, nonces, {
    txDeadlineMs: config.txDeadlineMs ?? 30_000,
    txTimeoutMs: opts.txTimeoutMs ?? 180_000,
    awaitIndexTimeoutMs: opts.awaitIndexTimeoutMs ?? 600_000,
  });
  let lock: Promise<KeeperLock> | undefined;
  const getLock = () =>
    (lock ??= sharedDatabase(opts).then((shared) => createKeeperLock(sql, chainId, address, shared)));
  const runPass = createPass(ctx, {
    config,
    lock: getLock,
    nonces,
    receipts,
    charger: createCharger(ctx, nonces, receipts),
    limits: {
      batchLimit: opts.batchLimit ?? 500,
      maxInFlight: opts.maxInFlight ?? 64,
      concurrency: opts.concurrency ?? 4,
    },
  });
  let tickQueue: Promise<unknown> = Promise.resolve();

  function tick(): Promise<TickResult> {
    const next = tickQueue.then(runPass, runPass);
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

  return {
    address,
    inFlight: () => receipts.size(),
    passes: () => loop.passes(),
    tick,
    start: async () => {
      if (loop.running()) return;
      await startChecks(ctx);
      const { retrySchedule, maxAttempts, recheckIntervalS, txDeadlineMs, maxFeePerGas } = config;
      const settings = { retrySchedule, maxAttempts, recheckIntervalS, txDeadlineMs, maxFeePerGas };
      log("info", "keeper started", {
        keeper: address,
        processor,
        chainId,
        pollMs: config.POLL_INTERVAL_MS,
        ...settings,
      });
      loop.start();
    },
    stop: async () => {
      await loop.stop();
      await tickQueue;
      await drain(ctx, receipts, Math.min(5_000, opts.txTimeoutMs ?? 180_000), config.POLL_INTERVAL_MS);
      await (await lock)?.release();
      log("info", "keeper stopped", { keeper: address, inFlight: receipts.size() });
    },
  };
}
