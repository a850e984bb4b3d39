import { hexToString, type PublicClient } from "viem";
import { isRevert } from "../chain/errors";
import { withRetry, type RetryPolicy } from "../chain/rpc";
import { TokenMetaUnavailableError } from "./errors";

/** What the indexer records about a token; null where the token does not answer. */
export type TokenMeta = { address: string; symbol: string | null; decimals: number | null };

const SYMBOL = "0x95d89b41"; // symbol()
const DECIMALS = "0x313ce567"; // decimals()

/** `symbol()`/`decimals()` of one token: its answer, or null when the token refused (revert, no data). */
async function call(client: PublicClient, to: string, data: string, policy?: RetryPolicy): Promise<string | null> {
  try {
    const out = await withRetry(
      "eth_call",
      () =>
        client.request({
          method: "eth_call",
          params: [{ to: to as `0x${string}`, data: data as `0x${string}` }, "latest"],
        }),
      policy,
    );
    return out && out !== "0x" ? out : null;
  } catch (err) {
    if (isRevert(err)) return null;
    throw err;
  }
}

/** Decodes `symbol()` as an ABI string, or as a bytes32 for old tokens; null when it is neither. */
export function decodeSymbol(ret: string | null): string | null {
  if (!ret) return null;
  const body = ret.slice(2);
  try {
    if (body.length >= 128) {
      const offset = Number.parseInt(body.slice(0, 64), 16);
      const len = Number.parseInt(body.slice(offset * 2, offset * 2 + 64), 16);
      if (offset === 32 && len <= 256 && body.length >= 128 + Math.ceil(len / 32) * 64) {
        const bytes = body.slice(128, 128 + len * 2);
        return Buffer.from(bytes, "hex").toString("utf8").replace(/\0/g, "");
      }
    }
    if (body.length === 64) {
      const s = hexToString(`0x${body}`).replace(/\0+$/, "");
      return s.length > 0 && !s.includes("\0") ? s : null;
    }
  } catch {
    return null;
  }
  return null;
}

/** Decodes `decimals()`; null when absent or out of uint8 range. */
export function decodeDecimals(ret: string | null): number | null {
  if (!ret || ret.length !== 66) return null;
  const n = BigInt(ret);
  return n <= 255n ? Number(n) : null;
}

/**
 * Reads `symbol()` and `decimals()` at the latest block (pruned nodes cannot answer at old blocks) within
 * `timeoutMs`. A token that reverts or lacks them gets nulls (final); a call that times out or fails in transport
 * throws TokenMetaUnavailableError (read again later).
 */
export async function readTokenMeta(
  client: PublicClient,
  address: string,
  policy?: RetryPolicy,
  timeoutMs = 2_000,
): Promise<TokenMeta> {
  let timer: ReturnType<typeof setTimeout> | undefined;
  const deadline = new Promise<never>((_, reject) => {
    timer = setTimeout(
      () => reject(new TokenMetaUnavailableError(`symbol()/decimals() of ${address} took over ${timeoutMs} ms`)),
      timeoutMs,
    );
  });
  const reads = Promise.all([call(client, address, SYMBOL, policy), call(client, address, DECIMALS, policy)]);
  reads.catch(() => {});
  try {
    const [symbol, decimals] = await Promise.race([reads, deadline]);
    return { address, symbol: decodeSymbol(symbol), decimals: decodeDecimals(decimals) };
  } catch (err) {
    if (err instanceof TokenMetaUnavailableError) throw err;
    throw new TokenMetaUnavailableError(`symbol()/decimals() of ${address} failed`, { cause: err });
  } finally {
    clearTimeout(timer);
  }
}
