/**
 * Deciding whether the chain reorganised under the index, and where the common ancestor is. Only a header at a
 * stored height returned with a *different* hash is evidence of a reorg; a head below the cursor or a missing
 * header is a lagging backend ("wait"), never a reason to roll back.
 */
import type { PublicClient } from "viem";
import type { Sql } from "../db/client";
import { getHeader, getHeaders, type Header, type RetryPolicy } from "../chain/rpc";
import { loadBlocks, type Cursor } from "./store";

/** What one look at the chain says about the index. */
export type ChainCheck =
  /** The cursor block is on the chain (or deep enough below the head not to need a look). */
  | { kind: "ok" }
  /** The node is behind the index or did not return a block: wait and look again. */
  | { kind: "wait"; reason: string }
  /** The chain replaced blocks above `ancestor`, the newest stored block it still has. */
  | { kind: "reorg"; ancestor: Cursor }
  /** Every stored block ≤ head has another hash on the chain; `fingerprint` names the chain's hashes seen. */
  | { kind: "deep"; fingerprint: string };

type Stored = { number: bigint; hash: string; time: number };

/** Looks at the chain around the cursor. `window` is how far below the head a reorg is checked for. */
export async function checkChain(opts: {
  sql: Sql;
  client: PublicClient;
  chainId: number;
  cursor: Cursor | null;
  head: bigint;
  /** The header at `head`, when the poll read it. */
  latest?: Header;
  window: bigint;
  policy?: RetryPolicy;
}): Promise<ChainCheck> {
  const { client, cursor, head, policy } = opts;
  if (!cursor || (head >= cursor.block && cursor.block + opts.window <= head)) return { kind: "ok" };
  // The head is the cursor block or its child: the cursor is on the node's chain, no header to ask.
  const latest = opts.latest;
  if (latest?.number === cursor.block && latest.hash === cursor.hash) return { kind: "ok" };
  if (latest?.number === cursor.block + 1n && latest.parentHash === cursor.hash) return { kind: "ok" };
  if (head >= cursor.block) {
    const h = await getHeader(client, cursor.block, policy);
    if (!h) return { kind: "wait", reason: `the node did not return block ${cursor.block}` };
    if (h.hash === cursor.hash) return { kind: "ok" };
  }
  const stored = await loadBlocks(opts.sql, opts.chainId);
  if (!stored.some((b) => b.number === cursor.block)) stored.unshift({ ...cursor, number: cursor.block });
  const candidates = stored.filter((b) => b.number <= head);
  if (candidates.length === 0) {
    return { kind: "wait", reason: `the node's head ${head} is below every stored block (indexed ${cursor.block})` };
  }
  return findAncestor(client, candidates, head < cursor.block ? cursor.block : null, policy);
}

/**
 * Compares stored blocks (newest first) with the chain. The newest one matching is the ancestor; a missing header
 * before that means "unknown, wait". When the newest candidate matches and the node's head is below the cursor
 * (`behindOf`), the node is only behind.
 */
async function findAncestor(
  client: PublicClient,
  candidates: Stored[],
  behindOf: bigint | null,
  policy?: RetryPolicy,
): Promise<ChainCheck> {
  const seen: string[] = [];
  // A few at a time: shallow reorgs (the common case) need one round trip.
  for (let i = 0; i < candidates.length; i += 8) {
    const chunk = candidates.slice(i, i + 8);
    const headers = await getHeaders(
      client,
      chunk.map((b) => b.number),
      policy,
    );
    for (const b of chunk) {
      const h = headers.get(b.number);
      if (!h) return { kind: "wait", reason: `the node did not return block ${b.number}` };
      if (h.hash === b.hash) {
        if (behindOf !== null && seen.length === 0) {
          return { kind: "wait", reason: `the node's head is behind the index (at ${b.number}, indexed ${behindOf})` };
        }
        return { kind: "reorg", ancestor: { block: b.number, hash: b.hash, time: h.timestamp } };
      }
      seen.push(`${b.number}:${h.hash}`);
    }
  }
  return { kind: "deep", fingerprint: seen.join(",") };
}

/**
 * Confirms a deep reorg over consecutive polls: acted on only when `polls` looks in a row saw the same conflicting
 * hashes. Anything else in between starts the count again.
 */
export function createDeepReorgGuard(polls: number) {
  let last: string | null = null;
  let count = 0;
  return {
    polls,
    /** Records a deep-reorg look; returns how many consecutive looks agree (act when ≥ `polls`). */
    observe(fingerprint: string): number {
      count = fingerprint === last ? count + 1 : 1;
      last = fingerprint;
      return count;
    },
    confirmed: () => count >= polls,
    clear() {
      last = null;
      count = 0;
    },
  };
}

/** A {@link createDeepReorgGuard}. */
export type DeepReorgGuard = ReturnType<typeof createDeepReorgGuard>;
