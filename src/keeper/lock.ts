import { keccak256, toBytes, type Address } from "viem";
import type { Sql } from "../db/client";

/** One sender per keeper key: the lock a keeper holds while it sends charges. */
export type KeeperLock = {
  /** True when this instance holds the lock now: checks a held one is still alive, else tries to take it. */
  hold: () => Promise<{ held: boolean; acquired: boolean; lost: boolean }>;
  /** Gives the lock (and its connection) back. */
  release: () => Promise<void>;
};

type Reserved = Awaited<ReturnType<Sql["reserve"]>>;

// Holders of keys in this process, for databases with one session (PGlite), where an advisory lock cannot
// tell two instances apart; no second process can open such a database.
const localHolders = new Map<string, symbol>();

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
  const key = keeperLockKey(chainId, address);
  const me = Symbol("keeper");
  let conn: Reserved | null = null;
  let held = false;

  const drop = () => {
    try {
      conn?.release();
    } catch {
      // a broken connection is discarded by the pool
    }
    conn = null;
    held = false;
  };

  async function alive(): Promise<boolean> {
    if (!shared) return localHolders.get(key) === me;
    try {
      await conn!`select 1`;
      return true;
    } catch {
      drop();
      return false;
    }
  }

  async function take(): Promise<boolean> {
    if (!shared) {
      if (localHolders.has(key)) return false;
      localHolders.set(key, me);
      return true;
    }
    try {
      conn ??= await sql.reserve();
      const [row] = await conn<{ ok: boolean }[]>`select pg_try_advisory_lock(${key}::bigint) as ok`;
      return !!row?.ok;
    } catch {
      drop();
      return false;
    }
  }

  return {
    async hold() {
      let lost = false;
      if (held) {
        if (await alive()) return { held: true, acquired: false, lost: false };
        held = false;
        lost = true;
      }
      held = await take();
      return { held, acquired: held, lost };
    },
    async release() {
      if (!shared) {
        if (localHolders.get(key) === me) localHolders.delete(key);
        held = false;
        return;
      }
      try {
        if (held && conn) await conn`select pg_advisory_unlock(${key}::bigint)`;
      } catch {
        // the session is gone, and the lock with it
      }
      drop();
    },
  };
}
