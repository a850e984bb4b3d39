import { createAdvisoryLock, type AdvisoryLock } from "../db/advisory-lock";
import type { Sql } from "../db/client";

/** Single-writer guard per chain: a session-level advisory lock held on a reserved connection. */
export type LeaderLock = AdvisoryLock;

/** Advisory lock key of a chain: a fixed namespace plus the chain id. */
export function lockKey(chainId: number): string {
  return BigInt.asIntN(64, 0x5ab5_1d3c_0000_0000n + BigInt(chainId)).toString();
}

/**
 * Creates the lock. When `enabled` is false (PGlite: one process, one session) it is always held:
 * reserving PGlite's only connection would starve every other query.
 */
export function createLeaderLock(sql: Sql, chainId: number, enabled: boolean): LeaderLock {
  return createAdvisoryLock(sql, lockKey(chainId), enabled ? "session" : "none");
}
