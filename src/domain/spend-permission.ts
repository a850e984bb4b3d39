/**
 * Base's Spend Permissions, the rules of the chain: the permission struct, its EIP-712 typed data, and the period
 * arithmetic of `SpendPermissionManager` (periods anchored at `start`, `end` exclusive, the last period cut at `end`).
 */

/** A spend permission as the manager's struct holds it (amounts and instants as bigints, addresses as hex). */
export type SpendPermission = {
  account: `0x${string}`;
  spender: `0x${string}`;
  token: `0x${string}`;
  allowance: bigint;
  period: number;
  start: number;
  end: number;
  salt: bigint;
  extraData: `0x${string}`;
};

/** A period `[start, end)` with what was spent in it. */
export type PeriodSpend = { start: number; end: number; spend: bigint };

/** The manager's address on every chain it is deployed to (CREATE2, salt 0). */
export const SPEND_PERMISSION_MANAGER_ADDRESS = "0xf85210B21cC50302F477BA56686d2019dC9b67Ad" as const;

/** ERC-7528's address for the chain's native currency. */
export const NATIVE_TOKEN = "0xEeeeeEeeeEeEeeEeEeEeeEEEeeeeEeeeeeeeEEeE" as const;

/** `end` of a permission that never ends (2^48 − 1, the SDK's "forever"). */
export const FOREVER_END = 281474976710655;

/** ERC-4337 EntryPoint v0.6, the one Coinbase Smart Wallet trusts. */
export const ENTRYPOINT_V06 = "0x5FF137D4b0FDCD49DcA30c7CF57E578a026d2789" as const;

/** ERC-4337 EntryPoint v0.7. */
export const ENTRYPOINT_V07 = "0x0000000071727De22E5E9d8BAf0edAc6f37da032" as const;

/** The EIP-712 domain of the manager at `verifyingContract` on `chainId`. */
export function spendPermissionDomain(chainId: number, verifyingContract: `0x${string}`) {
  return { name: "Spend Permission Manager", version: "1", chainId, verifyingContract } as const;
}

/** The EIP-712 types of `SpendPermission` (hash it with viem's `hashTypedData`). */
export const SPEND_PERMISSION_TYPES = {
  SpendPermission: [
    { name: "account", type: "address" },
    { name: "spender", type: "address" },
    { name: "token", type: "address" },
    { name: "allowance", type: "uint160" },
    { name: "period", type: "uint48" },
    { name: "start", type: "uint48" },
    { name: "end", type: "uint48" },
    { name: "salt", type: "uint256" },
    { name: "extraData", type: "bytes" },
  ],
} as const;

/** The period `[start, end)` containing instant `t` (seconds), or null before `start` and from `end` on. */
export function periodAt(p: Pick<SpendPermission, "period" | "start" | "end">, t: number): PeriodSpend | null {
  if (t < p.start || t >= p.end) return null;
  const start = t - ((t - p.start) % p.period);
  return { start, end: Math.min(start + p.period, p.end), spend: 0n };
}

/**
 * The current period as `getCurrentPeriod` answers it at `t`: the last updated period with its spend while `t`
 * lies in it, else a fresh one with nothing spent; null where the contract reverts (before `start`, from `end` on).
 */
export function currentPeriod(
  p: Pick<SpendPermission, "period" | "start" | "end">,
  lastUpdated: PeriodSpend | null,
  t: number,
): PeriodSpend | null {
  const fresh = periodAt(p, t);
  if (!fresh) return null;
  if (lastUpdated && lastUpdated.start <= t && t < lastUpdated.end) return lastUpdated;
  return fresh;
}
