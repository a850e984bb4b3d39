import { eachBounded } from "../common/async";
import type { Charger, DueCharge, PassContext } from "./charge";
import type { KeeperLock } from "./lock";
import type { NonceManager } from "./nonce";
import { indexedBlock } from "./queries";
import type { Receipts } from "./receipts";
import { takeOverClaims } from "./takeover";
import { emptyResult, type KeeperContext, type TickResult } from "./types";

/** Reads what is due now from the index (the keeper's own claims included, others' live claims left out). */
export type FindDue<D extends DueCharge> = (q: { now: bigint; owner: string; limit: number }) => Promise<D[]>;

/** What one pass uses besides the context. */
export type PassDeps<D extends DueCharge> = {
  lock: () => Promise<KeeperLock>;
  nonces: NonceManager;
  receipts: Receipts;
  findDue: FindDue<D>;
  charger: Charger<D>;
  limits: { batchLimit: number; maxInFlight: number; concurrency: number };
};

/** Creates one keeper's pass: lock, receipts, due items, charges. */
export function createPass<D extends DueCharge>(ctx: KeeperContext, deps: PassDeps<D>): () => Promise<TickResult> {
  const { sql, client, chainId, address, owner, log } = ctx;
  const { nonces, receipts, charger, limits } = deps;
  let standbyLogged = false;

  /** Sorts the claims a dead holder of the key left (takeover.ts); on an error they expire with their TTL. */
  async function takeOver() {
    try {
      const { unsent, released, adopted, kept } = await takeOverClaims(ctx, receipts);
      if (unsent || released.length || adopted.length || kept.length) {
        log("info", "keeper took over the claims of the key's previous holder", { unsent, released, adopted, kept });
      }
    } catch (err) {
      log("warn", "keeper could not check the claims of the key's previous holder: they expire", { err });
    }
  }

  /** Whether this instance may send now; a change of holder resets the nonce and sorts the dead holder's claims. */
  async function holdLock(): Promise<boolean> {
    const state = await (await deps.lock()).hold();
    if (state.lost) log("warn", "keeper lost its key's lock: standing by", { keeper: address });
    if (state.acquired) {
      nonces.reset();
      await takeOver();
      log("info", "keeper holds its key's lock: sending charges", { keeper: address, chainId });
    } else if (!state.held && !standbyLogged) {
      log("info", "keeper is a standby: another process sends with this key", { keeper: address, chainId });
    }
    standbyLogged = !state.held;
    return state.held;
  }

  /** The due subscriptions this pass tries; the others are reported as skipped (in flight, over capacity). */
  function select(due: D[], result: TickResult): D[] {
    let room = Math.max(0, limits.maxInFlight - receipts.pending());
    return due.filter((d) => {
      const reason = receipts.has(d.subscription_id) ? "in_flight" : room-- > 0 ? null : "capacity";
      if (reason) result.skipped.push({ module: d.module, subscriptionId: d.subscription_id, reason });
      return !reason;
    });
  }

  return async () => {
    if (!(await holdLock())) return emptyResult("0", true);
    const head = await client.getBlock({ blockTag: "latest" });
    const wall = BigInt(Math.floor(Date.now() / 1000));
    const now = head.timestamp > wall ? head.timestamp : wall;
    const result = emptyResult(now.toString());
    const indexed = await indexedBlock(sql, chainId);
    await receipts.collect(indexed, result);
    const due = await deps.findDue({ now, owner, limit: limits.batchLimit });
    result.due = due.length;
    const pass: PassContext = { now, indexed, head: head.number, baseFee: head.baseFeePerGas ?? null };
    const chosen = select(due, result);
    if (chosen.length > 0) await nonces.check(receipts.pending());
    // One wallet's charges in one token go one after another, in the due order (their nonces follow it, and so
    // does the order they are mined in); different wallets side by side.
    const groups = new Map<string, D[]>();
    for (const d of chosen) {
      const k = `${d.subscriber}:${d.token}`;
      (groups.get(k) ?? groups.set(k, []).get(k)!).push(d);
    }
    await eachBounded([...groups.values()], limits.concurrency, async (group) => {
      for (const d of group) await charger.tryCharge(d, pass, result);
    });
    const { sent, replaced, errors } = result;
    if (sent.length || replaced.length || errors) {
      log("debug", "keeper pass", {
        now: result.now,
        due: due.length,
        sent: sent.length,
        replaced: replaced.length,
        errors,
      });
    }
    return result;
  };
}
