import type { PreparedBatch } from "./fetch";
import type { Tx } from "../db/query";
import { ACTIVITY_LOGS } from "../domain/chain-event";
import type { SubState } from "../domain/subscription";
import type { BlockedRow, Derived } from "./derive";
import {
  copyActivity,
  copyEvents,
  insertActivity,
  insertEvents,
  insertModules,
  insertPlans,
  insertTokens,
  saveBlocks,
  upsertBlocked,
  upsertSubscriptions,
} from "./store";
import type { TokenMeta } from "./tokens";
import { writePermissions, type PermissionRows } from "./spend-permission-state";

/**
 * A batch with everything derived from it, ready to write; `before` holds the states, before the batch, of the
 * existing allocations it touches.
 */
export type BatchRows = {
  batch: PreparedBatch;
  before: Map<string, SubState>;
  derived: Derived;
  tokens: TokenMeta[];
  /** The spend permissions the batch changed (their CHARGE rows are in `derived.activity`). */
  permissions?: PermissionRows;
};

/**
 * What the batches in flight (written, maybe not committed) leave behind, the latest last: the state of every
 * allocation they changed, and the block flag of every `<module>:<subscriber>` pair they changed.
 */
export function leftInFlight(inFlight: readonly BatchRows[]) {
  const subs = new Map<string, SubState>();
  const flags = new Map<string, BlockedRow>();
  for (const r of inFlight) {
    for (const s of r.derived.subscriptions) subs.set(s.subscriptionId, s);
    for (const b of r.derived.blocked) flags.set(`${b.module}:${b.subscriber}`, b);
  }
  return { subs, flags };
}

/**
 * The append-only bulk of a batch (events, activity): independent of other batches' rows. COPY on a server
 * (fastest; the cursor check keeps a batch from ever being applied twice), multi-row `unnest` inserts on PGlite
 * (its socket has no COPY FROM STDIN, and COPY from a blob measured slower there than the inserts).
 */
export async function writeBulk(tx: Tx, chainId: number, rows: BatchRows, copy: boolean): Promise<void> {
  // A payment log is stored once, as its activity row (migration 0034).
  const logs = rows.batch.events.filter((e) => !ACTIVITY_LOGS.has(e.name));
  if (copy) {
    await copyEvents(tx, chainId, logs);
    await copyActivity(tx, chainId, rows.derived.activity);
  } else {
    await insertEvents(tx, chainId, logs);
    await insertActivity(tx, chainId, rows.derived.activity);
  }
}

/** The state part of a batch (modules, plans, tokens, allocations, block lists, recent block hashes). */
export async function writeState(tx: Tx, chainId: number, rows: BatchRows, window: bigint): Promise<void> {
  const { derived, batch } = rows;
  await insertModules(tx, chainId, derived.modules);
  await insertPlans(tx, chainId, derived.plans);
  await insertTokens(tx, chainId, rows.tokens);
  await upsertSubscriptions(tx, chainId, derived.subscriptions);
  await upsertBlocked(tx, chainId, derived.blocked);
  if (rows.permissions) await writePermissions(tx, chainId, rows.permissions);
  await saveBlocks(tx, chainId, batch.windowHeaders, batch.to - window);
}
