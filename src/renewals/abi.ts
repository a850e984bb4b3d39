/**
 * Hand-rolled ABI coding of the few calls the renewal reader makes, for speed: viem's general coder spends seconds on
 * 100,000 subscriptions' calls (encoding each call, the `aggregate3` arrays, and decoding their results), the reads
 * themselves less. Each function is checked against viem's coder in test/renewals/abi.test.ts.
 */
import type { Hex } from "viem";

const word = (hex: string) => hex.padStart(64, "0");
const addr = (a: string) => word(a.slice(2).toLowerCase());
const uint = (n: bigint | number) => word(n.toString(16));

/** `balanceOf(address)`. */
export const balanceOfData = (owner: string): Hex => `0x70a08231${addr(owner)}`;

/** `allowance(address,address)`. */
export const allowanceData = (owner: string, spender: string): Hex => `0xdd62ed3e${addr(owner)}${addr(spender)}`;

/** `creditOf(address,uint256)` of the processor. */
export const creditOfData = (module: string, id: bigint): Hex => `0x8b804354${addr(module)}${uint(id)}`;

/** Multicall3's `getEthBalance(address)`: the native balance. */
export const getEthBalanceData = (owner: string): Hex => `0x4d2301cc${addr(owner)}`;

/** A smart account's `isOwnerAddress(address)` (Coinbase Smart Wallet's `MultiOwnable`). */
export const isOwnerAddressData = (owner: string): Hex => `0xa2e1a8d8${addr(owner)}`;

/** `aggregate3((address,bool,bytes)[])` with every call allowed to fail. */
export function aggregate3Data(calls: readonly { to: string; data: Hex }[]): Hex {
  const heads: string[] = [];
  const tails: string[] = [];
  let offset = calls.length * 32;
  // A chunk has a few targets and calldata lengths: their words are coded once.
  const targets = new Map<string, string>();
  const prefixes = new Map<number, string>();
  for (const c of calls) {
    heads.push(uint(offset));
    const body = c.data.slice(2);
    const padded = body.length % 64 === 0 ? body : body.padEnd(Math.ceil(body.length / 64) * 64, "0");
    let to = targets.get(c.to);
    if (to === undefined) targets.set(c.to, (to = addr(c.to)));
    let prefix = prefixes.get(body.length);
    // (bool true, offset of bytes = 0x60, length)
    if (prefix === undefined) prefixes.set(body.length, (prefix = `${uint(1)}${uint(0x60)}${uint(body.length / 2)}`));
    // (address, bool, offset, length, data)
    const tuple = `${to}${prefix}${padded}`;
    tails.push(tuple);
    offset += tuple.length / 2;
  }
  return `0x82ad56cb${uint(0x20)}${uint(calls.length)}${heads.join("")}${tails.join("")}`;
}

/**
 * The results of `aggregate3` (`(bool success, bytes returnData)[]`) reduced to what the reader needs: each call's
 * first 32-byte word as a number, or undefined when it failed or returned less than a word.
 */
export function aggregate3Words(data: Hex): (bigint | undefined)[] {
  const hex = data.slice(2);
  // Offsets, lengths and the success flag are small numbers: the word's last 12 hex digits hold them.
  const at = (byte: number) => Number.parseInt(hex.slice(byte * 2 + 52, byte * 2 + 64), 16);
  const base = at(0); // offset of the array
  const n = at(base);
  const content = base + 32;
  const out: (bigint | undefined)[] = new Array(n);
  for (let i = 0; i < n; i++) {
    const tuple = content + at(content + i * 32);
    const success = at(tuple) !== 0;
    const bytes = tuple + at(tuple + 32);
    const length = at(bytes);
    out[i] = success && length >= 32 ? BigInt(`0x${hex.slice((bytes + 32) * 2, (bytes + 64) * 2)}`) : undefined;
  }
  return out;
}
