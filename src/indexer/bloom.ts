import { keccak256, type Hex } from "viem";

// Bit positions of an address in a 2048-bit logs bloom: computed once per address.
const positions = new Map<string, number[]>();

function bitsOf(value: string): number[] {
  let bits = positions.get(value);
  if (!bits) {
    const hash = keccak256(value as Hex).slice(2);
    bits = [0, 4, 8].map((i) => Number.parseInt(hash.slice(i, i + 4), 16) & 0x7ff);
    if (positions.size >= 100_000) positions.clear();
    positions.set(value, bits);
  }
  return bits;
}

/** Whether a block's `logsBloom` may hold a log of `address` (false: it certainly holds none). */
export function bloomMayContain(bloom: string, address: string): boolean {
  if (bloom.length !== 514) return true; // no usable bloom: assume it may
  return bitsOf(address.toLowerCase()).every((bit) => {
    // Bit i (from the low end) of the 256-byte big-endian bloom.
    const byte = Number.parseInt(bloom.slice(2 + (255 - (bit >> 3)) * 2, 4 + (255 - (bit >> 3)) * 2), 16);
    return (byte & (1 << (bit & 7))) !== 0;
  });
}
