/**
 * Forgetting a spender (spend-permissions spec §6.4, `bun run sp:forget`): every row the index holds for one merchant
 * spender of a chain's Spend Permission source — its permissions, their logs, charges, webhook events and their
 * deliveries, renewal outlooks, keeper claims, MRR movements and stats rollups — deleted in one transaction, and the
 * spender taken out of the chain's recorded spender set, so a start without it in SPEND_PERMISSION_SPENDERS is
 * accepted. A customer of its permissions that also has module subscriptions of the same merchant address keeps its
 * movements until the indexer's next start, which folds them again from its remaining status events (the chain is
 * marked `mrr_rebuild_due`; the rebuild needs the node for blocks no stored row names). A later start that names the
 * spender again catches its history up like any added spender.
 */
import { AppError } from "../common/errors";
import type { Sql } from "../db/client";
import type { Q } from "../db/query";
import { addToRollups } from "../analytics/queries";
import { lockKey } from "./lock";
import { recomputeMerchant } from "./rollups";
import { parseSpenders } from "./spend-permissions";

/** The forget was refused before anything changed (the message says why, in one line). */
export class ForgetRefusedError extends AppError {}

/** What was deleted, by kind. */
export type ForgetResult = {
  permissions: number;
  charges: number;
  logs: number;
  events: number;
  deliveries: number;
  movements: number;
  /** Customers whose movements the indexer's next start folds again without the spender's permissions. */
  refolded: number;
  /** The chain's recorded spenders afterwards (sorted; empty: none left). */
  spenders: string[];
};

/**
 * Deletes the index's rows of `spender` (lowercase) on `chainId` and removes it from the recorded spender set, in one
 * transaction that holds the chain's indexer lock (a running indexer makes it a ForgetRefusedError, as does a chain
 * without a Spend Permission source, one that indexes every spender, or a spender it does not index).
 */
export async function forgetSpender(sql: Sql, chainId: number, spender: string): Promise<ForgetResult> {
  return sql.begin(async (t) => {
    const tx: Q = t;
    const [lock] = await tx<{ ok: boolean }[]>`select pg_try_advisory_xact_lock(${lockKey(chainId)}::bigint) as ok`;
    if (!lock!.ok) {
      throw new ForgetRefusedError(
        `an indexer of chain ${chainId} is running (it holds the chain's lock): stop every indexer of the chain first`,
      );
    }
    const [chain] = await tx<{ manager: string | null; spenders: string | null }[]>`
      select spend_permission_manager as manager, spend_permission_spenders as spenders from chains
      where chain_id = ${chainId} for update`;
    if (!chain) throw new ForgetRefusedError(`chain ${chainId} is not indexed in this database`);
    const manager = chain.manager;
    if (!manager) throw new ForgetRefusedError(`chain ${chainId} indexes no spend permissions`);
    const stored = chain.spenders ? parseSpenders(chain.spenders) : new Set<string>();
    if (stored === "*") {
      throw new ForgetRefusedError(
        `chain ${chainId} indexes every spender (SPEND_PERMISSION_SPENDERS=*): one spender cannot be taken out of it`,
      );
    }
    if (!stored.has(spender)) {
      const list = stored.size ? [...stored].join(", ") : "none";
      throw new ForgetRefusedError(`${spender} is not an indexed spender of chain ${chainId} (indexed: ${list})`);
    }
    const C = chainId;
    // Its permissions, and the hashes of logs without a row (a Revoked with no known Approved).
    const idRows = await tx<{ id: string }[]>`
      select subscription_id::text as id from spend_permissions where chain_id = ${C} and merchant = ${spender}
      union
      select subscription_id::text from events
      where chain_id = ${C} and address = ${manager} and args->>'spender' = ${spender} and subscription_id is not null`;
    const ids = idRows.map((r) => r.id);
    // The customers of its permissions (wallet and token; the merchant is the spender).
    const customers = await tx<{ customer: string; token: string }[]>`
      select distinct subscriber as customer, token from spend_permissions
      where chain_id = ${C} and merchant = ${spender}`;
    // Its webhook events: those about its permissions (subscription, renewal and withdrawal events name the
    // allocation `<chain>:<manager>:<hash>`; an activity event kept by a rollback names the manager as its module).
    const events = await tx<{ seq: string }[]>`
      delete from merchant_events
      where chain_id = ${C} and merchant = ${spender} and (
        s_module = ${manager} or data->'object'->>'allocation_id' like ${`${C}:${manager}:%`})
      returning seq::text as seq`;
    // Customers left with status events of the merchant (its module subscriptions) keep their movements, folded again
    // from those events at the indexer's next start; the others' movements (made only of its permissions) go now,
    // taken back from the rollups, with their customer events (`evt_` + the movement id's digits).
    const remaining = new Set(
      (
        await tx<{ customer: string }[]>`
          select distinct lower(coalesce(s_subscriber, data->'object'->>'user_address')) as customer
          from merchant_events
          where chain_id = ${C} and merchant = ${spender} and reverted_by is null
            and type in ('subscription.created', 'subscription.status_changed')
            and lower(coalesce(s_subscriber, data->'object'->>'user_address'))
              = any(${customers.map((c) => c.customer)}::text[])`
      ).map((r) => r.customer),
    );
    const gone = customers.filter((c) => !remaining.has(c.customer));
    const refolded = customers.length - gone.length;
    const ownMovements = (): ReturnType<Q> => tx`m.chain_id = ${C} and m.merchant = ${spender}
      and (m.customer, m.token) in (select * from unnest(${gone.map((c) => c.customer)}::text[],
        ${gone.map((c) => c.token)}::text[]))`;
    const movementIds = (await tx<{ id: string }[]>`select m.id from mrr_movements m where ${ownMovements()}`).map(
      (r) => r.id,
    );
    if (movementIds.length > 0) await addToRollups(tx, ownMovements(), -1);
    await tx`delete from mrr_movements m where ${ownMovements()}`;
    const customerEvents = await tx<{ seq: string }[]>`
      delete from merchant_events
      where chain_id = ${C} and merchant = ${spender}
        and id = any(${movementIds.map((id) => `evt_${id.slice(4)}`)}::text[])
      returning seq::text as seq`;
    if (refolded > 0) await tx`update chains set mrr_rebuild_due = true where chain_id = ${C}`;
    const charges = await tx<{ seq: string | null }[]>`
      delete from activity where chain_id = ${C} and module = ${manager} and merchant = ${spender}
      returning event_seq::text as seq`;
    const seqs = [
      ...events.map((e) => e.seq),
      ...customerEvents.map((e) => e.seq),
      ...charges.flatMap((c) => (c.seq === null ? [] : [c.seq])),
    ];
    const deliveries = await tx`delete from webhook_deliveries where event_seq = any(${seqs}::bigint[])`;
    const logs = await tx`
      delete from events where chain_id = ${C} and address = ${manager} and args->>'spender' = ${spender}`;
    const permissions = await tx`delete from spend_permissions where chain_id = ${C} and merchant = ${spender}`;
    await tx`delete from event_expiries where chain_id = ${C} and subscription_id = any(${ids}::text[])`;
    for (const table of ["renewal_outlooks", "renewal_notices", "renewal_sent", "keeper_claims", "keeper_rechecks"]) {
      await tx`delete from ${tx(table)} where chain_id = ${C} and subscription_id = any(${ids}::numeric[])`;
    }
    await recomputeMerchant(tx, C, spender);
    const left = [...stored].filter((s) => s !== spender).sort();
    // None left: the source records no spender set, and the next start's spenders are all caught up.
    await tx`update chains set spend_permission_spenders = ${left.length ? left.join(",") : null} where chain_id = ${C}`;
    return {
      permissions: permissions.count,
      charges: charges.length,
      logs: logs.count,
      events: events.length + customerEvents.length,
      deliveries: deliveries.count,
      movements: movementIds.length,
      refolded,
      spenders: left,
    };
  });
}
