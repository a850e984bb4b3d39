import { BaseError, hexToString, type PublicClient } from "viem";
import { withRetry, type RetryPolicy } from "../chain/rpc";

/** What the indexer records about a token; null where the token does not answer. */
export type TokenMeta = { address: string; symbol: string | null; decimals: number | null };

const SYMBOL = "0x95d89b41"; // symbol()
const DECIMALS = "0x313ce567"; // decimals()

/** A call that the token itself refused (revert, no such function, no code): the answer is "none". */
function isRefusal(err: unknown): boolean {
  const text = err instanceof BaseError ? `${err.shortMessage} ${err.details ?? ""} ${err.message}` : String(err);
  return /revert|invalid opcode|returned no data|out of gas/i.test(text);
}

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
    if (isRefusal(err) || isRefusal((err as { cause?: unknown }).cause)) return null;
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
 * Reads `symbol()` and `decimals()` once, at the latest block (pruned nodes cannot answer at old blocks).
 * A token that reverts or lacks them gets nulls; an unreachable RPC throws so the batch is retried.
 */
export async function readTokenMeta(client: PublicClient, address: string, policy?: RetryPolicy): Promise<TokenMeta> {
  const [symbol, decimals] = await Promise.all([
    call(client, address, SYMBOL, policy),
    call(client, address, DECIMALS, policy),
  ]);
  return { address, symbol: decodeSymbol(symbol), decimals: decodeDecimals(decimals) };
}
