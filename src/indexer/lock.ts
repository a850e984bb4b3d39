import type { Sql } from "../db/client";

/** Single-writer guard per chain: a session-level advisory lock held on a reserved connection. */
export type LeaderLock = {
  /** Tries to take the lock once; true when this process holds it. */
  acquire: () => Promise<boolean>;
  /** Whether the session holding the lock is still alive. */
  check: () => Promise<boolean>;
  /** Gives the lock and its connection back. */
  release: () => Promise<void>;
};

type Reserved = Awaited<ReturnType<Sql["reserve"]>>;

/** Advisory lock key of a chain: a fixed namespace plus the chain id. */
export function lockKey(chainId: number): string {
  return BigInt.asIntN(64, 0x5ab5_1d3c_0000_0000n + BigInt(chainId)).toString();
}

/**
 * Creates the lock. When `enabled` is false (PGlite: one process, one session) it is always held:
 * reserving PGlite's only connection would starve every other query.
 */
export function createLeaderLock(sql: Sql, chainId: number, enabled: boolean): LeaderLock {
  const key = lockKey(chainId);
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
  return {
    acquire: async () => {
      if (!enabled) return true;
      if (held) return true;
      try {
        conn ??= await sql.reserve();
        const [row] = await conn<{ ok: boolean }[]>`select pg_try_advisory_lock(${key}::bigint) as ok`;
        held = !!row?.ok;
      } catch {
        drop();
      }
      return held;
    },
    check: async () => {
      if (!enabled) return true;
      if (!conn || !held) return false;
      try {
        await conn`select 1`;
        return true;
      } catch {
        drop();
        return false;
      }
    },
    release: async () => {
      if (!enabled || !conn) return;
      try {
        if (held) await conn`select pg_advisory_unlock(${key}::bigint)`;
      } catch {
        // the session is gone, and the lock with it
      }
      drop();
    },
  };
}
