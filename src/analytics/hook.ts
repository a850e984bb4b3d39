/**
 * The indexer's side of the MRR analytics (analytics.md §2, webhooks.md §1): from the status events of each batch
 * (and of each idle poll's expiries), the movements of the customers they touch, written in the same transaction,
 * and a `customer.churned` / `customer.reactivated` event per churn / reactivation, stored with the batch's events.
 * A rollback deletes the movements of the removed blocks, and withdraws their events with the others. Module
 * allocations and Spend Permissions count alike: a wallet's permission and its module subscription of one merchant
 * in one token are one customer.
 */
import type { IndexerHook } from "../indexer/hooks";
import type { BatchRows } from "../indexer/write";
import type { Q } from "../db/query";
import type { DerivedEvents } from "../events/hook";
import type { NewEvent } from "../events/timeline";
import { planKey } from "../domain/subscription";
import { leaveReason } from "../domain/mrr";
import { moduleChange, permissionChange, STATUS_TYPES } from "./changes";
import { rebuildPermissionCustomers } from "./rebuild";
import {
  customerKey,
  foldMovements,
  movementIds,
  type CustomerState,
  type StatusChange,
  type StoredMovement,
} from "./movements";
import {
  addToRollups,
  deleteMovementsAbove,
  insertMovements,
  loadCustomers,
  loadLastFailures,
  loadPlanAmounts,
  loadTokenMeta,
} from "./queries";

/** The movement record of analytics.md §5. */
export function movementRecord(
  m: StoredMovement,
  meta: { symbol: string | null; decimals: number | null } | undefined,
) {
  return {
    id: m.id,
    at: new Date(m.at * 1000).toISOString(),
    block_number: m.blockNumber.toString(),
    customer: m.customer,
    token: m.token,
    currency: meta?.symbol ?? null,
    token_decimals: meta?.decimals ?? null,
    kind: m.kind,
    mrr_before: m.mrrBefore.toString(),
    mrr_after: m.mrrAfter.toString(),
    amount: (m.mrrAfter - m.mrrBefore).toString(),
    reason: m.reason,
    recovered: m.recovered,
    allocation_ids: m.allocationIds,
  };
}

/** Adds movements just written to the rollups. */
async function rollUp(tx: Q, chainId: number, stored: StoredMovement[]) {
  if (stored.length === 0) return;
  const ids = stored.map((m) => m.id);
  await addToRollups(tx, tx`m.chain_id = ${chainId} and m.id = any(${ids}::text[])`, 1);
}

/** The MRR analytics: `derive` for the events hook, and `hook` for rollbacks (registered after the events hook). */
export function mrrAnalytics() {
  /**
   * The movements each batch writes, laid over the table for the batches after it while it may not have committed.
   * Promised from the batch's `beforeBulk` (which runs before the next batch's begins): the next batch's derivation
   * may start before this one's has ended.
   */
  const written = new WeakMap<
    BatchRows,
    { promise: Promise<StoredMovement[]>; settle: (m: StoredMovement[] | Error) => void }
  >();
  const promise = (rows: BatchRows) => {
    let settle: (m: StoredMovement[] | Error) => void = () => {};
    const p = new Promise<StoredMovement[]>((resolve, reject) => {
      settle = (m) => (m instanceof Error ? reject(m) : resolve(m));
    });
    p.catch(() => {}); // awaited by the next batch, which then fails as this one did
    const entry = { promise: p, settle };
    written.set(rows, entry);
    return entry;
  };

  const derive: DerivedEvents = async (tx, input) => {
    const entry = input.batch ? (written.get(input.batch.rows) ?? promise(input.batch.rows)) : undefined;
    try {
      const { movements, events } = await deriveMovements(tx, input);
      entry?.settle(movements);
      return events;
    } catch (err) {
      entry?.settle(err instanceof Error ? err : new Error(String(err)));
      throw err;
    }
  };

  const deriveMovements = async (
    tx: Q,
    { chainId, events, batch, inFlight, hashOf }: Parameters<DerivedEvents>[1],
  ): Promise<{ movements: StoredMovement[]; events: NewEvent[] }> => {
    // Status events of module allocations (their snapshot) and of Spend Permissions (their record), in chain order.
    const permission = new Map<NewEvent, StatusChange>();
    const status: NewEvent[] = [];
    for (const e of events) {
      if (!STATUS_TYPES.has(e.type)) continue;
      if (e.snapshot) status.push(e);
      else {
        const change = permissionChange(e);
        if (change) (permission.set(e, change), status.push(e));
      }
    }
    if (status.length === 0) return { movements: [], events: [] };
    const modules = status.filter((e) => e.snapshot);
    // Plans: the table, then the plans of the batches in flight and of this batch (not in the table yet).
    const planKeys = new Map<string, [string, string]>();
    for (const e of modules) {
      const s = e.snapshot!.state;
      planKeys.set(planKey(s.module, s.planId), [s.module, s.planId]);
    }
    const plans = await loadPlanAmounts(tx, chainId, [...planKeys.values()]);
    for (const r of [...inFlight, ...(batch ? [batch.rows] : [])]) {
      for (const p of r.derived.plans) {
        plans.set(planKey(p.module, p.planId), {
          amount: BigInt(p.amount),
          interval: p.interval,
          token: p.token.toLowerCase(),
        });
      }
    }
    // Who cancelled: the cancelling log's `by`.
    const cancels = new Map<string, string>();
    for (const ev of batch?.rows.batch.events ?? []) {
      if (ev.name === "SubscriptionCancelled") cancels.set(`${ev.blockNumber}:${ev.logIndex}`, String(ev.args.by));
    }
    // Expiries that end an ACTIVE allocation: named by its last failed charge since its last successful one.
    const asks = modules
      .filter((e) => e.snapshot!.status === "EXPIRED" && e.snapshot!.previous === "ACTIVE")
      .map((e) => ({ id: e.snapshot!.state.subscriptionId, at: e.ts, paidAt: e.snapshot!.state.lastPaidAt }));
    const failures = await loadLastFailures(tx, chainId, asks);
    // The batches in flight may not have committed: their failures are laid over.
    const asksOf = new Map<string, typeof asks>();
    for (const ask of asks) (asksOf.get(ask.id) ?? asksOf.set(ask.id, []).get(ask.id)!).push(ask);
    for (const r of asks.length > 0 ? inFlight : []) {
      for (const a of r.derived.activity) {
        if (a.type !== "FAIL") continue;
        for (const ask of asksOf.get(a.subscriptionId) ?? []) {
          if (a.blockTime >= ask.at || a.blockTime <= ask.paidAt) continue;
          const key = `${ask.id}:${ask.at}`;
          const prev = failures.get(key);
          const later =
            !prev ||
            a.blockNumber > prev.blockNumber ||
            (a.blockNumber === prev.blockNumber && a.logIndex > prev.logIndex);
          if (later) {
            failures.set(key, {
              reason: a.reason,
              blockNumber: a.blockNumber,
              logIndex: a.logIndex,
              time: a.blockTime,
            });
          }
        }
      }
    }
    const changes: StatusChange[] = [];
    const last = new Map<string, NewEvent>();
    for (const e of status) {
      let change = permission.get(e);
      if (!change) {
        const { state, status: st, previous } = e.snapshot!;
        const plan = plans.get(planKey(state.module, state.planId));
        if (!plan) continue;
        const by = cancels.get(`${e.blockNumber}:${e.logIndex}`);
        change = moduleChange({
          chainId,
          module: state.module,
          subscriptionId: state.subscriptionId,
          merchant: state.merchant,
          subscriber: state.subscriber,
          plan,
          blockNumber: e.blockNumber,
          ts: e.ts,
          status: st,
          previous: previous ?? null,
          reason: leaveReason(st, {
            cancelledBySubscriber: by !== undefined && by.toLowerCase() === state.subscriber.toLowerCase(),
            lastFailure: failures.get(`${state.subscriptionId}:${e.ts}`)?.reason ?? null,
          }),
        });
      }
      changes.push(change);
      last.set(`${customerKey(change.merchant, change.customer, change.token)}|${e.blockNumber}|${e.ts}`, e);
    }
    // Customers' states: the table, then the movements of the batches in flight.
    const keys = new Map<string, { merchant: string; customer: string; token: string }>();
    for (const c of changes) keys.set(customerKey(c.merchant, c.customer, c.token), c);
    const customers = await loadCustomers(tx, chainId, [...keys.values()]);
    for (const r of inFlight) {
      for (const m of (await written.get(r)?.promise) ?? []) {
        const key = customerKey(m.merchant, m.customer, m.token);
        if (keys.has(key)) {
          const { kind, reason, at, firstAt, activeSince } = m;
          const lastChurnAt = kind === "churn" ? at : m.prevChurnAt;
          customers.set(key, { mrr: m.mrrAfter, kind, reason, at, firstAt, activeSince, lastChurnAt });
        }
      }
    }
    // A Spend Permission catch-up's changes lie before the movements already stored: a customer that has some (its
    // module subscriptions of the same merchant, in the same token) is left to the rebuild at start, which folds it
    // again from all its status events in chain order.
    let folded = changes;
    if (batch?.catchUp) {
      folded = changes.filter((c) => !customers.has(customerKey(c.merchant, c.customer, c.token)));
      if (folded.length < changes.length)
        await tx`update chains set mrr_rebuild_due = true where chain_id = ${chainId}`;
    }
    const after = new Map<string, CustomerState>();
    const moves = foldMovements(folded, (k) => customers.get(k), after);
    const stored: StoredMovement[] = [];
    const out: NewEvent[] = [];
    const meta = await loadTokenMeta(tx, chainId, [...new Set(moves.map((m) => m.token))]);
    for (const r of [...inFlight, ...(batch ? [batch.rows] : [])]) {
      for (const t of r.tokens) meta.set(t.address.toLowerCase(), { symbol: t.symbol, decimals: t.decimals });
    }
    for (const m of moves) {
      const { id, eventId } = movementIds(chainId, await hashOf(m.blockNumber, m.at), m);
      const sm = { ...m, id };
      stored.push(sm);
      if (m.kind !== "churn" && m.kind !== "reactivation") continue;
      const cause = last.get(`${customerKey(m.merchant, m.customer, m.token)}|${m.blockNumber}|${m.at}`)!;
      out.push({
        id: eventId,
        merchant: m.merchant,
        type: m.kind === "churn" ? "customer.churned" : "customer.reactivated",
        blockNumber: m.blockNumber,
        logIndex: cause.logIndex,
        subIndex: 2,
        ts: m.at,
        data: { object: movementRecord(sm, meta.get(m.token)) },
      });
    }
    await insertMovements(tx, chainId, stored);
    // A batch's rollups are added by `onBatch`, once the batch before it committed (their rows are shared: adding
    // them here would wait on that batch's locks); an idle poll's here.
    if (!batch) await rollUp(tx, chainId, stored);
    return { movements: stored, events: out };
  };

  const hook: IndexerHook = {
    name: "mrr-movements",
    // A chain indexed before Spend Permissions fed MRR, a catch-up or a forgotten spender that left a customer with
    // movements to fold again (./rebuild.ts).
    async onStart(sql, ctx) {
      await rebuildPermissionCustomers(sql, ctx.chainId, ctx.blockHashes);
    },
    async onBatch(tx, ctx) {
      await rollUp(tx, ctx.chainId, (await written.get(ctx.rows)?.promise) ?? []);
    },
    async beforeBulk(_tx, ctx) {
      promise(ctx.rows);
    },
    async onRollback(tx, ctx) {
      const above = (ctx.ancestor ?? -1n).toString();
      await addToRollups(tx, tx`m.chain_id = ${ctx.chainId} and m.block_number > ${above}`, -1);
      await deleteMovementsAbove(tx, ctx.chainId, ctx.ancestor);
    },
  };
  return { derive, hook };
}
