/** Chain events as the indexer hands them to the pure rules: decoded logs with their block timestamp. */

/** A decoded argument: uint ≤ 48 bits as number, wider uint as decimal string, address lowercase, bool. */
export type ArgValue = string | number | boolean;

/** An event as both the live path (decoded logs) and a replay (rows of `events`) see it. */
export type ChainEvent = {
  blockNumber: bigint;
  logIndex: number;
  txHash: string;
  blockTime: number;
  address: string;
  name: string;
  subscriptionId: string | null;
  args: Record<string, ArgValue>;
};
