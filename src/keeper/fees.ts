import type { PublicClient } from "viem";
import type { Fees } from "./types";

/** The network's current fee suggestion: EIP-1559 fields, or a gas price on chains without EIP-1559. */
export async function currentFees(client: PublicClient): Promise<Fees> {
  try {
    const f = await client.estimateFeesPerGas();
    return { maxFeePerGas: f.maxFeePerGas, maxPriorityFeePerGas: f.maxPriorityFeePerGas };
  } catch (err) {
    if ((err as Error).name !== "Eip1559FeesNotSupportedError") throw err;
    return { gasPrice: await client.getGasPrice() };
  }
}

/**
 * `fees` limited to `cap` wei per gas, or null when the network needs more than the cap: the base fee of the
 * latest block (EIP-1559) or the suggested gas price (legacy) is above it.
 */
export function capFees(fees: Fees, cap: bigint | undefined, baseFee: bigint | null | undefined): Fees | null {
  if (cap === undefined) return fees;
  if ("gasPrice" in fees) return fees.gasPrice > cap ? null : fees;
  if (baseFee !== null && baseFee !== undefined && baseFee > cap) return null;
  const maxFeePerGas = fees.maxFeePerGas < cap ? fees.maxFeePerGas : cap;
  const tip = fees.maxPriorityFeePerGas < maxFeePerGas ? fees.maxPriorityFeePerGas : maxFeePerGas;
  return { maxFeePerGas, maxPriorityFeePerGas: tip };
}

/** `x` raised by 12.5 % (rounded up, at least 1 wei): the smallest bump nodes accept for a replacement. */
export function bump(x: bigint): bigint {
  const up = (x * 1125n + 999n) / 1000n;
  return up > x ? up : x + 1n;
}

const max = (a: bigint, b: bigint) => (a > b ? a : b);

/**
 * Fees for replacing a transaction sent with `sent`: each field at least 12.5 % above the old one and at least
 * the network's current suggestion, within `cap`. Null when the cap leaves no room for a valid replacement.
 */
export function replacementFees(sent: Fees, current: Fees, cap: bigint | undefined): Fees | null {
  if ("gasPrice" in sent) {
    const now = "gasPrice" in current ? current.gasPrice : current.maxFeePerGas;
    const gasPrice = max(bump(sent.gasPrice), now);
    return cap !== undefined && gasPrice > cap ? (bump(sent.gasPrice) <= cap ? { gasPrice: cap } : null) : { gasPrice };
  }
  const nowFee = "gasPrice" in current ? current.gasPrice : current.maxFeePerGas;
  const nowTip = "gasPrice" in current ? current.gasPrice : current.maxPriorityFeePerGas;
  const minFee = bump(sent.maxFeePerGas);
  const minTip = bump(sent.maxPriorityFeePerGas);
  let maxFeePerGas = max(minFee, nowFee);
  if (cap !== undefined && maxFeePerGas > cap) maxFeePerGas = cap;
  if (maxFeePerGas < minFee) return null;
  const tip = max(minTip, nowTip);
  const maxPriorityFeePerGas = tip < maxFeePerGas ? tip : maxFeePerGas;
  if (maxPriorityFeePerGas < minTip) return null;
  return { maxFeePerGas, maxPriorityFeePerGas };
}
