/**
 * The renewal outlook (renewals.md §2, spend-permissions §4): what the next charge of each subscription or spend
 * permission will do, judged from the state of one block. Pure: the reader supplies the block's balances, allowances,
 * credits and, for permissions, whether the manager still owns the account.
 */

/** A failure the outlook can foresee (`TransferFailed` never is). */
export type RenewalReason = "AllowanceExpired" | "InsufficientAllowance" | "InsufficientBalance" | "ManagerNotOwner";

/** The reasons: the processor's in its order of checks, then the one only a spend permission has. */
export const RENEWAL_REASONS: readonly RenewalReason[] = [
  "AllowanceExpired",
  "InsufficientAllowance",
  "InsufficientBalance",
  "ManagerNotOwner",
];

/** One chargeable subscription's next charge. Times are unix seconds. */
export type DueCharge = {
  /** Caller's key for the subscription (e.g. its on-chain id as a string). */
  key: string;
  /** The on-chain subscription id: ties of due instants are ordered by it, as a number. */
  onChainId: bigint;
  /** The subscriber and the plan's token (lowercase): one wallet's charges in one token share its funds. */
  wallet: string;
  token: string;
  amount: bigint;
  nextChargeAt: number;
  /** 0: never expires. */
  allowanceExpiry: number;
  /**
   * Set for a spend permission's charge: the manager that must still own the account. Such a charge has no ERC-20
   * allowance, no credit and no expiry; `amount` is the period's allowance.
   */
  manager?: string;
};

/** A wallet's funds in one token at the evaluated block: its balance and its allowance to the processor. */
export type WalletFunds = { balance: bigint; allowance: bigint };

/** What the evaluated block showed; `undefined` where a read failed. */
export type BlockReads = {
  blockTime: number;
  funds: (wallet: string, token: string) => WalletFunds | undefined;
  credit: (key: string) => bigint | undefined;
  /**
   * Whether `manager` owns the smart account `wallet` (`isOwnerAddress`): null when the account does not answer it
   * (not that kind of wallet: the check is skipped), undefined where the read failed.
   */
  isOwner?: (wallet: string, manager: string) => boolean | null | undefined;
};

/** The outlook of one charge. `balance`, `allowance`, `credit` are what the block showed (before earlier charges). */
export type Outlook = {
  dueAt: number;
  outlook: "will_renew" | "at_risk";
  reason: RenewalReason | null;
  amount: bigint;
  balance: bigint;
  allowance: bigint;
  credit: bigint;
  /** How much more of the limiting resource the charge needs after the earlier charges (0n when it will renew). */
  shortfall: bigint;
};

/** The due instant of a charge judged at a block of time `blockTime`: it cannot happen before that block. */
export const dueInstant = (c: DueCharge, blockTime: number): number => Math.max(c.nextChargeAt, blockTime);

/**
 * Orders charges by due instant; ties: module subscriptions first, by on-chain id as a number, then spend permissions
 * by hash (its hex text orders as the number `onChainId` holds).
 */
function byDue(blockTime: number) {
  return (a: DueCharge, b: DueCharge) =>
    dueInstant(a, blockTime) - dueInstant(b, blockTime) ||
    Number(a.manager !== undefined) - Number(b.manager !== undefined) ||
    (a.onChainId < b.onChainId ? -1 : a.onChainId > b.onChainId ? 1 : 0);
}

/**
 * Judges one wallet's charges in one token, in due order, against its funds: each charge that will be paid from the
 * wallet's funds consumes its amount from the running balance (and, for a module subscription, allowance) before the
 * next is judged; a charge paid from credit, or judged at risk, consumes nothing. Checks follow the contracts: for a
 * module subscription allowance expiry, credit, allowance, balance; for a spend permission the manager's ownership of
 * the account, then the balance. Returns undefined when a read the group needs failed (its previous outlooks stand).
 */
function judgeGroup(charges: DueCharge[], reads: BlockReads): Map<string, Outlook> | undefined {
  const funds = reads.funds(charges[0]!.wallet, charges[0]!.token);
  if (!funds) return undefined;
  const credits = charges.map((c) => (c.manager === undefined ? reads.credit(c.key) : 0n));
  if (credits.some((c) => c === undefined)) return undefined;
  const owners = charges.map((c) => (c.manager === undefined ? null : reads.isOwner?.(c.wallet, c.manager)));
  if (owners.some((o) => o === undefined)) return undefined;
  let { balance, allowance } = funds;
  const out = new Map<string, Outlook>();
  charges.forEach((c, i) => {
    const dueAt = dueInstant(c, reads.blockTime);
    if (c.manager !== undefined) {
      // A spend permission: no ERC-20 allowance or credit; `allowance` shows the period's allowance.
      const base = { dueAt, amount: c.amount, balance: funds.balance, allowance: c.amount, credit: 0n };
      if (owners[i] === false)
        return out.set(c.key, { ...base, outlook: "at_risk", reason: "ManagerNotOwner", shortfall: c.amount });
      if (balance < c.amount)
        return out.set(c.key, {
          ...base,
          outlook: "at_risk",
          reason: "InsufficientBalance",
          shortfall: c.amount - balance,
        });
      balance -= c.amount;
      return out.set(c.key, { ...base, outlook: "will_renew", reason: null, shortfall: 0n });
    }
    const credit = credits[i]!;
    const base = { dueAt, amount: c.amount, balance: funds.balance, allowance: funds.allowance, credit };
    const risk = (reason: RenewalReason, shortfall: bigint) =>
      out.set(c.key, { ...base, outlook: "at_risk", reason, shortfall });
    if (c.allowanceExpiry !== 0 && dueAt > c.allowanceExpiry) return risk("AllowanceExpired", c.amount);
    if (credit >= c.amount) return out.set(c.key, { ...base, outlook: "will_renew", reason: null, shortfall: 0n });
    if (allowance < c.amount) return risk("InsufficientAllowance", c.amount - allowance);
    if (balance < c.amount) return risk("InsufficientBalance", c.amount - balance);
    balance -= c.amount;
    allowance -= c.amount;
    out.set(c.key, { ...base, outlook: "will_renew", reason: null, shortfall: 0n });
  });
  return out;
}

/**
 * The outlooks of a set of chargeable charges judged at one block. Every charge of a wallet in a token that could
 * come before another must be in the set (the caller passes whole groups). Charges of a group with a failed read get
 * no outlook.
 */
export function evaluateRenewals(charges: readonly DueCharge[], reads: BlockReads): Map<string, Outlook> {
  const groups = new Map<string, DueCharge[]>();
  for (const c of charges) {
    const k = `${c.wallet}:${c.token}`;
    (groups.get(k) ?? groups.set(k, []).get(k)!).push(c);
  }
  const out = new Map<string, Outlook>();
  for (const group of groups.values()) {
    group.sort(byDue(reads.blockTime));
    for (const [k, o] of judgeGroup(group, reads) ?? []) out.set(k, o);
  }
  return out;
}
