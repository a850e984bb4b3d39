/** Reads of the renewals list: a merchant's stored outlooks that still hold (renewals.md §5). */
import type { Sql } from "../../../db/client";
import { allocationId } from "../../../domain/records";
import { toRenewalObject, type RenewalRow } from "../../../domain/renewal-record";
import { heldOutlooks, type HeldOutlookRow } from "../../../renewals/sql";
import { DEADLINE_FAST_MS, DEADLINE_LIST_MS, withDeadline } from "../../deadline";
import { RENEWAL_REASONS, type RenewalItem } from "./model";

/** Filters and page of the list. */
export type RenewalQuery = {
  merchant: string;
  chainId: number;
  outlook?: "will_renew" | "at_risk";
  reason?: RenewalRow["reason"];
  /** Unix ms: only outlooks due before it. */
  dueBefore?: number;
  token?: string;
  limit?: number;
  /** The keyset of the `starting_after` outlook. */
  after?: { dueAt: string; subscriptionId: string };
};

type ItemRow = HeldOutlookRow & { renewal: RenewalRow };

/**
 * A merchant's outlooks (module subscriptions and spend permissions) by due_at, then on-chain id as a number (a
 * permission's hash as one); `limit + 1` rows at most so the caller can tell a cut page.
 */
export async function listRenewals(sql: Sql, q: RenewalQuery): Promise<ItemRow[]> {
  return withDeadline(
    sql<ItemRow[]>`
      select h.chain_id, h.subscription_id, h.merchant, h.module, h.subscriber, h.plan_id, h.on_chain_id, h.renewal
      from ${heldOutlooks(sql, { merchant: q.merchant, chainId: q.chainId })}
      where true
        ${q.outlook ? sql`and h.outlook = ${q.outlook}` : sql``}
        ${q.reason ? sql`and h.reason = ${q.reason}` : sql``}
        ${q.dueBefore !== undefined ? sql`and h.sort_due * 1000 < ${q.dueBefore}` : sql``}
        ${q.token ? sql`and lower(h.symbol) = lower(${q.token})` : sql``}
        ${q.after ? sql`and (h.sort_due, h.sort_id) > (${q.after.dueAt}::bigint, ${q.after.subscriptionId}::numeric)` : sql``}
      order by h.sort_due, h.sort_id
      ${q.limit ? sql`limit ${q.limit + 1}` : sql``}`,
    DEADLINE_LIST_MS,
  );
}

/** The keyset of an outlook of the merchant (for `starting_after`), or undefined. */
export async function renewalPosition(
  sql: Sql,
  q: { merchant: string; chainId: number; module: string; subscriptionId: string },
): Promise<{ dueAt: string; subscriptionId: string } | undefined> {
  const [row] = await withDeadline(
    sql<{ due_at: string }[]>`
      select ro.due_at from renewal_outlooks ro
      where ro.chain_id = ${q.chainId} and ro.subscription_id = ${q.subscriptionId} and ro.merchant = ${q.merchant}
        and (exists (select 1 from subscriptions s where s.chain_id = ro.chain_id
            and s.subscription_id = ro.subscription_id and s.module = ${q.module})
          or exists (select 1 from spend_permissions sp where sp.chain_id = ro.chain_id
            and sp.subscription_id = ro.subscription_id and sp.manager = ${q.module}))`,
    DEADLINE_FAST_MS,
  );
  return row && { dueAt: String(row.due_at), subscriptionId: q.subscriptionId };
}

/** The list item of a row. */
export function toRenewalItem(r: ItemRow): RenewalItem {
  return {
    allocation_id: allocationId({ chain_id: r.chain_id, module: r.module, subscription_id: r.on_chain_id }),
    on_chain_id: r.on_chain_id,
    module_address: r.module,
    user_address: r.subscriber,
    plan_id: r.plan_id,
    ...toRenewalObject(r.renewal),
  };
}

/** A count and a sum of amounts (base units, decimal). */
export type RenewalFigure = { count: number; amount: string };

/** The renewals figures of one token (stats `renewals`). */
export type RenewalTotals = {
  token: string;
  currency: string | null;
  token_decimals: number | null;
  due: RenewalFigure;
  will_renew: RenewalFigure;
  at_risk: RenewalFigure & { by_reason: Record<(typeof REASONS)[number], RenewalFigure> };
};

const REASONS = RENEWAL_REASONS;

/** Per token: the count and sum of the charges due within the horizon, by outlook and, at risk, by reason. */
export async function renewalTotals(sql: Sql, merchant: string, chainId: number): Promise<RenewalTotals[]> {
  const rows = await sql<
    {
      token: string;
      symbol: string | null;
      decimals: number | null;
      outlook: string;
      reason: string | null;
      n: number;
      total: string;
    }[]
  >`
    select h.token, h.symbol, h.decimals, h.outlook, h.reason, count(*)::int as n, sum(h.amount::numeric)::text as total
    from ${heldOutlooks(sql, { merchant, chainId })}
    group by h.token, h.symbol, h.decimals, h.outlook, h.reason
    order by h.token`;
  const zero = (): RenewalFigure => ({ count: 0, amount: "0" });
  const add = (f: RenewalFigure, n: number, total: string) => {
    f.count += n;
    f.amount = (BigInt(f.amount) + BigInt(total)).toString();
  };
  const out = new Map<string, RenewalTotals>();
  for (const r of rows) {
    let t = out.get(r.token);
    if (!t) {
      const by_reason = Object.fromEntries(REASONS.map((k) => [k, zero()])) as RenewalTotals["at_risk"]["by_reason"];
      t = {
        token: r.token,
        currency: r.symbol,
        token_decimals: r.decimals,
        due: zero(),
        will_renew: zero(),
        at_risk: { ...zero(), by_reason },
      };
      out.set(r.token, t);
    }
    add(t.due, r.n, r.total);
    if (r.outlook === "will_renew") add(t.will_renew, r.n, r.total);
    else {
      add(t.at_risk, r.n, r.total);
      if (r.reason) add(t.at_risk.by_reason[r.reason as (typeof REASONS)[number]], r.n, r.total);
    }
  }
  return [...out.values()];
}
