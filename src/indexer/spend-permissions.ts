/**
 * Spend Permissions as a source of the index: the log queries of one range (spend-permissions spec §6.1) and the
 * decoding of the manager's logs into events (§6.2), kept to the configured spenders.
 */
import { decodeEventLog, encodeEventTopics, pad, type Hex } from "viem";
import { spendPermissionManagerAbi } from "../chain/abis";
import type { ArgValue } from "../domain/chain-event";
import type { DecodedEvent, RawLog } from "./decode";

const topic = (eventName: "SpendPermissionApproved" | "SpendPermissionRevoked" | "SpendPermissionUsed") =>
  encodeEventTopics({ abi: spendPermissionManagerAbi, eventName })[0]!.toLowerCase();

/** topic0 of the manager's three events. */
export const SPEND_PERMISSION_TOPICS = {
  approved: topic("SpendPermissionApproved"),
  revoked: topic("SpendPermissionRevoked"),
  used: topic("SpendPermissionUsed"),
} as const;

/** The merchants a chain indexes permissions for: spender addresses (lowercase), or every spender (`*`). */
export type SpenderSet = ReadonlySet<string> | "*";

/** Parses `SPEND_PERMISSION_SPENDERS`: `*`, or comma-separated addresses (lowercased, deduplicated). */
export function parseSpenders(value: string): SpenderSet {
  if (value.trim() === "*") return "*";
  return new Set(
    value
      .split(",")
      .map((s) => s.trim().toLowerCase())
      .filter(Boolean),
  );
}

/**
 * The two `eth_getLogs` filters of a range: every Approved/Revoked of the manager (the spender sits in the data, so
 * they are filtered after decoding), and Used by topic, restricted to the spenders unless every spender is a merchant.
 * Used indexes (hash, account, spender): the spender is the third indexed argument, topic 3.
 */
export function spendPermissionFilters(manager: string, spenders: SpenderSet) {
  const usedSpenders = spenders === "*" ? null : [...spenders].sort().map((s) => pad(s as Hex).toLowerCase());
  return [
    { address: [manager.toLowerCase()], topics: [[SPEND_PERMISSION_TOPICS.approved, SPEND_PERMISSION_TOPICS.revoked]] },
    { address: [manager.toLowerCase()], topics: [[SPEND_PERMISSION_TOPICS.used], null, null, usedSpenders] },
  ];
}

/**
 * Decodes a log of the manager into an event with flat arguments (§6.2) and `subscriptionId` = uint256(hash); null
 * for a log that is not the manager's, does not decode, or belongs to a spender outside `spenders`.
 */
export function decodeSpendPermissionLog(log: RawLog, manager: string, spenders: SpenderSet): DecodedEvent | null {
  if (log.removed || log.blockNumber == null || log.logIndex == null || !log.transactionHash || !log.blockHash) {
    return null;
  }
  if (log.address.toLowerCase() !== manager.toLowerCase()) return null;
  let decoded;
  try {
    decoded = decodeEventLog({
      abi: spendPermissionManagerAbi,
      data: log.data as Hex,
      topics: log.topics as [Hex, ...Hex[]],
      strict: true,
    });
  } catch {
    return null;
  }
  let args: Record<string, ArgValue>;
  if (decoded.eventName === "SpendPermissionUsed") {
    const a = decoded.args;
    args = {
      hash: a.hash.toLowerCase(),
      account: a.account.toLowerCase(),
      spender: a.spender.toLowerCase(),
      token: a.token.toLowerCase(),
      periodStart: a.periodSpend.start,
      periodEnd: a.periodSpend.end,
      value: a.periodSpend.spend.toString(),
    };
  } else {
    const { hash, spendPermission: p } = decoded.args;
    args = {
      hash: hash.toLowerCase(),
      account: p.account.toLowerCase(),
      spender: p.spender.toLowerCase(),
      token: p.token.toLowerCase(),
      allowance: p.allowance.toString(),
      period: p.period,
      start: p.start,
      end: p.end,
      salt: p.salt.toString(),
      extraData: p.extraData.toLowerCase(),
    };
  }
  if (spenders !== "*" && !spenders.has(args.spender as string)) return null;
  return {
    blockNumber: BigInt(log.blockNumber),
    logIndex: Number(log.logIndex),
    txHash: log.transactionHash.toLowerCase(),
    blockHash: log.blockHash.toLowerCase(),
    blockTime: log.blockTimestamp ? Number(log.blockTimestamp) : null,
    address: log.address.toLowerCase(),
    name: decoded.eventName,
    subscriptionId: BigInt(args.hash as string).toString(),
    args,
  };
}
