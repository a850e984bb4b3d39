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

/** Who revoked a permission, from the revoking transaction (its sender, or the user operation's sender). */
export type RevokedBy = "subscriber" | "merchant" | "unknown";

/** What the index keeps of one permission: the struct, its charges and its revocation. */
export type PermissionState = SpendPermission & {
  timesExecuted: number;
  totalSpent: bigint;
  /** `periodSpend.end` of the latest Used log (0 = never charged): the instant the payments cover up to. */
  paidThrough: number;
  /** The period of the latest Used log, with what was spent in it (the manager's last updated period). */
  lastPeriod: PeriodSpend | null;
  /** N: `start` on Approved, `periodSpend.end` after each Used — the next instant a charge is due. */
  nextChargeAt: number;
  revoked: boolean;
  revokedBy: RevokedBy | null;
  /** Unix seconds of the Revoked log's block. */
  revokedAt: number | null;
};

/** The status of a permission (first match): CANCELLED, EXPIRED (ended), PENDING, EXPIRED (lapsed), ACTIVE. */
export type PermissionStatus = "CANCELLED" | "EXPIRED" | "PENDING" | "ACTIVE";

/** The state an Approved log starts: nothing charged, the first charge due at `start`. */
export function permissionFromApproved(p: SpendPermission): PermissionState {
  return {
    ...p,
    timesExecuted: 0,
    totalSpent: 0n,
    paidThrough: 0,
    lastPeriod: null,
    nextChargeAt: p.start,
    revoked: false,
    revokedBy: null,
    revokedAt: null,
  };
}

/** Applies a Used log (the spend's increment and its period) as the manager does. */
export function applyUsed(s: PermissionState, used: PeriodSpend): void {
  s.timesExecuted += 1;
  s.totalSpent += used.spend;
  const same = s.lastPeriod && s.lastPeriod.start === used.start && s.lastPeriod.end === used.end;
  s.lastPeriod = { start: used.start, end: used.end, spend: (same ? s.lastPeriod!.spend : 0n) + used.spend };
  s.paidThrough = used.end;
  s.nextChargeAt = used.end;
}

/** Applies a Revoked log: dead for good. */
export function applyRevoked(s: PermissionState, by: RevokedBy, atS: number): void {
  s.revoked = true;
  s.revokedBy = by;
  s.revokedAt = atS;
}

/** The grace after a paid period, capped at the permission's period. */
export function effectiveGrace(s: Pick<SpendPermission, "period">, graceS: number): number {
  return Math.min(graceS, s.period);
}

/** The status at unix second `nowS` with grace `graceS` (`SPEND_PERMISSION_GRACE_S`). */
export function permissionStatus(s: PermissionState, nowS: number, graceS: number): PermissionStatus {
  if (s.revoked) return "CANCELLED";
  if (nowS >= s.end) return "EXPIRED";
  if (s.timesExecuted === 0) return "PENDING";
  if (nowS >= s.paidThrough + effectiveGrace(s, graceS)) return "EXPIRED";
  return "ACTIVE";
}

/**
 * The first second at which time alone turns the permission EXPIRED (no log marks it): `end` when never charged,
 * else `min(paid_through + grace, end)`; null once revoked.
 */
export function expiryInstant(s: PermissionState, graceS: number): number | null {
  if (s.revoked) return null;
  if (s.timesExecuted === 0) return s.end;
  return Math.min(s.paidThrough + effectiveGrace(s, graceS), s.end);
}

/** `next_charge_date` in unix seconds: N while ahead, the due period's start once due, null when nothing is due. */
export function nextChargeInstant(s: PermissionState, nowS: number): number | null {
  if (s.revoked || nowS >= s.end || s.nextChargeAt >= s.end) return null;
  if (s.nextChargeAt > nowS) return s.nextChargeAt;
  return periodAt(s, nowS)!.start;
}

/**
 * The time-dependent `spend_permission` fields of the record, as `getCurrentPeriod` would answer at `nowS` (revoked
 * or not); the period fields are null outside `[start, end)`.
 */
export function permissionPeriodView(s: PermissionState, nowS: number) {
  const current = currentPeriod(s, s.lastPeriod, nowS);
  return {
    isSubscribed: !s.revoked && s.start <= nowS && nowS < s.end,
    currentPeriodStart: current?.start ?? null,
    currentPeriodEnd: current?.end ?? null,
    spentInPeriod: current?.spend ?? null,
    remainingInPeriod: remainingInPeriod(s, s.lastPeriod, nowS),
  };
}

/** topic0 of ERC-4337's `UserOperationEvent` (v0.6 and v0.7). */
export const USER_OPERATION_EVENT_TOPIC = "0x49628fd1471006c1482da88028e9ce4dbb080b815c9b0344d39e5a8e6ec1419f";

/** A log of the revoking transaction's receipt, as much of it as `revokedBy` reads. */
export type ReceiptLog = { address: string; topics: readonly string[]; logIndex: number };

/**
 * Who revoked: the sender of the first user operation logged after the Revoked log by a trusted EntryPoint, else the
 * transaction's `from` or `to`; `subscriber` for the account, `merchant` for the spender, `unknown` otherwise (a Safe,
 * a relayer). When account and spender are one address, `subscriber`.
 */
export function revokedBy(opts: {
  revokedLogIndex: number;
  account: string;
  spender: string;
  logs: readonly ReceiptLog[];
  txFrom: string;
  txTo: string | null;
  entryPoints: readonly string[];
}): RevokedBy {
  const account = opts.account.toLowerCase();
  const spender = opts.spender.toLowerCase();
  const who = (address: string | null | undefined): RevokedBy | null => {
    const a = address?.toLowerCase();
    if (a === account) return "subscriber";
    if (a === spender) return "merchant";
    return null;
  };
  const entryPoints = new Set(opts.entryPoints.map((e) => e.toLowerCase()));
  const op = [...opts.logs]
    .sort((a, b) => a.logIndex - b.logIndex)
    .find(
      (l) =>
        l.logIndex > opts.revokedLogIndex &&
        entryPoints.has(l.address.toLowerCase()) &&
        l.topics[0]?.toLowerCase() === USER_OPERATION_EVENT_TOPIC,
    );
  if (op) {
    const sender = op.topics[2] ? `0x${op.topics[2].slice(-40)}` : null;
    return who(sender) ?? "unknown";
  }
  return who(opts.txFrom) ?? who(opts.txTo) ?? "unknown";
}

/** Seconds from `t` to the (exclusive) end of the period containing it, or null outside `[start, end)`. */
export function secondsToPeriodEnd(p: Pick<SpendPermission, "period" | "start" | "end">, t: number): number | null {
  const current = periodAt(p, t);
  return current ? current.end - t : null;
}

/**
 * What a `spend` at `t` may take at most: the allowance less what the current period already spent (the SDK's
 * `'max-remaining-charge'`); null outside `[start, end)`.
 */
export function remainingInPeriod(
  p: Pick<SpendPermission, "allowance" | "period" | "start" | "end">,
  lastUpdated: PeriodSpend | null,
  t: number,
): bigint | null {
  const current = currentPeriod(p, lastUpdated, t);
  return current ? p.allowance - current.spend : null;
}
