/**
 * The loop every keeper runs, whatever it charges: one key's lock, nonces, claims and receipts, a pass every
 * POLL_INTERVAL_MS, and a drained stop. The module keeper (`index.ts`) and the Spend Permission keeper
 * (`spend-permissions.ts`) each bring their target contract, their due query and their charge step.
 */
import { chainDefinition } from "../chain/define";
import { createPollLoop } from "../common/async";
import { AppError } from "../common/errors";
import { silentLogger } from "../common/log";
import type { Charger, DueCharge } from "./charge";
import { KeeperConfigError } from "./errors";
import { createKeeperLock, type KeeperLock } from "./lock";
import { createNonceManager, type NonceManager } from "./nonce";
import { createPass, type FindDue } from "./pass";
import { indexedBlock, releaseAllClaims } from "./queries";
import { createReceipts, type Receipts } from "./receipts";
import {
  emptyResult,
  type ChargeTarget,
  type Keeper,
  type KeeperBaseConfig,
  type KeeperContext,
  type KeeperOptions,
  type TickResult,
} from "./types";

/** Every pass failed all its attempts: the RPC or the database is in trouble, so the loop backs off. */
class KeeperPassError extends AppError {}

/** The shared context of one keeper, checked: the wallet must be on the configured chain and sign locally. */
export function keeperContext(opts: KeeperOptions<KeeperBaseConfig>, target: ChargeTarget): KeeperContext {
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
    target,
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
async function sharedDatabase(opts: KeeperOptions<KeeperBaseConfig>): Promise<boolean> {
  const poolSize = (opts.sql as unknown as { options?: { max?: number } }).options?.max ?? 10;
  if (poolSize < 2) return false;
  if (opts.dbKind) return opts.dbKind === "postgres";
  const [row] = await opts.sql<{ v: string }[]>`select version() as v`;
  return !row!.v.includes("PGlite");
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

/** What a kind of keeper brings to {@link runKeeper}. */
export type KeeperParts<D extends DueCharge> = {
  findDue: FindDue<D>;
  charger: (nonces: NonceManager, receipts: Receipts) => Charger<D>;
  /** Checks at start, after the instance's stale claims are dropped (they warn, never stop the keeper). */
  startChecks?: () => Promise<void>;
  /** Fields of the "keeper started" log line. */
  describe: Record<string, unknown>;
};

/**
 * Runs a keeper: each pass, while it holds its key's lock, reads what is due from the index and charges each item
 * whose simulation passes; receipts are collected (and slow transactions replaced) on later passes.
 */
export function runKeeper<D extends DueCharge>(
  ctx: KeeperContext,
  opts: KeeperOptions<KeeperBaseConfig>,
  parts: KeeperParts<D>,
): Keeper {
  const { sql, chainId, address, owner, log } = ctx;
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
    lock: getLock,
    nonces,
    receipts,
    findDue: parts.findDue,
    charger: parts.charger(nonces, receipts),
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
      try {
        await releaseAllClaims(sql, { chainId, owner });
        await parts.startChecks?.();
      } catch (err) {
        log("warn", "keeper start checks failed", { err });
      }
      const { retrySchedule, txDeadlineMs, maxFeePerGas } = config;
      log("info", "keeper started", {
        keeper: address,
        chainId,
        pollMs: config.POLL_INTERVAL_MS,
        retrySchedule,
        txDeadlineMs,
        maxFeePerGas,
        ...parts.describe,
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
