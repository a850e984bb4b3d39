import type { Sql } from "../db/client";
import { indexesDeferredSql } from "../db/deferred-indexes";
import { paidUntilSql } from "../domain/status";
import { ClaimTakenError } from "./errors";
import type { BeforeBroadcast } from "./nonce";

/** A subscription the keeper should try to charge now. */
export type DueSubscription = {
  module: string;
  subscription_id: string;
  next_charge_at: string;
  /** FAIL records since the last CHARGE (or refill, resume, allowance change): the retry count. */
  fails: number;
  /** Never paid and out of attempts: send only if a simulation says the charge succeeds. */
  recheck: boolean;
  /** The wallet and the plan's token: one wallet's charges in one token draw on one balance and allowance. */
  subscriber: string;
  token: string;
};

/** What the due query needs besides the database. */
export type DueQuery = {
  chainId: number;
  /** Unix seconds: the later of the wall clock and the chain's latest block. */
  now: bigint;
  /** Delays (seconds) after the 1st, 2nd, … consecutive failure; the last one repeats. */
  retrySchedule: number[];
  /** This keeper's claim owner: other owners' live claims hide a subscription. */
  owner: string;
  limit: number;
  /** Failures after which a never-paid subscription is only re-simulated (default: no limit). */
  maxAttempts?: number;
  /** Seconds between such re-simulations (default 86400). */
  recheckIntervalS?: number;
};

/**
 * Due subscriptions from the index, with the retry schedule applied.
 *
 * A subscription is due when its next charge time has passed, it is neither paused, cancelled nor blocked on
 * its module, and it has executions left. After failed attempts it is retried only `retrySchedule[n-1]`
 * seconds after the n-th consecutive failure, and no more once it was paid before and its grace period is
 * over, or once its allowance expiry has passed (that failure repeats until the subscriber moves the expiry,
 * which resets the count). The count restarts at the last CHARGE, REFILL, resume or allowance change.
 *
 * A subscription never paid that has `maxAttempts` failures is due only once per `recheckIntervalS` after its
 * last failure or re-simulation (`keeper_rechecks`), flagged `recheck`: the keeper then sends only a charge
 * whose simulation succeeds (see docs/keeper.md).
 *
 * Ordered as the renewal outlook judges one wallet's charges in one token (renewals.md §2): by due instant, then
 * on-chain id as a number. The due instant is the one the standing outlook was judged for (`renewal_outlooks.due_at`,
 * the later of next_charge_at and the evaluated block's time: two charges already due when evaluated tie), else
 * next_charge_at. Sent in this order, a wallet's charges fail exactly where the outlook said they would.
 */
export async function findDueSubscriptions(sql: Sql, q: DueQuery): Promise<DueSubscription[]> {
  const now = q.now.toString();
  const schedule = `{${q.retrySchedule.map((n) => Math.max(0, Math.floor(n))).join(",")}}`;
  const last = q.retrySchedule.length;
  const recheck = Math.max(0, Math.floor(q.recheckIntervalS ?? 86_400));
  return sql<DueSubscription[]>`
    select s.module, s.subscription_id::text as subscription_id, s.next_charge_at::text as next_charge_at,
           f.fails, x.exhausted as recheck, s.subscriber, p.token
    from subscriptions s
    join plans p on p.chain_id = s.chain_id and p.module = s.module and p.plan_id = s.plan_id
    left join renewal_outlooks ro on ro.chain_id = s.chain_id and ro.subscription_id = s.subscription_id
      and ro.next_charge_at = s.next_charge_at
    left join lateral (
      select r.block_number, r.log_index
      from (
        (select a.block_number, a.log_index from activity a
         where a.chain_id = s.chain_id and a.subscription_id = s.subscription_id and a.type in ('CHARGE', 'REFILL')
         order by a.block_number desc, a.log_index desc limit 1)
        union all
        (select e.block_number, e.log_index from events e
         where e.chain_id = s.chain_id and e.subscription_id = s.subscription_id and e.address = s.module
           and e.name in ('SubscriptionResumed', 'AllowanceExpiryUpdated')
         order by e.block_number desc, e.log_index desc limit 1)
      ) r
      order by r.block_number desc, r.log_index desc
      limit 1
    ) rs on true
    cross join lateral (
      select count(*)::int as fails, extract(epoch from max(a.block_time))::bigint as last_fail
      from activity a
      where a.chain_id = s.chain_id and a.subscription_id = s.subscription_id and a.type = 'FAIL'
        and (rs.block_number is null or (a.block_number, a.log_index) > (rs.block_number, rs.log_index))
    ) f
    left join keeper_rechecks k on k.chain_id = s.chain_id and k.subscription_id = s.subscription_id
    cross join lateral (
      select coalesce(s.last_paid_at = 0 and f.fails >= ${q.maxAttempts ?? null}::int, false) as exhausted
    ) x
    where s.chain_id = ${q.chainId}
      and not s.cancelled and not s.paused
      and s.next_charge_at <= ${now}::bigint
      and (s.max_executions = 0 or s.times_executed < s.max_executions)
      and not exists (
        select 1 from blocked_subscribers b
        where b.chain_id = s.chain_id and b.module = s.module and b.subscriber = s.subscriber and b.blocked)
      and not exists (
        select 1 from keeper_claims c
        where c.chain_id = s.chain_id and c.subscription_id = s.subscription_id
          and c.owner <> ${q.owner} and c.expires_at > now())
      -- During an initial backfill (indexes deferred) the index shows the past: what looks due was mostly charged
      -- long ago. Uncorrelated, so a one-time filter in front of the whole plan: nothing is scanned meanwhile.
      and not ${indexesDeferredSql(sql)}
      and (
        f.fails = 0
        or (
          (s.allowance_expiry = 0 or s.allowance_expiry >= ${now}::bigint)
          and (s.last_paid_at = 0 or ${now}::bigint <= ${paidUntilSql(sql)})
          and case
            when x.exhausted then greatest(f.last_fail, coalesce(k.checked_at, 0)) + ${recheck}::bigint
            else f.last_fail + (${schedule}::bigint[])[least(f.fails, ${last})]
          end <= ${now}::bigint
        )
      )
    order by coalesce(ro.due_at, s.next_charge_at), s.subscription_id
    limit ${q.limit}`;
}

/** The newest block the indexer committed for a chain, or null before its first batch. */
export async function indexedBlock(sql: Sql, chainId: number): Promise<bigint | null> {
  const [row] = await sql<{ indexed_block: string | null }[]>`
    select indexed_block::text as indexed_block from chains where chain_id = ${chainId}`;
  return row?.indexed_block ? BigInt(row.indexed_block) : null;
}

/** Claims a subscription for `owner` for `ttlMs`; false when another keeper holds a live claim. */
export async function claimSubscription(
  sql: Sql,
  c: { chainId: number; subscriptionId: string; owner: string; ttlMs: number },
): Promise<boolean> {
  const rows = await sql`
    insert into keeper_claims (chain_id, subscription_id, owner, expires_at)
    values (${c.chainId}, ${c.subscriptionId}, ${c.owner}, now() + make_interval(secs => ${c.ttlMs / 1000}))
    on conflict (chain_id, subscription_id) do update
      set owner = excluded.owner, expires_at = excluded.expires_at, tx_hash = null, tx_nonce = null,
        earlier_tx_hashes = '{}'
      where keeper_claims.owner = excluded.owner or keeper_claims.expires_at <= now()
    returning 1`;
  return rows.length === 1;
}

/**
 * Records a signed transaction on `owner`'s claim before it is broadcast (so a keeper killed after the broadcast
 * leaves a claim that names it), renewing the claim for `ttlMs`; takes the claim back if it expired. Throws
 * ClaimTakenError when another keeper holds a live claim: the transaction must then not be broadcast.
 */
export async function recordClaimTx(
  sql: Sql,
  c: { chainId: number; subscriptionId: string; owner: string; ttlMs: number; txHash: string; nonce: number },
): Promise<void> {
  const rows = await sql`
    insert into keeper_claims (chain_id, subscription_id, owner, expires_at, tx_hash, tx_nonce)
    values (${c.chainId}, ${c.subscriptionId}, ${c.owner}, now() + make_interval(secs => ${c.ttlMs / 1000}),
      ${c.txHash}, ${c.nonce})
    on conflict (chain_id, subscription_id) do update
      set owner = excluded.owner, expires_at = excluded.expires_at, tx_hash = excluded.tx_hash,
        tx_nonce = excluded.tx_nonce,
        -- A replacement (same owner, same nonce) remembers the versions before it.
        earlier_tx_hashes = case
          when keeper_claims.owner <> excluded.owner or keeper_claims.tx_nonce is distinct from excluded.tx_nonce
            then '{}'
          when keeper_claims.tx_hash <> excluded.tx_hash then keeper_claims.earlier_tx_hashes || keeper_claims.tx_hash
          else keeper_claims.earlier_tx_hashes end
      where keeper_claims.owner = excluded.owner or keeper_claims.expires_at <= now()
    returning 1`;
  if (rows.length === 0) throw new ClaimTakenError(`subscription ${c.subscriptionId} is claimed by another keeper`);
}

/** What a send records on its claim before the broadcast: the signed transaction's hash and nonce (renewing it). */
export const recordOnClaim =
  (sql: Sql, c: { chainId: number; subscriptionId: string; owner: string; ttlMs: number }): BeforeBroadcast =>
  (signed) =>
    recordClaimTx(sql, { ...c, txHash: signed.hash, nonce: signed.nonce });

/** Drops this owner's claim on a subscription. */
export async function releaseClaim(sql: Sql, c: { chainId: number; subscriptionId: string; owner: string }) {
  await sql`
    delete from keeper_claims
    where chain_id = ${c.chainId} and subscription_id = ${c.subscriptionId} and owner = ${c.owner}`;
}

/** Drops every claim of this owner and expired claims of anyone (start and stop). */
export async function releaseAllClaims(sql: Sql, c: { chainId: number; owner: string }) {
  await sql`delete from keeper_claims where chain_id = ${c.chainId} and (owner = ${c.owner} or expires_at <= now())`;
}

/** Records that a never-paid, out-of-attempts subscription was re-simulated at `at` (unix seconds) and still fails. */
export async function noteRecheck(sql: Sql, c: { chainId: number; subscriptionId: string; at: bigint }) {
  await sql`
    insert into keeper_rechecks (chain_id, subscription_id, checked_at)
    values (${c.chainId}, ${c.subscriptionId}, ${c.at.toString()})
    on conflict (chain_id, subscription_id) do update set checked_at = excluded.checked_at`;
}

/**
 * Drops claims a dead instance of the same key left without a transaction (called when taking the key's lock:
 * no other live process sends with this key). A transaction is recorded before it is broadcast, so these were never
 * sent. Returns how many.
 */
export async function releaseUnsentClaims(sql: Sql, c: { chainId: number; address: string }): Promise<number> {
  const rows = await sql`
    delete from keeper_claims
    where chain_id = ${c.chainId} and tx_hash is null and starts_with(owner, ${`${c.address.toLowerCase()}:`})
    returning 1`;
  return rows.length;
}

/** A live claim of another instance of this key that names a transaction. */
export type SentClaim = {
  subscription_id: string;
  owner: string;
  tx_hash: string;
  tx_nonce: string | null;
  /** Earlier versions at the same nonce, oldest first. */
  earlier_tx_hashes: string[];
};

/** The live claims other instances of this key (`address`) left with a transaction recorded. */
export async function sentClaimsOfKey(
  sql: Sql,
  c: { chainId: number; address: string; owner: string },
): Promise<SentClaim[]> {
  return sql<SentClaim[]>`
    select subscription_id::text as subscription_id, owner, tx_hash, tx_nonce::text as tx_nonce, earlier_tx_hashes
    from keeper_claims
    where chain_id = ${c.chainId} and tx_hash is not null and owner <> ${c.owner} and expires_at > now()
      and starts_with(owner, ${`${c.address.toLowerCase()}:`})
    order by subscription_id`;
}

/** Drops a claim if it still names the same owner and transaction. */
export async function releaseSentClaim(sql: Sql, c: { chainId: number; claim: SentClaim }) {
  await sql`
    delete from keeper_claims
    where chain_id = ${c.chainId} and subscription_id = ${c.claim.subscription_id} and owner = ${c.claim.owner}
      and tx_hash = ${c.claim.tx_hash}`;
}

/**
 * Makes a dead instance's claim `owner`'s, renewed for `ttlMs`, if it still names the same owner and transaction;
 * it then names `hash` (the recorded transaction, or an earlier version of it) and its nonce. False when it changed.
 */
export async function adoptSentClaim(
  sql: Sql,
  c: { chainId: number; claim: SentClaim; owner: string; ttlMs: number; nonce: number; hash: string },
): Promise<boolean> {
  const earlier = c.claim.earlier_tx_hashes;
  const kept = c.hash === c.claim.tx_hash ? earlier : earlier.slice(0, Math.max(0, earlier.indexOf(c.hash)));
  const rows = await sql`
    update keeper_claims
    set owner = ${c.owner}, expires_at = now() + make_interval(secs => ${c.ttlMs / 1000}), tx_nonce = ${c.nonce},
      tx_hash = ${c.hash}, earlier_tx_hashes = ${kept}::text[]
    where chain_id = ${c.chainId} and subscription_id = ${c.claim.subscription_id} and owner = ${c.claim.owner}
      and tx_hash = ${c.claim.tx_hash}
    returning 1`;
  return rows.length === 1;
}
