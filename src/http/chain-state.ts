/**
 * What the API knows about each indexed chain (the `chains` rows), cached in memory so that freshness headers and
 * chain_id checks cost no round trip: refreshed after every batch the indexer announces, and at most `ttlMs` old.
 */
import type { Sql } from "../db/client";
import type { Notifier } from "../db/notify";
import type { ChainRegistry } from "../chain/clients";
import type { Config } from "../common/config";
import { DEADLINE_FAST_MS, withDeadline } from "./deadline";
import { InvalidParameterError } from "./errors";

/** One `chains` row as the API uses it. */
export type ChainRow = {
  chainId: number;
  indexedBlock: string | null;
  indexedTime: Date | null;
  headBlock: string | null;
  headSeenAt: Date | null;
  /** Since when the indexer suspects a reorg deeper than its stored window (not yet acted on); null when not. */
  deepReorgSuspectedAt: Date | null;
  startBlock: string;
  /** Blocks per second over the indexer's last progress interval while it backfills; null otherwise. */
  syncBlocksPerSec: number | null;
  /** When the indexer last committed (a batch or a rollback). */
  updatedAt: Date | null;
  lastReorgAt: Date | null;
  /** Indexed blocks the last rollback removed. */
  lastReorgDepth: string | null;
  /** Compute units the indexer's RPC client spends an hour (its last hour); null before its first hour's minute. */
  rpcCuPerHour: number | null;
};

/** Cached view of the `chains` table. */
export type ChainState = {
  /** The row of `chainId` (undefined when the chain has no row yet), at most `ttlMs` old. */
  get: (chainId: number) => Promise<ChainRow | undefined>;
  /** The row of `chainId` read from the table now (it also refreshes the cache): for bounds that must be current. */
  fresh: (chainId: number) => Promise<ChainRow | undefined>;
  /** Forgets the cache; the next `get` reads the table. */
  invalidate: () => void;
  /** Stops listening to the notifier. */
  stop: () => Promise<void>;
  /** Resolves once the notifier subscription is in place (LISTEN on Postgres) or has failed; at once without one. */
  ready: Promise<void>;
};

/** What the read routes' services need: the database, the chain cache, the chain registry and the config. */
/** What index reads need: the database they read (the replica when there is one) and the chains' state. */
export type ReadDeps = { readSql: Sql; chainState: ChainState; chains: ChainRegistry; config: Config };

/** Reads every `chains` row (a handful: one per indexed chain). */
export async function readChains(sql: Sql): Promise<ChainRow[]> {
  const rows = await withDeadline(
    sql<
      {
        chain_id: string;
        indexed_block: string | null;
        indexed_time: Date | null;
        head_block: string | null;
        head_seen_at: Date | null;
        deep_reorg_suspected_at: Date | null;
        start_block: string;
        sync_blocks_per_s: number | null;
        updated_at: Date | null;
        last_reorg_at: Date | null;
        last_reorg_depth: string | null;
        rpc_cu_per_hour: number | null;
      }[]
    >`
      select chain_id, indexed_block, indexed_time, head_block, head_seen_at, deep_reorg_suspected_at, start_block,
        sync_blocks_per_s, updated_at, last_reorg_at, last_reorg_depth, rpc_cu_per_hour
      from chains`,
    DEADLINE_FAST_MS,
  );
  return rows.map((r) => ({
    chainId: Number(r.chain_id),
    indexedBlock: r.indexed_block,
    indexedTime: r.indexed_time,
    headBlock: r.head_block,
    headSeenAt: r.head_seen_at,
    deepReorgSuspectedAt: r.deep_reorg_suspected_at,
    startBlock: r.start_block,
    syncBlocksPerSec: r.sync_blocks_per_s === null ? null : Number(r.sync_blocks_per_s),
    updatedAt: r.updated_at,
    lastReorgAt: r.last_reorg_at,
    lastReorgDepth: r.last_reorg_depth,
    rpcCuPerHour: r.rpc_cu_per_hour === null ? null : Number(r.rpc_cu_per_hour),
  }));
}

/** Creates the cache; subscribes to the notifier when there is one (a failure to subscribe only disables it). */
export function createChainState(opts: { sql: Sql; notifier?: Notifier; ttlMs?: number }): ChainState {
  const ttlMs = opts.ttlMs ?? 1000;
  let rows = new Map<number, ChainRow>();
  let loadedAt = -Infinity;
  let inflight: Promise<void> | undefined;
  let unsubscribe: (() => Promise<void>) | undefined;
  let stopped = false;

  const refresh = () =>
    (inflight ??= readChains(opts.sql)
      .then((list) => {
        rows = new Map(list.map((r) => [r.chainId, r]));
        loadedAt = performance.now();
      })
      .finally(() => {
        inflight = undefined;
      }));

  const subscribed = opts.notifier
    ?.subscribe(() => {
      loadedAt = -Infinity;
    })
    .then(async (unsub) => {
      if (stopped) await unsub();
      else unsubscribe = unsub;
    })
    .catch(() => {
      // The TTL still bounds staleness without notifications.
    });

  return {
    ready: subscribed ?? Promise.resolve(),
    get: async (chainId) => {
      if (performance.now() - loadedAt > ttlMs) await refresh();
      return rows.get(chainId);
    },
    fresh: async (chainId) => {
      const list = await readChains(opts.sql);
      rows = new Map(list.map((r) => [r.chainId, r]));
      loadedAt = performance.now();
      return rows.get(chainId);
    },
    invalidate: () => {
      loadedAt = -Infinity;
    },
    stop: async () => {
      stopped = true;
      await unsubscribe?.();
    },
  };
}

/** Freshness headers of a chain: `X-Indexed-Block` and `X-Indexed-At` (omitted before the first indexed batch). */
export function freshnessHeaders(
  headers: Record<string, string | number>,
  row: { indexedBlock: string | null; indexedTime: Date | null } | undefined,
): void {
  if (!row?.indexedBlock) return;
  headers["x-indexed-block"] = row.indexedBlock;
  if (row.indexedTime) headers["x-indexed-at"] = row.indexedTime.toISOString();
}

/**
 * Resolves the chain a request reads: it must be configured (RPC_URL / CHAIN_ID / RPC_URL_<id>) or have indexed
 * data; anything else is a 400 on `chain_id`. Returns its cached row (undefined before the first batch).
 */
export async function resolveChain(deps: ReadDeps, chainId: number): Promise<ChainRow | undefined> {
  const row = await deps.chainState.get(chainId);
  if (!row && !isConfiguredChain(deps, chainId)) {
    throw new InvalidParameterError("chain_id", `chain ${chainId} is not indexed by this service`);
  }
  return row;
}

/** Whether the process is configured for `chainId` (the indexed chain or an extra RPC endpoint). */
export function isConfiguredChain(deps: { chains: ChainRegistry }, chainId: number): boolean {
  return deps.chains.defaultChainId === chainId || deps.chains.chainIds().includes(chainId);
}
