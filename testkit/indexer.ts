import { publicClientFor } from "../src/chain/clients";
import type { Db, Sql } from "../src/db/client";
import type { Notifier } from "../src/db/notify";
import { createIndexer, type IndexerOptions, type IndexerStatus, type IndexerTuning } from "../src/indexer";
import type { IndexerHook } from "../src/indexer/hooks";
import { eventsHook, type OnEvents } from "../src/events/hook";
import type { TestChain } from "./chain";
import type { SpendPermissionSource } from "../src/common/config";

/** Options of {@link testIndexer}: the node (default the chain's own; a fault proxy's), confirmations, poll interval… */
export type TestIndexerOptions = Partial<Omit<IndexerOptions, "sql" | "db" | "config">> & {
  confirmations?: number;
  pollMs?: number;
  /** Index the Spend Permission manager too. */
  spendPermissions?: SpendPermissionSource;
  /** null: index no processor (a permission-only chain, with `spendPermissions`); default the chain's. */
  processor?: string | null;
  /** Follow the heads this WebSocket URL pushes (RPC_WS_URL). */
  wsUrl?: string;
};

/** An indexer of the test chain's processor from its deploy block into `db` (not started). */
export function testIndexer(
  db: { sql: Sql; kind?: Db["kind"] },
  chain: Pick<TestChain, "processor" | "startBlock" | "chainId" | "rpcUrl">,
  opts: TestIndexerOptions = {},
) {
  const {
    confirmations = 0,
    pollMs = 20,
    client = publicClientFor(chain.rpcUrl),
    spendPermissions,
    processor = chain.processor,
    wsUrl,
    ...rest
  } = opts;
  return createIndexer({
    sql: db.sql,
    db: db.kind ? { kind: db.kind } : undefined,
    client,
    config: {
      PROCESSOR_ADDRESS: processor?.toLowerCase(),
      START_BLOCK: Number(chain.startBlock),
      CONFIRMATIONS: confirmations,
      POLL_INTERVAL_MS: pollMs,
      chainId: chain.chainId,
      spendPermissions,
      wsUrl,
    },
    ...rest,
  });
}

/** Runs a {@link testIndexer} until it has committed `block`, then stops it; returns it (for its status). */
export async function indexTo(
  db: { sql: Sql; kind?: Db["kind"] },
  chain: Pick<TestChain, "processor" | "startBlock" | "chainId" | "rpcUrl">,
  block: bigint,
  opts: TestIndexerOptions = {},
) {
  const indexer = testIndexer(db, chain, opts);
  try {
    await indexer.start();
    await indexer.waitForBlock(block, 60_000);
  } finally {
    await indexer.stop();
  }
  return indexer;
}

/** Options of {@link indexOnce}. */
export type IndexOnceOptions = {
  db?: Pick<Db, "kind">;
  startBlock?: number | bigint;
  confirmations?: number;
  chainId?: number;
  timeoutMs?: number;
  tuning?: IndexerTuning;
  notifier?: Notifier;
  hooks?: IndexerHook[];
};

/**
 * Runs the indexer on `sql` until it has caught up with the chain's current head (reorgs included), then stops
 * it. Returns its final status; throws (with the indexer's last error) when it cannot catch up in time.
 */
export async function indexOnce(
  sql: Sql,
  rpcUrl: string,
  processor: string,
  opts: IndexOnceOptions = {},
): Promise<IndexerStatus> {
  const client = publicClientFor(rpcUrl);
  const chainId = opts.chainId ?? (await client.getChainId());
  const confirmations = opts.confirmations ?? 0;
  const indexer = createIndexer({
    sql,
    db: opts.db,
    client,
    config: {
      PROCESSOR_ADDRESS: processor.toLowerCase(),
      START_BLOCK: Number(opts.startBlock ?? 0),
      CONFIRMATIONS: confirmations,
      POLL_INTERVAL_MS: 20,
      chainId,
    },
    tuning: opts.tuning,
    notifier: opts.notifier,
    hooks: opts.hooks,
  });
  const head = await client.getBlockNumber({ cacheTime: 0 });
  const target = head - BigInt(confirmations);
  const deadline = Date.now() + (opts.timeoutMs ?? 30_000);
  await indexer.start();
  try {
    // A completed poll after start (which checks for reorgs) that reached the target on the chain's own branch.
    for (;;) {
      const s = indexer.status();
      if (
        s.lastSuccessAt !== null &&
        (s.indexedBlock !== null ? BigInt(s.indexedBlock) >= target : target < BigInt(opts.startBlock ?? 0))
      ) {
        const [row] = await sql<{ indexed_block: string | null; indexed_hash: string | null }[]>`
          select indexed_block, indexed_hash from chains where chain_id = ${chainId}`;
        if (!row?.indexed_block) return s;
        const block = await client.getBlock({ blockNumber: BigInt(row.indexed_block) }).catch(() => null);
        if (block && block.hash.toLowerCase() === row.indexed_hash) return s;
      }
      if (Date.now() > deadline) {
        throw new Error(`indexOnce: block ${target} not indexed in time (status ${JSON.stringify(s)})`);
      }
      await Bun.sleep(10);
    }
  } finally {
    await indexer.stop();
  }
}

/**
 * Makes the last statement of every indexer batch (the cursor's move, after the hooks) fail with "injected fault"
 * until `disarm()`: a transaction that dies at its very end.
 */
export async function failCursorMoves(sql: Sql): Promise<{ disarm: () => Promise<void> }> {
  await sql`create table fault_flag (armed boolean not null)`;
  await sql`insert into fault_flag values (true)`;
  await sql.unsafe(`create function fail_cursor() returns trigger language plpgsql as $$
    begin
      if (select armed from fault_flag) and new.indexed_block is not null then
        raise exception 'injected fault';
      end if;
      return new;
    end $$`);
  await sql.unsafe(`create trigger fail_cursor before update on chains for each row execute function fail_cursor()`);
  return {
    disarm: async () => {
      await sql`update fault_flag set armed = false`;
    },
  };
}

/**
 * Indexes the test chain to its head once with the event log on, its ranges handed to `onEvents` (the fan-out in the
 * batch's transaction, or the outbox). Idle expiries are left out (`now` 0): their ids depend on the block indexed
 * when they are found.
 */
export function indexEventLog(
  db: Db,
  chain: Pick<TestChain, "rpcUrl" | "processor" | "startBlock">,
  onEvents?: OnEvents,
) {
  return indexOnce(db.sql, chain.rpcUrl, chain.processor, {
    db,
    startBlock: chain.startBlock,
    hooks: [eventsHook({ onEvents, now: () => 0 })],
  });
}
