/**
 * An independent reading of analytics.md §1–4 for the tests: every figure computed from the status timeline (the
 * status events of the log), the plans as the test created them (a Spend Permission's terms and revocation from its
 * row), the cancelling logs and the charge attempts —
 * the MRR of a customer at an instant summed over its allocations each time, never carried from one movement to
 * the next as the indexer does.
 */
import type { Sql } from "../../src/db/client";

const MONTH = 2_629_800n;
const RECOVERY = 30 * 86_400;

/** A plan as the test made it. */
export type OraclePlan = { module: string; planId: string; token: string; amount: bigint; interval: number };

type Change = { block: bigint; ts: number; status: string; logIndex: number; subIndex: number };
type Alloc = {
  id: string;
  module: string;
  customer: string;
  token: string;
  mrr: bigint;
  changes: Change[];
  /** A Spend Permission's: who revoked it (spend_permissions.revoked_by); undefined for a module allocation. */
  revokedBy?: string | null;
};

/** A movement as the oracle finds it. */
export type OracleMovement = {
  customer: string;
  token: string;
  block_number: string;
  at: number;
  kind: string;
  mrr_before: string;
  mrr_after: string;
  reason: string | null;
  recovered: boolean;
  allocation_ids: string[];
};

const cmp = (a: { block: bigint; ts: number }, b: { block: bigint; ts: number }) =>
  a.block !== b.block ? (a.block < b.block ? -1 : 1) : a.ts - b.ts;

/** Loads the timeline of one merchant and answers every figure. */
export async function loadOracle(sql: Sql, chainId: number, merchant: string, plans: OraclePlan[]) {
  const planOf = new Map(plans.map((p) => [`${p.module}:${p.planId}`, p]));
  const rows = await sql<
    {
      block_number: string;
      log_index: number;
      sub_index: number;
      ts: Date;
      s_subscription_id: string;
      s_module: string;
      s_subscriber: string;
      s_plan_id: string;
      s_status: string;
    }[]
  >`
    select block_number, log_index, sub_index, ts, s_subscription_id::text, s_module, s_subscriber, s_plan_id::text, s_status
    from merchant_events
    where chain_id = ${chainId} and merchant = ${merchant} and reverted_by is null
      and type in ('subscription.created', 'subscription.status_changed') and s_subscription_id is not null
    order by block_number, log_index, sub_index, ts`;
  const allocs = new Map<string, Alloc>();
  for (const r of rows) {
    const plan = planOf.get(`${r.s_module}:${r.s_plan_id}`)!;
    const id = `${chainId}:${r.s_module}:${r.s_subscription_id}`;
    const a =
      allocs.get(id) ??
      allocs
        .set(id, {
          id,
          module: r.s_module,
          customer: r.s_subscriber.toLowerCase(),
          token: plan.token,
          mrr: (plan.amount * MONTH) / BigInt(plan.interval),
          changes: [],
        })
        .get(id)!;
    a.changes.push({
      block: BigInt(r.block_number),
      ts: r.ts.getTime() / 1000,
      status: r.s_status,
      logIndex: r.log_index,
      subIndex: r.sub_index,
    });
  }
  // Spend Permissions (spend-permissions.md): the status timeline of each permission from its events, the terms
  // (allowance as the amount, period as the interval) and who revoked it from the permission's row.
  const permissions = await sql<
    {
      block_number: string;
      log_index: number;
      sub_index: number;
      ts: Date;
      hash: string;
      status: string;
      manager: string;
      subscriber: string;
      token: string;
      allowance: string;
      period_s: string;
      revoked_by: string | null;
    }[]
  >`
    select e.block_number, e.log_index, e.sub_index, e.ts, p.hash, e.data->'object'->>'status' as status, p.manager,
      p.subscriber, p.token, p.allowance::text, p.period_s::text, p.revoked_by
    from merchant_events e
    join spend_permissions p on p.chain_id = e.chain_id and p.hash = e.data->'object'->>'on_chain_id'
    where e.chain_id = ${chainId} and e.merchant = ${merchant} and e.reverted_by is null
      and e.type in ('subscription.created', 'subscription.status_changed') and p.merchant = ${merchant}`;
  for (const r of permissions) {
    const id = `${chainId}:${r.manager}:${r.hash}`;
    const a =
      allocs.get(id) ??
      allocs
        .set(id, {
          id,
          module: r.manager,
          customer: r.subscriber.toLowerCase(),
          token: r.token.toLowerCase(),
          mrr: (BigInt(r.allowance) * MONTH) / BigInt(r.period_s),
          changes: [],
          revokedBy: r.revoked_by,
        })
        .get(id)!;
    a.changes.push({
      block: BigInt(r.block_number),
      ts: r.ts.getTime() / 1000,
      status: r.status,
      logIndex: r.log_index,
      subIndex: r.sub_index,
    });
  }
  for (const a of allocs.values())
    a.changes.sort((x, y) => cmp(x, y) || x.logIndex - y.logIndex || x.subIndex - y.subIndex);
  const cancels = await sql<{ id: string; block_number: string; by: string }[]>`
    select subscription_id::text as id, block_number, args->>'by' as by from events
    where chain_id = ${chainId} and name = 'SubscriptionCancelled'`;
  const attempts = await sql<{ id: string; t: string; type: string; reason: string | null }[]>`
    select subscription_id::text as id, extract(epoch from block_time)::bigint as t, type, reason from activity
    where chain_id = ${chainId} and type in ('CHARGE', 'FAIL') order by block_number, log_index`;

  /** An allocation's status after every change up to `pos` (inclusive), or before it when `strict`. */
  const statusAt = (a: Alloc, pos: { block: bigint; ts: number }, strict: boolean) => {
    let s: string | null = null;
    for (const c of a.changes) {
      const k = cmp(c, pos);
      if (k < 0 || (k === 0 && !strict)) s = c.status;
    }
    return s;
  };
  /** Status at unix second t: the changes at instants ≤ t. */
  const statusAtTime = (a: Alloc, t: number) => {
    let s: string | null = null;
    for (const c of a.changes) if (c.ts <= t) s = c.status;
    return s;
  };
  const customers = new Map<string, Alloc[]>();
  for (const a of allocs.values()) {
    const k = `${a.customer}|${a.token}`;
    (customers.get(k) ?? customers.set(k, []).get(k)!).push(a);
  }

  /** Per token: the MRR and the customers with MRR > 0 at unix second t. */
  const at = (t: number) => {
    const out = new Map<string, { mrr: bigint; customers: Map<string, bigint> }>();
    for (const [k, as] of customers) {
      const [customer, token] = k.split("|") as [string, string];
      const mrr = as.reduce((s, a) => s + (statusAtTime(a, t) === "ACTIVE" ? a.mrr : 0n), 0n);
      const e = out.get(token) ?? out.set(token, { mrr: 0n, customers: new Map() }).get(token)!;
      e.mrr += mrr;
      if (mrr > 0n) e.customers.set(customer, mrr);
    }
    return out;
  };

  const reasonOf = (a: Alloc, status: string, pos: { block: bigint; ts: number }) => {
    // A permission: revoked by the merchant's spender, else by (or for) the subscriber; a lapse names no charge.
    if (a.revokedBy !== undefined) {
      if (status === "CANCELLED")
        return a.revokedBy === "merchant" ? "cancelled_by_merchant" : "cancelled_by_subscriber";
      return "not_charged";
    }
    if (status === "BLOCKED") return "blocked";
    if (status === "PAUSED") return "paused";
    if (status === "CANCELLED") {
      const sid = a.id.split(":")[2];
      const c = cancels.find((x) => x.id === sid && BigInt(x.block_number) === pos.block);
      return c && c.by.toLowerCase() === a.customer ? "cancelled_by_subscriber" : "cancelled_by_merchant";
    }
    const sid = a.id.split(":")[2];
    const before = attempts.filter((x) => x.id === sid && Number(x.t) < pos.ts);
    const last = before.at(-1);
    return last?.type === "FAIL" ? last.reason : "not_charged";
  };

  const movements: OracleMovement[] = [];
  for (const [k, as] of customers) {
    const [customer, token] = k.split("|") as [string, string];
    const instants = [...new Map(as.flatMap((a) => a.changes.map((c) => [`${c.block}|${c.ts}`, c]))).values()].sort(
      cmp,
    );
    let had = false;
    let lastChurn: { at: number; reason: string | null } | null = null;
    for (const pos of instants) {
      let before = 0n;
      let after = 0n;
      const left: string[] = [];
      const moved: string[] = [];
      let entered = false;
      for (const a of as) {
        const b = statusAt(a, pos, true) === "ACTIVE";
        const sAfter = statusAt(a, pos, false);
        const n = sAfter === "ACTIVE";
        if (b) before += a.mrr;
        if (n) after += a.mrr;
        if (b && !n) (left.push(reasonOf(a, sAfter!, pos)!), moved.push(a.id));
        if (!b && n) ((entered = true), moved.push(a.id));
      }
      if (before === after) continue;
      const kind =
        before === 0n
          ? had
            ? "reactivation"
            : "new"
          : after === 0n
            ? "churn"
            : after > before
              ? "expansion"
              : "contraction";
      const order = [
        "cancelled_by_subscriber",
        "cancelled_by_merchant",
        "blocked",
        "paused",
        "InsufficientBalance",
        "InsufficientAllowance",
        "AllowanceExpired",
        "TransferFailed",
        "not_charged",
      ];
      const first = left.sort((x, y) => order.indexOf(x) - order.indexOf(y))[0] ?? null;
      const reason = kind === "churn" ? first : kind === "contraction" ? (entered ? "plan_change" : first) : null;
      const involuntary = (r: string | null) =>
        ["InsufficientBalance", "InsufficientAllowance", "AllowanceExpired", "TransferFailed", "not_charged"].includes(
          r ?? "",
        );
      const recovered =
        kind === "reactivation" &&
        lastChurn !== null &&
        involuntary(lastChurn.reason) &&
        pos.ts - lastChurn.at <= RECOVERY;
      movements.push({
        customer,
        token,
        block_number: pos.block.toString(),
        at: pos.ts,
        kind,
        mrr_before: before.toString(),
        mrr_after: after.toString(),
        reason,
        recovered,
        allocation_ids: moved.sort(),
      });
      if (after > 0n) had = true;
      if (kind === "churn") lastChurn = { at: pos.ts, reason };
    }
  }
  movements.sort((x, y) => x.at - y.at || Number(BigInt(x.block_number) - BigInt(y.block_number)));
  return {
    movements,
    at,
    tokens: [...new Set([...allocs.values()].map((a) => a.token))].sort(),
    /** An allocation's status at unix second t by its timeline (null: none yet). */
    statusOf: (id: string, t: number) => {
      const a = allocs.get(id);
      return a ? statusAtTime(a, t) : null;
    },
  };
}

/** `num ÷ den` with 6 digits, half-even, by decimal long division on strings' numbers (the oracle's own). */
export function oracleRate(num: bigint, den: bigint): string | null {
  if (den === 0n) return null;
  const sign = num < 0n !== den < 0n && num !== 0n ? -1n : 1n;
  const n = num < 0n ? -num : num;
  const d = den < 0n ? -den : den;
  // floor(n·10^7 / d) gives one extra digit; the remainder decides exact halves.
  const x = (n * 10_000_000n) / d;
  const exact = (n * 10_000_000n) % d === 0n;
  let q = x / 10n;
  const digit = x % 10n;
  if (digit > 5n || (digit === 5n && (!exact || q % 2n === 1n))) q += 1n;
  const s = q.toString().padStart(7, "0");
  const out = `${s.slice(0, -6)}.${s.slice(-6)}`;
  return sign < 0n && q !== 0n ? `-${out}` : out;
}
