import { keccak256, toBytes, type Address } from "viem";
import { createAdvisoryLock } from "../db/advisory-lock";
import type { Sql } from "../db/client";

/** One sender per keeper key: the lock a keeper holds while it sends charges. */
export type KeeperLock = {
  /** True when this instance holds the lock now: checks a held one is still alive, else tries to take it. */
  hold: () => Promise<{ held: boolean; acquired: boolean; lost: boolean }>;
  /** Gives the lock (and its connection) back. */
  release: () => Promise<void>;
};

/** Advisory lock key of (chain, keeper address): 64 bits of a hash, apart from the indexer's namespace. */
export function keeperLockKey(chainId: number, address: Address): string {
  const digest = keccak256(toBytes(`subscription-keeper:${chainId}:${address.toLowerCase()}`));
  return BigInt.asIntN(64, BigInt(digest.slice(0, 18))).toString();
}

/**
 * Creates the lock of one keeper instance: a session-level Postgres advisory lock on a reserved connection when
 * `shared` (a server other processes can reach), else a lock among the instances of this process.
 */
export function createKeeperLock(sql: Sql, chainId: number, address: Address, shared: boolean): KeeperLock {
  const lock = createAdvisoryLock(sql, keeperLockKey(chainId, address), shared ? "session" : "local");
  let held = false;
  return {
    async hold() {
      let lost = false;
      if (held) {
        if (await lock.check()) return { held: true, acquired: false, lost: false };
        held = false;
        lost = true;
      }
      held = await lock.acquire();
      return { held, acquired: held, lost };
    },
    async release() {
      held = false;
      await lock.release();
    },
  };
}
