/** Rows of shared tables as the code reads them, and their conversion to domain states. */
import type { SubState } from "../domain/subscription";

/** A row of `subscriptions` as the indexer and the event log read it. */
export type SubRow = {
  subscription_id: string;
  module: string;
  merchant: string;
  subscriber: string;
  plan_id: string;
  max_executions: string;
  times_executed: string;
  total_spent: string;
  created_at: string;
  last_paid_at: string;
  next_charge_at: string;
  allowance_expiry: string;
  paused: boolean;
  cancelled: boolean;
  block_number: string;
  log_index: number;
  tx_hash: string;
};

/** The allocation state of a row. */
export function fromRow(r: SubRow): SubState {
  return {
    subscriptionId: r.subscription_id,
    module: r.module,
    merchant: r.merchant,
    subscriber: r.subscriber,
    planId: r.plan_id,
    maxExecutions: r.max_executions,
    timesExecuted: Number(r.times_executed),
    totalSpent: BigInt(r.total_spent),
    createdAt: Number(r.created_at),
    lastPaidAt: Number(r.last_paid_at),
    nextChargeAt: Number(r.next_charge_at),
    allowanceExpiry: r.allowance_expiry,
    paused: r.paused,
    cancelled: r.cancelled,
    blockNumber: BigInt(r.block_number),
    logIndex: r.log_index,
    txHash: r.tx_hash,
  };
}
