/**
 * Deterministic event ids. Most are `evt_` + 40 hex digits of a SHA-256 over the fact's canonical parts; an activity
 * event's id spells its chain position (`evt_` + chain id, block number, log index in fixed-width hex, then 34 hex
 * digits of the block hash: 64 characters), so a lookup by id is a primary-key lookup of its activity row.
 */
import { createHash } from "node:crypto";

/** The id of the fact named by `parts` (chain, block hash, position, kind, …): same parts, same id. */
export function eventIdOf(...parts: (string | number | bigint)[]): string {
  return `evt_${createHash("sha256").update(parts.join("|")).digest("hex").slice(0, 40)}`;
}

/** What an event id looks like (`evt_` + up to 60 lowercase hex or base58 characters). */
export const EVENT_ID_PATTERN = /^evt_[0-9a-z]{1,60}$/;

const hex = (n: number | bigint, width: number) => n.toString(16).padStart(width, "0");

/**
 * The ids of the activity events of logs at (`blockNumber`, `logIndex`), `hashOf` giving each block's hash; the chain
 * and block part is built once per run of rows in one block (a backfill batch has thousands of rows).
 */
export function activityEventIds(
  chainId: number,
  rows: readonly { blockNumber: bigint; logIndex: number }[],
  hashOf: (blockNumber: bigint) => string,
): string[] {
  const chain = hex(chainId, 10);
  let block: bigint | undefined;
  let [head, tail] = ["", ""];
  return rows.map((r) => {
    if (r.blockNumber !== block) {
      block = r.blockNumber;
      [head, tail] = [`evt_${chain}${hex(block, 10)}`, hashOf(block).slice(2, 36)];
    }
    return `${head}${hex(r.logIndex, 6)}${tail}`;
  });
}

const ACTIVITY_ID = /^evt_([0-9a-f]{10})([0-9a-f]{10})([0-9a-f]{6})[0-9a-f]{34}$/;

/** The chain position an activity event id names, or undefined for any other id. */
export function activityEventKey(id: string): { chainId: number; blockNumber: bigint; logIndex: number } | undefined {
  const m = ACTIVITY_ID.exec(id);
  return m
    ? { chainId: parseInt(m[1]!, 16), blockNumber: BigInt(`0x${m[2]}`), logIndex: parseInt(m[3]!, 16) }
    : undefined;
}
