/**
 * Catch-up of spenders added to `SPEND_PERMISSION_SPENDERS` after the index passed their history (spend-permissions
 * spec §6.4): at start, their logs from the source's start block to the cursor are fetched, decoded and written
 * (events, CHARGE activity, permission rows) in one transaction with the new spender set, so a crash repeats it whole.
 */
import { getHeaders } from "../chain/rpc";
import type { IndexerContext } from "./context";
import { ChainBehindError } from "./errors";
import type { BatchEvent } from "./fetch";
import {
  fetchSpendPermissionEvents,
  recordSpendPermissionSource,
  spenderList,
  type SpendPermissionIndexing,
} from "./spend-permission-source";
import { derivePermissions, upsertPermissions } from "./spend-permission-state";
import type { SpenderSet } from "./spend-permissions";
import { insertActivity, insertEvents, insertTokens, type Cursor } from "./store";
import { ACTIVITY_LOGS } from "../domain/chain-event";
import { permissionTokens } from "./spend-permission-source";

/**
 * Writes the history of `added` spenders up to `cursor` (with `previous`, the spenders indexed before: "*" minus
 * nothing is every spender, so `added = "*"` means every spender not in `previous`). Returns the logs written.
 */
export async function catchUpSpenders(
  ctx: IndexerContext,
  sp: SpendPermissionIndexing,
  added: SpenderSet,
  previous: ReadonlySet<string>,
  cursor: Cursor | null,
): Promise<number> {
  const found = cursor
    ? await fetchSpendPermissionEvents(ctx.client, { ...sp, spenders: added }, sp.startBlock, cursor.block)
    : [];
  const events = found.filter((e) => !previous.has(String(e.args.spender))) as BatchEvent[];
  const missing = [...new Set(events.filter((e) => e.blockTime === null).map((e) => e.blockNumber))];
  const headers = await getHeaders(ctx.client, missing, ctx.policy);
  for (const ev of events) {
    if (ev.blockTime !== null) continue;
    const h = headers.get(ev.blockNumber);
    if (!h) throw new ChainBehindError(`block ${ev.blockNumber} is not available from the node yet`);
    ev.blockTime = h.timestamp;
  }
  const wanted = new Set<string>();
  const native = permissionTokens(sp, ctx.client, events, wanted, ctx.state.tokens.known);
  const metas = [...native, ...(wanted.size > 0 ? await ctx.state.tokens.read(wanted) : [])];
  // New spenders' permissions are not indexed yet: the fold starts empty.
  const rows = derivePermissions(events, new Map());
  await ctx.sql.begin(async (tx) => {
    // Another process may have caught them up meanwhile: then this one writes nothing.
    const [row] = await tx<{ spenders: string | null }[]>`
      select spend_permission_spenders as spenders from chains where chain_id = ${ctx.chainId} for update`;
    if ((row?.spenders ?? "") !== [...previous].sort().join(",")) return;
    await tx`update chains set spend_permission_spenders = ${spenderList(sp.spenders)} where chain_id = ${ctx.chainId}`;
    await insertEvents(
      tx,
      ctx.chainId,
      events.filter((e) => !ACTIVITY_LOGS.has(e.name)),
    );
    await insertActivity(tx, ctx.chainId, rows.activity);
    await upsertPermissions(tx, ctx.chainId, rows.permissions);
    await insertTokens(tx, ctx.chainId, metas);
  });
  for (const m of metas) ctx.state.tokens.known.add(m.address);
  return events.length;
}

/** At start: records the source (refusing a removed spender) and catches up the spenders added since the last start. */
export async function spendPermissionsAtStart(ctx: IndexerContext, cursor: Cursor | null): Promise<void> {
  const { sp } = ctx;
  if (!sp) return;
  const [row] = await ctx.sql<{ spenders: string | null }[]>`
    select spend_permission_spenders as spenders from chains where chain_id = ${ctx.chainId}`;
  const previous = new Set(row?.spenders && row.spenders !== "*" ? row.spenders.split(",") : []);
  const added = await recordSpendPermissionSource(ctx.sql, ctx.client, ctx.chainId, sp, ctx.policy);
  if (!added) return;
  const n = await catchUpSpenders(ctx, sp, added, previous, cursor);
  if (cursor) ctx.log("info", "spend permission spenders caught up", { chainId: ctx.chainId, logs: n });
}
