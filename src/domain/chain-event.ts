/** Chain events as the indexer hands them to the pure rules: decoded logs with their block timestamp. */

/** A decoded argument: uint ≤ 48 bits as number, wider uint as decimal string, address lowercase, bool. */
export type ArgValue = string | number | boolean;

/** An event as both the live path (decoded logs) and a replay (rows of `events` and `activity`) see it. */
export type ChainEvent = {
  blockNumber: bigint;
  logIndex: number;
  txHash: string;
  blockHash: string;
  blockTime: number;
  address: string;
  name: string;
  subscriptionId: string | null;
  args: Record<string, ArgValue>;
};

/**
 * The payment logs: each is stored once, as its `activity` row (which holds all of its arguments), never in `events`
 * (migration 0034).
 */
export const ACTIVITY_LOGS: ReadonlySet<string> = new Set([
  "ChargeSucceeded",
  "ChargeFailed",
  "CreditRefilled",
  "SpendPermissionUsed",
]);

/** The Spend Permission manager's logs: derived by their own rules, never by the protocol's. */
export const SPEND_PERMISSION_LOGS: ReadonlySet<string> = new Set([
  "SpendPermissionApproved",
  "SpendPermissionRevoked",
  "SpendPermissionUsed",
]);
