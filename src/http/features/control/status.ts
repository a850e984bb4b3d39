/**
 * The operator's one-screen status (`bun run status`): per chain the index against the head, progress, ETA and the
 * last reorg; the keeper's balance and last hour; the webhook endpoints and their backlog; and what needs attention.
 * Computed where the database is: in the CLI, or in the service that holds the embedded one (its control route).
 */
import { formatEther, type PublicClient } from "viem";
import { privateKeyToAccount } from "viem/accounts";
import { publicClientFor } from "../../../chain/clients";
import type { Config } from "../../../common/config";
import type { Sql } from "../../../db/client";
import { deferredIndexes } from "../../../db/deferred-indexes";
import { formatEta, SYNC_LAG_BLOCKS } from "../../../domain/progress";
import { heldOutlooks } from "../../../renewals/sql";
import { fanOutBacklog } from "../../../webhooks/fanout";
import { readChains, type ChainRow } from "../../chain-state";
import { chainProgress } from "../health/service";

/** Gas a charge is counted at when judging the keeper's balance (a charge's estimate plus the keeper's margin). */
export const CHARGE_GAS = 200_000n;
/** A keeper whose balance pays for fewer charges than this at the current gas price is out of gas. */
export const MIN_CHARGES_FUNDED = 10n;

/** One chain's line. */
export type ChainStatus = {
  chain_id: number;
  indexed_block: string | null;
  head_block: string | null;
  lag_blocks: string | null;
  progress: number | null;
  eta_s: number | null;
  head_seen_at: string | null;
  last_commit_at: string | null;
  last_reorg_at: string | null;
  last_reorg_depth: string | null;
  deep_reorg_suspected_at: string | null;
  /** Compute units the indexer's RPC client spends an hour (RPC_CU_WEIGHTS); null before a minute of data. */
  rpc_cu_per_hour: number | null;
};

/** The keeper on one chain: balance (null when the RPC did not answer) and its last hour from the index. */
export type KeeperChainStatus = {
  chain_id: number;
  balance_wei: string | null;
  balance: string | null;
  /** Charges that the keeper sent in the last hour (by block time) and that the chain recorded. */
  charges_sent_1h: number;
  /** Of those, the ones that failed on chain (`ChargeFailed`). */
  charges_failed_1h: number;
  /** Charges the balance pays for at the current gas price (CHARGE_GAS each); null when unknown. */
  charges_funded: string | null;
  error: string | null;
};

/** The reasons a renewal is forecast to fail (renewals.md). */
const RENEWAL_REASONS = [
  "AllowanceExpired",
  "InsufficientAllowance",
  "InsufficientBalance",
  "ManagerNotOwner",
] as const;

/** One chain's renewal outlooks that still hold (as `/v0/renewals` shows them): how many are due, how many at risk. */
export type RenewalsAtRiskStatus = {
  chain_id: number;
  due: number;
  at_risk: number;
  by_reason: Record<(typeof RENEWAL_REASONS)[number], number>;
};

/** The whole report; `attention` is empty when nothing needs a person. */
export type StatusReport = {
  generated_at: string;
  chains: ChainStatus[];
  keeper: { address: string; chains: KeeperChainStatus[] } | null;
  webhooks: {
    endpoints: number;
    enabled: number;
    disabled: { id: string; merchant: string; host: string; reason: string | null }[];
    pending_deliveries: number;
    oldest_pending_age_s: number | null;
    /** Ranges of written events in the fan-out outbox, and the age of the oldest one no catch-up holds. */
    queued_ranges: number;
    oldest_ready_range_age_s: number | null;
  };
  /** Renewals whose next charge is forecast to fail (renewals.md), per chain; null while no outlook was computed. */
  renewals_at_risk: RenewalsAtRiskStatus[] | null;
  /** Secondary indexes an initial backfill left out, until it reaches the head (README, Design: Indexer). */
  deferred_indexes: string[];
  attention: string[];
};

/** An RPC client for a chain's URL. */
type ClientOf = (url: string) => PublicClient;

/** Seconds since `d`. */
const ageS = (d: Date, now: number) => Math.max(0, Math.round((now - d.getTime()) / 1000));

/** One chain's status, and what about it needs attention. */
function chainStatus(r: ChainRow, config: Config, now: number): { status: ChainStatus; attention: string[] } {
  const chain = config.indexed.find((c) => c.chainId === r.chainId);
  const staleMs = Math.max(30_000, 10 * (chain?.pollIntervalMs ?? config.POLL_INTERVAL_MS));
  const lag = r.headBlock !== null && r.indexedBlock !== null ? BigInt(r.headBlock) - BigInt(r.indexedBlock) : null;
  const attention: string[] = [];
  const id = `chain ${r.chainId}`;
  if (r.indexedBlock === null) attention.push(`${id} has not been indexed yet`);
  if (!r.headSeenAt || now - r.headSeenAt.getTime() > staleMs) {
    const seen = r.headSeenAt ? `${ageS(r.headSeenAt, now)} s ago` : "never";
    attention.push(`${id} stalled: the indexer last saw its head ${seen} (expected within ${staleMs / 1000} s)`);
  } else if (lag !== null && lag > SYNC_LAG_BLOCKS && r.updatedAt && now - r.updatedAt.getTime() > staleMs) {
    attention.push(`${id} stalled: ${lag} blocks behind and nothing committed for ${ageS(r.updatedAt, now)} s`);
  }
  if (r.deepReorgSuspectedAt)
    attention.push(`${id}: a deep reorg is suspected since ${r.deepReorgSuspectedAt.toISOString()}`);
  return {
    status: {
      chain_id: r.chainId,
      indexed_block: r.indexedBlock,
      head_block: r.headBlock,
      lag_blocks: lag === null ? null : String(lag < 0n ? 0n : lag),
      ...chainProgress(r, config, now),
      head_seen_at: r.headSeenAt?.toISOString() ?? null,
      last_commit_at: r.updatedAt?.toISOString() ?? null,
      last_reorg_at: r.lastReorgAt?.toISOString() ?? null,
      last_reorg_depth: r.lastReorgDepth,
      deep_reorg_suspected_at: r.deepReorgSuspectedAt?.toISOString() ?? null,
      rpc_cu_per_hour: r.rpcCuPerHour,
    },
    attention,
  };
}

/** The keeper's charges of the last hour on one chain, from the index. */
async function keeperHour(sql: Sql, chainId: number, address: string) {
  const [row] = await sql<{ sent: string; failed: string }[]>`
    select count(*) as sent, count(*) filter (where type = 'FAIL') as failed from activity
    where chain_id = ${chainId} and type in ('CHARGE', 'FAIL') and lower(keeper) = ${address.toLowerCase()}
      and block_time >= now() - interval '1 hour'`;
  return { sent: Number(row?.sent ?? 0), failed: Number(row?.failed ?? 0) };
}

/** The keeper's balance on one chain and how many charges it pays for; an RPC failure is reported, not thrown. */
async function keeperFunds(client: PublicClient, address: `0x${string}`) {
  try {
    const [balance, gasPrice] = await Promise.all([client.getBalance({ address }), client.getGasPrice()]);
    const perCharge = CHARGE_GAS * (gasPrice > 0n ? gasPrice : 1n);
    return { balance, funded: balance / perCharge, error: null };
  } catch (err) {
    const e = err as { shortMessage?: string; message?: string };
    return { balance: null, funded: null, error: e.shortMessage ?? e.message ?? String(err) };
  }
}

/** The keeper section (null without KEEPER_PRIVATE_KEY in this environment). */
async function keeperStatus(sql: Sql, config: Config, rows: ChainRow[], clientOf: ClientOf) {
  if (!config.KEEPER_PRIVATE_KEY) return { keeper: null, attention: [] };
  const address = privateKeyToAccount(config.KEEPER_PRIVATE_KEY as `0x${string}`).address;
  const attention: string[] = [];
  // The keeper charges through a processor: permission-only chains have none, and no keeper balance to watch.
  const chains = await Promise.all(
    config.indexed
      .filter((c) => c.processor)
      .map(async (c): Promise<KeeperChainStatus> => {
        const client = clientOf(c.rpcUrl);
        // RPC_URL alone names its chain through the node; the one indexed chain when the node does not answer.
        const chainId =
          c.chainId ?? (await client.getChainId().catch(() => (rows.length === 1 ? rows[0]!.chainId : 0)));
        const [hour, funds] = await Promise.all([keeperHour(sql, chainId, address), keeperFunds(client, address)]);
        if (funds.error) attention.push(`keeper balance on chain ${chainId} unknown: ${funds.error}`);
        else if (funds.funded! < MIN_CHARGES_FUNDED) {
          attention.push(
            `keeper out of gas on chain ${chainId}: ${formatEther(funds.balance!)} pays for ${funds.funded} charges ` +
              `(fewer than ${MIN_CHARGES_FUNDED}) at the current gas price`,
          );
        }
        return {
          chain_id: chainId,
          balance_wei: funds.balance?.toString() ?? null,
          balance: funds.balance === null ? null : formatEther(funds.balance),
          charges_sent_1h: hour.sent,
          charges_failed_1h: hour.failed,
          charges_funded: funds.funded?.toString() ?? null,
          error: funds.error,
        };
      }),
  );
  return { keeper: { address: address.toLowerCase(), chains }, attention };
}

/** A range of the fan-out outbox no catch-up holds is drained within seconds by a running dispatcher. */
const STALE_OUTBOX_S = 300;

/** Endpoints, disabled ones, the pending backlog and the fan-out outbox. */
async function webhookStatus(sql: Sql, now: number) {
  const endpoints = await sql<{ id: string; merchant: string; url: string; enabled: boolean; reason: string | null }[]>`
    select id, merchant, url, enabled, disabled_reason as reason from webhook_endpoints order by created_at, id`;
  const [pending] = await sql<{ n: string; oldest: Date | null }[]>`
    select count(*) as n, min(created_at) as oldest from webhook_deliveries where status = 'pending'`;
  const backlog = await fanOutBacklog(sql);
  const readyAgeS = backlog.oldestReadyAgeS === null ? null : Math.round(backlog.oldestReadyAgeS);
  const disabled = endpoints
    .filter((e) => !e.enabled)
    .map((e) => ({
      id: e.id,
      merchant: e.merchant,
      host: URL.canParse(e.url) ? new URL(e.url).host : "?",
      reason: e.reason,
    }));
  return {
    webhooks: {
      endpoints: endpoints.length,
      enabled: endpoints.length - disabled.length,
      disabled,
      pending_deliveries: Number(pending?.n ?? 0),
      oldest_pending_age_s: pending?.oldest ? ageS(pending.oldest, now) : null,
      queued_ranges: backlog.queued,
      oldest_ready_range_age_s: readyAgeS,
    },
    attention: [
      ...disabled.map((d) => `webhook endpoint ${d.id} (${d.host}) is disabled${d.reason ? `: ${d.reason}` : ""}`),
      ...(readyAgeS !== null && readyAgeS > STALE_OUTBOX_S
        ? [
            `the webhook fan-out outbox has waited ${formatEta(readyAgeS)}: is a process with the webhooks role running?`,
          ]
        : []),
    ],
  };
}

/**
 * The outlooks that still hold, per chain, by the same joins as the API's records (judged for the allocation's current
 * next charge while it is chargeable); null when no outlook is stored at all (the renewal loop has not run yet).
 */
async function renewalsAtRisk(sql: Sql): Promise<RenewalsAtRiskStatus[] | null> {
  const [stored] = await sql<{ any: boolean }[]>`select exists (select 1 from renewal_outlooks) as any`;
  if (!stored!.any) return null;
  const rows = await sql<{ chain_id: number; outlook: string; reason: string | null; n: number }[]>`
    select h.chain_id::int as chain_id, h.outlook, h.reason, count(*)::int as n
    from ${heldOutlooks(sql)}
    group by 1, 2, 3
    order by 1`;
  const out = new Map<number, RenewalsAtRiskStatus>();
  for (const r of rows) {
    let c = out.get(r.chain_id);
    if (!c) {
      const by_reason = Object.fromEntries(RENEWAL_REASONS.map((k) => [k, 0])) as RenewalsAtRiskStatus["by_reason"];
      c = { chain_id: r.chain_id, due: 0, at_risk: 0, by_reason };
      out.set(r.chain_id, c);
    }
    c.due += r.n;
    if (r.outlook !== "at_risk") continue;
    c.at_risk += r.n;
    if (r.reason && r.reason in c.by_reason) c.by_reason[r.reason as (typeof RENEWAL_REASONS)[number]] += r.n;
  }
  return [...out.values()];
}

/**
 * Gathers the report from the database (and the chains' RPCs for the keeper's balance). Chains: every `chains` row,
 * plus configured chains without one.
 */
export async function gatherStatus(
  sql: Sql,
  config: Config,
  clientOf: ClientOf = (url) => publicClientFor(url, config.RPC_TIMEOUT_MS),
  now = Date.now(),
): Promise<StatusReport> {
  const rows = await readChains(sql);
  const attention: string[] = [];
  const chains: ChainStatus[] = [];
  for (const r of rows.sort((a, b) => a.chainId - b.chainId)) {
    const c = chainStatus(r, config, now);
    chains.push(c.status);
    attention.push(...c.attention);
  }
  for (const c of config.indexed) {
    if (c.chainId !== undefined && !rows.some((r) => r.chainId === c.chainId)) {
      attention.push(`chain ${c.chainId} has not been indexed yet`);
    }
  }
  const [k, w, renewals, deferred] = await Promise.all([
    keeperStatus(sql, config, rows, clientOf),
    webhookStatus(sql, now),
    renewalsAtRisk(sql),
    deferredIndexes(sql),
  ]);
  attention.push(...k.attention, ...w.attention);
  return {
    generated_at: new Date(now).toISOString(),
    chains,
    keeper: k.keeper,
    webhooks: w.webhooks,
    renewals_at_risk: renewals,
    deferred_indexes: deferred,
    attention,
  };
}
