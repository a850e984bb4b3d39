/** The renewal outlook object (renewals.md §2) of a stored outlook row, as the API and webhook payloads show it. */

/** An outlook row as SQL selects it (`renewalObjectSql`): unix seconds and amounts as decimal strings. */
export type RenewalRow = {
  due_at: string;
  outlook: "will_renew" | "at_risk";
  reason: "AllowanceExpired" | "InsufficientAllowance" | "InsufficientBalance" | "ManagerNotOwner" | null;
  amount: string;
  currency: string | null;
  token_decimals: number | null;
  balance: string;
  allowance: string;
  credit: string;
  shortfall: string;
  checked_block: string;
  checked_at: string;
};

/** The outlook object. */
export type RenewalObject = Omit<RenewalRow, "due_at" | "checked_at"> & { due_at: string; checked_at: string };

const iso = (unix: string | number) => new Date(Number(unix) * 1000).toISOString();

/** The outlook object of a row. */
export function toRenewalObject(r: RenewalRow): RenewalObject {
  return {
    due_at: iso(r.due_at),
    outlook: r.outlook,
    reason: r.outlook === "will_renew" ? null : r.reason,
    amount: String(r.amount),
    currency: r.currency,
    token_decimals: r.token_decimals,
    balance: String(r.balance),
    allowance: String(r.allowance),
    credit: String(r.credit),
    shortfall: String(r.shortfall),
    checked_block: String(r.checked_block),
    checked_at: iso(r.checked_at),
  };
}
