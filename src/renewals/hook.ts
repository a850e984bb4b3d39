/** The indexer hook that tells the renewal loop which wallets a batch's logs touched (renewals.md §3). */
import type { IndexerHook } from "../indexer/hooks";
import type { RenewalLoop } from "./loop";
import type { BatchContext } from "../indexer/hooks";
import type { Tx } from "../db/query";

/**
 * Each charge attempt of the batch (CHARGE or FAIL, a spend permission's Used included) against the outlook stored for
 * the due instant it was made for (the allocation's next_charge_at, or the permission's N, before the batch; the loop
 * has not evaluated the batch yet): `[predicted, actual]`,
 * predicted `will_renew`, a reason or `none`, actual `succeeded` or the failure reason.
 */
export async function predictions(tx: Tx, ctx: BatchContext): Promise<[string, string][]> {
  const attempts = ctx.rows.derived.activity.filter((a) => a.type !== "REFILL");
  if (attempts.length === 0) return [];
  const ids = [...new Set(attempts.map((a) => a.subscriptionId))];
  const rows = await tx<{ id: string; next_charge_at: string; outlook: string; reason: string | null }[]>`
    select subscription_id::text as id, next_charge_at::text, outlook, reason from renewal_outlooks
    where chain_id = ${ctx.chainId} and subscription_id = any(${ids}::text[]::numeric[])`;
  const stood = new Map(rows.map((r) => [r.id, r]));
  // A spend permission's charge (a Used log) met the N stored before the batch (the table has not moved yet).
  const permissionIds = [...new Set(attempts.filter((a) => a.permissionHash).map((a) => a.subscriptionId))];
  const permissionDue = new Map<string, number>();
  if (permissionIds.length > 0) {
    for (const r of await tx<{ id: string; next_charge_at: string }[]>`
      select subscription_id::text as id, next_charge_at::text from spend_permissions
      where chain_id = ${ctx.chainId} and subscription_id = any(${permissionIds}::text[]::numeric[])`) {
      permissionDue.set(r.id, Number(r.next_charge_at));
    }
  }
  const seen = new Set<string>();
  return attempts.map((a) => {
    const o = stood.get(a.subscriptionId);
    const due = a.permissionHash
      ? permissionDue.get(a.subscriptionId)
      : ctx.rows.before.get(a.subscriptionId)?.nextChargeAt;
    // Only the batch's first attempt on an allocation meets the due instant the outlook was judged for.
    const fresh =
      !seen.has(a.subscriptionId) && o !== undefined && due !== undefined && Number(o.next_charge_at) === due;
    seen.add(a.subscriptionId);
    const predicted = fresh ? (o!.outlook === "will_renew" ? "will_renew" : o!.reason!) : "none";
    return [predicted, a.type === "CHARGE" ? "succeeded" : (a.reason ?? "unknown")];
  });
}

/**
 * Marks the subscriber of every allocation a batch creates or touches (charge, refill, pause, resume, cancel,
 * allowance expiry, block), and the account of every spend permission it approves, charges or revokes: the loop evaluates those wallets at its first pass after the batch committed. Nothing is
 * written: a batch that fails only marks wallets early, and the loop waits for the index to reach the block. The
 * batch's charge attempts go to `onPrediction` once it has committed (`afterCommit`), never for a failed attempt.
 */
export function renewalsHook(
  loop: Pick<RenewalLoop, "markDirty">,
  onPrediction?: (predicted: string, actual: string) => void,
): IndexerHook {
  // Each batch's predictions until it commits: a batch that fails after `onBatch` is retried and runs it again.
  const pending = new WeakMap<object, [string, string][]>();
  return {
    name: "renewals",
    async onBatch(tx, ctx) {
      // A catch-up's charges are history, not attempts against an outlook.
      if (onPrediction && !ctx.catchUp) pending.set(ctx.rows, await predictions(tx, ctx));
      const wallets = new Set<string>();
      for (const s of ctx.rows.before.values()) wallets.add(s.subscriber);
      for (const s of ctx.rows.derived.subscriptions) wallets.add(s.subscriber);
      for (const b of ctx.rows.derived.blocked) wallets.add(b.subscriber);
      // Spend permissions an Approved, Used or Revoked log of the batch touched: their accounts.
      for (const p of ctx.rows.permissions?.permissions ?? []) wallets.add(p.account);
      if (wallets.size > 0) loop.markDirty(wallets, ctx.toBlock);
    },
    afterCommit(ctx) {
      for (const [p, a] of pending.get(ctx.rows) ?? []) onPrediction!(p, a);
      pending.delete(ctx.rows);
    },
    async onRollback(tx, ctx) {
      // The renewal_upcoming notices of removed blocks are withdrawn with their events: they may be announced again.
      const above = (ctx.ancestor ?? -1n).toString();
      await tx`delete from renewal_notices where chain_id = ${ctx.chainId} and block_number > ${above}`;
    },
  };
}
