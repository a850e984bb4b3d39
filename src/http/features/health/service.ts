/** Readiness: the database answers and the index keeps up with the chain head. */
import type { Sql } from "../../../db/client";
import type { Config } from "../../../common/config";
import { readChains, type ChainRow } from "../../chain-state";
import { SYNC_LAG_BLOCKS, syncProgress } from "../../../domain/progress";

/** Per-chain readiness facts, as /readyz reports them. */
export type ChainReadiness = {
  chain_id: number;
  indexed_block: string | null;
  indexed_at: string | null;
  head_block: string | null;
  head_seen_at: string | null;
  lag_blocks: string | null;
  /** Since when a reorg deeper than the indexer's stored window is suspected (it waits for confirmation). */
  deep_reorg_suspected_at: string | null;
  /** Share of [START_BLOCK, head − CONFIRMATIONS] indexed, 0 to 1 (4 decimals); 1 once within a few blocks. */
  progress: number | null;
  /** Seconds until caught up at the indexer's current rate: 0 when caught up, null when unknown. */
  eta_s: number | null;
};

/** What {@link describe} needs to know of the configuration. */
type Settings = Pick<Config, "POLL_INTERVAL_MS"> & Partial<Pick<Config, "indexed" | "CONFIRMATIONS">>;

/** The verdict of {@link readiness}. */
export type Readiness = { ready: boolean; reasons: string[]; chains: ChainReadiness[] };

/** How old `head_seen_at` may be: ten poll intervals, and never less than 30 s. */
function headStaleAfterMs(config: Pick<Config, "POLL_INTERVAL_MS">): number {
  return Math.max(30_000, 10 * config.POLL_INTERVAL_MS);
}

/**
 * Progress and ETA of a chain row: the indexer's stored rate, trusted only while it still commits (its row changed
 * within the head-staleness window).
 */
export function chainProgress(
  r: ChainRow,
  config: Settings,
  now = Date.now(),
): Pick<ChainReadiness, "progress" | "eta_s"> {
  if (r.headBlock === null) return { progress: null, eta_s: null };
  const chain = config.indexed?.find((c) => c.chainId === r.chainId);
  const target = BigInt(r.headBlock) - BigInt(chain?.confirmations ?? config.CONFIRMATIONS ?? 0);
  const indexed = r.indexedBlock === null ? null : BigInt(r.indexedBlock);
  const behind = target - (indexed ?? BigInt(r.startBlock) - 1n);
  if (behind <= SYNC_LAG_BLOCKS) return { progress: 1, eta_s: 0 };
  const fresh =
    r.updatedAt !== null &&
    now - r.updatedAt.getTime() <=
      headStaleAfterMs({ POLL_INTERVAL_MS: chain?.pollIntervalMs ?? config.POLL_INTERVAL_MS });
  const p = syncProgress(BigInt(r.startBlock), indexed, target, fresh ? r.syncBlocksPerSec : null);
  return { progress: Math.floor(p.fraction * 10_000) / 10_000, eta_s: p.etaS === null ? null : Math.ceil(p.etaS) };
}

function describe(r: ChainRow, config: Settings, now: number): ChainReadiness {
  const lag = r.headBlock !== null && r.indexedBlock !== null ? BigInt(r.headBlock) - BigInt(r.indexedBlock) : null;
  return {
    chain_id: r.chainId,
    indexed_block: r.indexedBlock,
    indexed_at: r.indexedTime?.toISOString() ?? null,
    head_block: r.headBlock,
    head_seen_at: r.headSeenAt?.toISOString() ?? null,
    lag_blocks: lag === null ? null : String(lag < 0n ? 0n : lag),
    deep_reorg_suspected_at: r.deepReorgSuspectedAt?.toISOString() ?? null,
    ...chainProgress(r, config, now),
  };
}

/**
 * Ready when the database answers and every indexed chain (`chainIds`) is within READY_MAX_LAG_BLOCKS of the head
 * its indexer last observed, and that observation is recent (ten of that chain's poll intervals, at least 30 s).
 * Throws what the database throws when it is down.
 */
export async function readiness(
  sql: Sql,
  config: Pick<Config, "READY_MAX_LAG_BLOCKS"> & Settings,
  chainIds: number | number[],
  now = Date.now(),
): Promise<Readiness> {
  const rows = await readChains(sql);
  const chains = rows.map((r) => describe(r, config, now));
  const reasons: string[] = [];
  for (const chainId of Array.isArray(chainIds) ? chainIds : [chainIds]) {
    const pollMs = config.indexed?.find((c) => c.chainId === chainId)?.pollIntervalMs ?? config.POLL_INTERVAL_MS;
    reasons.push(
      ...chainReasons(
        rows.find((r) => r.chainId === chainId),
        chainId,
        config,
        pollMs,
        now,
      ),
    );
  }
  return { ready: reasons.length === 0, reasons, chains };
}

/** Why one chain is not ready (empty when it is). */
function chainReasons(
  row: ChainRow | undefined,
  chainId: number,
  config: Pick<Config, "READY_MAX_LAG_BLOCKS">,
  pollMs: number,
  now: number,
): string[] {
  const reasons: string[] = [];
  if (!row || row.indexedBlock === null) return [`chain ${chainId} has not been indexed yet`];
  const lag = row.headBlock === null ? null : BigInt(row.headBlock) - BigInt(row.indexedBlock);
  if (lag === null) reasons.push(`the indexer has not observed the head of chain ${chainId}`);
  else if (lag > BigInt(config.READY_MAX_LAG_BLOCKS)) {
    reasons.push(`chain ${chainId} is ${lag} blocks behind the head (at most ${config.READY_MAX_LAG_BLOCKS})`);
  }
  if (row.deepReorgSuspectedAt) {
    reasons.push(
      `chain ${chainId} disagrees with every stored block since ${row.deepReorgSuspectedAt.toISOString()}: ` +
        "a deep reorg is suspected and waits for confirmation",
    );
  }
  const staleMs = headStaleAfterMs({ POLL_INTERVAL_MS: pollMs });
  if (!row.headSeenAt || now - row.headSeenAt.getTime() > staleMs) {
    reasons.push(`the indexer has not observed the head of chain ${chainId} in the last ${staleMs / 1000} s`);
  }
  return reasons;
}
