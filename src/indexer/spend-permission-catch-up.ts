/**
 * Catch-up of spenders added to `SPEND_PERMISSION_SPENDERS` after the index passed their history (spend-permissions
 * spec §6.4): at start, their logs from the source's start block to the cursor are fetched, decoded and written as one
 * batch (`BatchContext.catchUp`) through the indexer's hooks — so their webhook events, renewal notices, MRR movements
 * and stats are made as a fresh index makes them, with the same ids — together with the permission rows and the new
 * spender set, in one transaction: a crash repeats it whole.
 */
import { getHeaders } from "../chain/rpc";
import type { IndexerContext } from "./context";
import { ChainBehindError } from "./errors";
import type { BatchEvent } from "./fetch";
import { batchContext, runBatchHooks, runCommitHooks, writeBatchBulk } from "./pipeline";
import {
  fetchEarlierApprovals,
  fetchSpendPermissionEvents,
  permissionTokens,
  recordSpendPermissionSource,
  spenderList,
  type SpendPermissionIndexing,
} from "./spend-permission-source";
import { derivePermissionRows, writePermissions } from "./spend-permission-state";
import type { SpenderSet } from "./spend-permissions";
import { insertTokens, type Cursor } from "./store";
import type { BatchRows } from "./write";
import type { BatchContext } from "./hooks";

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
  // New spenders' permissions are not indexed yet: the fold starts empty (a cache of its own), and Used logs of
  // permissions approved before the start block get their Approved looked up, as a batch's do.
  const permissions = await derivePermissionRows(
    ctx.sql,
    ctx.chainId,
    {},
    events,
    (hashes) => fetchEarlierApprovals(ctx.client, sp, hashes, ctx.policy) as Promise<BatchEvent[]>,
  );
  let bctx: BatchContext | null = null;
  if (cursor && permissions) {
    const rows: BatchRows = {
      batch: {
        from: sp.startBlock,
        to: cursor.block,
        events,
        covered: cursor.block,
        toHeader: { number: cursor.block, hash: cursor.hash, parentHash: "", timestamp: cursor.time },
        windowHeaders: [],
      },
      before: new Map(),
      derived: { modules: [], plans: [], subscriptions: [], blocked: [], activity: permissions.activity, orphans: 0 },
      tokens: metas,
      permissions,
    };
    bctx = { ...batchContext(ctx, rows, null, cursor.block, false), catchUp: true };
  }
  const written = await ctx.sql.begin(async (tx) => {
    // Another process may have caught them up meanwhile: then this one writes nothing.
    const [row] = await tx<{ spenders: string | null }[]>`
      select spend_permission_spenders as spenders from chains where chain_id = ${ctx.chainId} for update`;
    if ((row?.spenders ?? "") !== [...previous].sort().join(",")) return false;
    await tx`update chains set spend_permission_spenders = ${spenderList(sp.spenders)} where chain_id = ${ctx.chainId}`;
    if (bctx) {
      // As a batch: the hooks around its logs and CHARGE rows, then the permission rows (the state after it).
      await writeBatchBulk(ctx, tx, bctx);
      await runBatchHooks(ctx, tx, bctx);
      await writePermissions(tx, ctx.chainId, permissions!);
    }
    await insertTokens(tx, ctx.chainId, metas);
    return true;
  });
  if (!written) return 0;
  if (bctx) runCommitHooks(ctx, bctx);
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
