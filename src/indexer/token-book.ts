import type { PublicClient } from "viem";
import type { RetryPolicy } from "../chain/rpc";
import { describeError } from "../common/errors";
import type { Logger } from "../common/log";
import type { Q } from "../db/query";
import { readTokenMeta, type TokenMeta } from "./tokens";

/** Options of {@link createTokenBook}. */
export type TokenBookOptions = {
  client: PublicClient;
  chainId: number;
  policy?: RetryPolicy;
  /** Deadline of one read of `symbol()` + `decimals()`. */
  timeoutMs: number;
  /** First pause before reading a token again after a timeout or transport error; it doubles per failure. */
  retryMs: number;
  /** Longest pause between two reads of the same token. */
  maxRetryMs: number;
  log: Logger;
};

/** Token metadata: which tokens are recorded, and which wait for their `symbol()`/`decimals()` to be read again. */
export type TokenBook = {
  /** Tokens recorded in `tokens` (what the cache says). */
  known: Set<string>;
  /** After the caches were reloaded: the recorded tokens, and those with null metadata to read again. */
  reset(known: Set<string>, incomplete: string[]): void;
  /** Reads `addresses`; a token that does not answer in time is returned with nulls and read again later. */
  read(addresses: Iterable<string>): Promise<TokenMeta[]>;
  /** Reads the tokens whose pause is over; returns those that now have an answer (to write). */
  due(now?: number): Promise<TokenMeta[]>;
  /** How many tokens wait for a new read. */
  pending(): number;
};

/**
 * Creates the book. "Reverted / no data" is final (null metadata stays); "timed out / transport error" is read
 * again with backoff, so a hanging token never holds the chain back and its metadata arrives once it answers.
 */
export function createTokenBook(opts: TokenBookOptions): TokenBook {
  const { client, chainId, policy, timeoutMs, log } = opts;
  const waiting = new Map<string, { failures: number; dueAt: number }>();
  // Tokens whose nulls are final in this process: not read again after each cache reload.
  const settled = new Set<string>();

  const postpone = (address: string, err: unknown) => {
    const failures = (waiting.get(address)?.failures ?? 0) + 1;
    const pause = Math.min(opts.maxRetryMs, opts.retryMs * 2 ** Math.min(failures - 1, 20));
    waiting.set(address, { failures, dueAt: Date.now() + pause });
    log(failures > 3 ? "warn" : "info", "token metadata unavailable, reading it again later", {
      chainId,
      token: address,
      retryInMs: pause,
      error: describeError(err),
    });
  };

  const readOne = async (address: string): Promise<TokenMeta | null> => {
    try {
      const meta = await readTokenMeta(client, address, policy, timeoutMs);
      waiting.delete(address);
      settled.add(address);
      return meta;
    } catch (err) {
      postpone(address, err);
      return null;
    }
  };

  const book: TokenBook = {
    known: new Set(),
    reset(known, incomplete) {
      book.known = known;
      for (const a of incomplete) if (!settled.has(a) && !waiting.has(a)) waiting.set(a, { failures: 0, dueAt: 0 });
    },
    async read(addresses) {
      const list = [...new Set(addresses)];
      const metas = await Promise.all(list.map(readOne));
      return metas.map((m, i) => m ?? { address: list[i]!, symbol: null, decimals: null });
    },
    async due(now = Date.now()) {
      const ready = [...waiting].filter(([, w]) => w.dueAt <= now).map(([a]) => a);
      const metas = await Promise.all(ready.map(readOne));
      return metas.filter((m): m is TokenMeta => m !== null);
    },
    pending: () => waiting.size,
  };
  return book;
}

/** Tokens recorded with null metadata (read again once after a start). */
export async function loadIncompleteTokens(q: Q, chainId: number): Promise<string[]> {
  const rows = await q<{ address: string }[]>`
    select address from tokens where chain_id = ${chainId} and (symbol is null or decimals is null)`;
  return rows.map((r) => r.address);
}

/** Records metadata read after the token's row was written (a row rolled back since is left alone). */
export async function updateTokens(q: Q, chainId: number, rows: TokenMeta[]): Promise<number> {
  if (rows.length === 0) return 0;
  const res = await q`update tokens t set symbol = u.s, decimals = u.d::integer
    from unnest(${rows.map((r) => r.address)}::text[], ${rows.map((r) => r.symbol)}::text[],
      ${rows.map((r) => (r.decimals === null ? null : String(r.decimals)))}::text[]) as u(a, s, d)
    where t.chain_id = ${chainId} and t.address = u.a`;
  return res.count;
}
