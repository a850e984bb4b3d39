import type postgres from "postgres";
import type { Sql } from "./client";

/** A lock one holder at a time may take: `acquire` tries once, `check` says whether it is still held. */
export type AdvisoryLock = {
  /** Tries to take the lock once (true when held, also when already held). */
  acquire: () => Promise<boolean>;
  /** Whether this holder still has it (its session is alive). */
  check: () => Promise<boolean>;
  /** Gives the lock, and its connection, back. */
  release: () => Promise<void>;
};

type Reserved = Awaited<ReturnType<Sql["reserve"]>>;

// Holders of "local" locks in this process, by key.
const localHolders = new Map<string, symbol>();

/**
 * A lock on a 64-bit `key` (decimal string). `session`: a session-level Postgres advisory lock held on a reserved
 * connection, so it ends when the process or its connection dies. `local`: among the holders inside this process,
 * for databases with one session (PGlite), where an advisory lock cannot tell two holders apart and no second
 * process can open the database. `none`: always held (a single holder by construction).
 */
export function createAdvisoryLock(sql: Sql, key: string, mode: "session" | "local" | "none"): AdvisoryLock {
  const me = Symbol(key);
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

  if (mode === "none") return { acquire: async () => true, check: async () => true, release: async () => {} };
  if (mode === "local") {
    return {
      acquire: async () => {
        if (!localHolders.has(key)) localHolders.set(key, me);
        return localHolders.get(key) === me;
      },
      check: async () => localHolders.get(key) === me,
      release: async () => {
        if (localHolders.get(key) === me) localHolders.delete(key);
      },
    };
  }
  return {
    acquire: async () => {
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
      if (!conn) return;
      try {
        if (held) await conn`select pg_advisory_unlock(${key}::bigint)`;
      } catch {
        // the session is gone, and the lock with it
      }
      drop();
    },
  };
}

/**
 * Takes the transaction-scoped advisory lock named `name` (hashed to 64 bits), waiting for its holder: what writes
 * that must count before they insert ("at most N per merchant") take, so two of them cannot both see room for one.
 * Released at commit or rollback.
 */
export async function lockForTransaction(tx: postgres.TransactionSql<{}>, name: string): Promise<void> {
  await tx`select pg_advisory_xact_lock(hashtextextended(${name}, 0))`;
}

/** As {@link lockForTransaction}, without waiting: whether the lock was free (and is now held). */
export async function tryLockForTransaction(tx: postgres.TransactionSql<{}>, name: string): Promise<boolean> {
  const [row] = await tx<{ ok: boolean }[]>`select pg_try_advisory_xact_lock(hashtextextended(${name}, 0)) as ok`;
  return row!.ok;
}
