/** Subscription allocations of a merchant, with the status computed at query time (docs/api-rules.md "Status"). */
import type { Sql } from "../../../db/client";
import { chainNow, statusJoins, statusSql } from "../../../domain/status";
import {
  allocationId,
  isoFromUnix,
  nextChargeDate,
  toSubscriptionRecord as toRecord,
  type SubscriptionRecordRow,
} from "../../../domain/records";

export { allocationId, isoFromUnix, nextChargeDate };
import { DEADLINE_FAST_MS, DEADLINE_LIST_MS, withDeadline } from "../../deadline";
import { freshnessHeaders, readChains } from "../../chain-state";
import {
  SUBSCRIPTION_CSV_COLUMNS,
  type SubscriptionCsvRow,
  type SubscriptionRecord,
  type SubscriptionStatus,
} from "./model";
import type { ReadDeps } from "../../chain-state";
import {
  closing,
  keysetBatches,
  listContentHeaders,
  listResponse,
  openSnapshot,
  type ListFormat,
  type Snapshot,
} from "../../stream";
import { csvText } from "../../csv";
import { renewalColumn, renewalJoins } from "../../../renewals/sql";
import {
  getPermission,
  permissionPosition,
  selectPermissions,
  toPermissionSubscriptionRecord,
  type PermissionRow,
} from "./permissions";

/** A module allocation's row as the queries below select it: the record's columns, plus what lists need. */
export type ModuleSubscriptionRow = SubscriptionRecordRow & {
  /** List queries only: creation position (the keyset) and the plan token's decimals. */
  block_number?: string;
  log_index?: number;
  token_decimals?: number | null;
};

/** A row of a subscription list: a module allocation, or a spend permission (which has a `hash`). */
export type SubscriptionRow = ModuleSubscriptionRow | PermissionRow;

const isPermission = (r: SubscriptionRow): r is PermissionRow => "hash" in r;

/** The allocation id of a row (a permission's names its hash). */
export function rowAllocationId(r: SubscriptionRow): string {
  return isPermission(r) ? `${r.chain_id}:${r.manager}:${r.hash}` : allocationId(r);
}

/** Which records a list holds (`source`). */
export const SUBSCRIPTION_SOURCES = ["subscription_module", "spend_permission"] as const;

function columns(sql: Sql) {
  return sql`s.chain_id, s.subscription_id, s.module, s.subscriber, s.plan_id, s.max_executions, s.times_executed,
    s.total_spent, s.created_at, s.next_charge_at, s.allowance_expiry, s.paused, s.cancelled,
    coalesce(b.blocked, false) as is_blocked, ${statusSql(sql)} as status, ${renewalColumn(sql)}`;
}

/** The API record of a row (one mapping, in domain/records.ts). */
export function toSubscriptionRecord(r: SubscriptionRow): SubscriptionRecord {
  return isPermission(r) ? toPermissionSubscriptionRecord(r) : toRecord(r);
}

/** Filters and page of a subscription list. */
export type SubscriptionQuery = {
  merchant: string;
  chainId: number;
  status?: SubscriptionStatus;
  limit?: number;
  /** Creation position of the `starting_after` allocation. */
  after?: { blockNumber: string; logIndex: number };
  /** Only allocations created at or below this block: the indexed block the freshness headers name. */
  maxBlock?: string;
  /** Only module allocations, or only spend permissions. */
  source?: (typeof SUBSCRIPTION_SOURCES)[number];
};

/** A merchant's allocations in creation order; `limit + 1` rows at most so the caller can tell a cut page. */
export function listSubscriptions(sql: Sql, q: SubscriptionQuery): Promise<SubscriptionRow[]> {
  return selectSubscriptions(sql, q, q.limit ? q.limit + 1 : undefined);
}

/** A merchant's allocations in creation order (subscriptions_merchant_idx), `rows` at most. */
async function selectModuleSubscriptions(
  sql: Sql,
  q: SubscriptionQuery,
  rows: number | undefined,
): Promise<ModuleSubscriptionRow[]> {
  return withDeadline(
    sql<ModuleSubscriptionRow[]>`
      select ${columns(sql)}, s.block_number, s.log_index, tk.decimals as token_decimals
      from subscriptions s
      cross join ${chainNow(sql, q.chainId)}
      ${statusJoins(sql)}
      ${renewalJoins(sql)}
      left join tokens tk on tk.chain_id = p.chain_id and tk.address = p.token
      where s.merchant = ${q.merchant} and s.chain_id = ${q.chainId}
      ${q.maxBlock !== undefined ? sql`and s.block_number <= ${q.maxBlock}::bigint` : sql``}
      ${q.after ? sql`and (s.block_number, s.log_index) > (${q.after.blockNumber}::bigint, ${q.after.logIndex}::int)` : sql``}
      ${q.status ? sql`and ${statusSql(sql)} = ${q.status}` : sql``}
      order by s.block_number, s.log_index
      ${rows ? sql`limit ${rows}` : sql``}`,
    DEADLINE_LIST_MS,
  );
}

/**
 * A merchant's subscriptions in creation order, `rows` at most: its module allocations and the spend permissions it
 * is the spender of, merged by creation position (block, log index).
 */
export async function selectSubscriptions(
  sql: Sql,
  q: SubscriptionQuery,
  rows: number | undefined,
): Promise<SubscriptionRow[]> {
  const [modules, permissions] = await Promise.all([
    q.source === "spend_permission" ? [] : selectModuleSubscriptions(sql, q, rows),
    q.source === "subscription_module" ? [] : selectPermissions(sql, q, rows),
  ]);
  if (permissions.length === 0) return modules;
  if (modules.length === 0) return permissions;
  const out: SubscriptionRow[] = [];
  let i = 0;
  let j = 0;
  const before = (a: ModuleSubscriptionRow, b: PermissionRow) =>
    BigInt(a.block_number!) < BigInt(b.block_number) ||
    (BigInt(a.block_number!) === BigInt(b.block_number) && a.log_index! < b.log_index);
  while ((rows === undefined || out.length < rows) && (i < modules.length || j < permissions.length)) {
    if (j >= permissions.length || (i < modules.length && before(modules[i]!, permissions[j]!)))
      out.push(modules[i++]!);
    else out.push(permissions[j++]!);
  }
  return out;
}

/** What the CSV columns read from a row. */
export function toSubscriptionCsvRow(r: SubscriptionRow): SubscriptionCsvRow {
  return { ...toSubscriptionRecord(r), token_decimals: r.token_decimals ?? null };
}

/** The CSV attachment name of a merchant's list on a chain. */
export function subscriptionsFilename(merchant: string, chainId: number): string {
  return `subscriptions-${merchant}-${chainId}.csv`;
}

/** A page of allocations as CSV (the route sets no other content headers). */
export function subscriptionsCsvPage(
  rows: SubscriptionRow[],
  merchant: string,
  chainId: number,
  headers: Record<string, string | number>,
): string {
  Object.assign(headers, listContentHeaders("csv", subscriptionsFilename(merchant, chainId)));
  return csvText(SUBSCRIPTION_CSV_COLUMNS, rows.map(toSubscriptionCsvRow));
}

/**
 * Streams every allocation of `q` (JSON array or CSV) in keyset chunks. The freshness row is read first: it
 * replaces the headers already set and bounds the chunks to allocations created at or below its block. Over a pool
 * the freshness row and every chunk are read in one REPEATABLE READ transaction (openSnapshot), so every row is as
 * of X-Indexed-Block (a charge committed mid-way does not show); on PGlite's one session, and beyond half of the
 * pool's connections held by exports at once, the rows are current.
 */
export async function streamSubscriptions(
  deps: Pick<ReadDeps, "readSql" | "config" | "chainState">,
  query: SubscriptionQuery,
  opts: { format: ListFormat; headers: Record<string, string | number>; requestId?: string },
): Promise<Response> {
  const snapshot = await openSnapshot(deps.readSql);
  try {
    return await streamFrom(deps, query, opts, snapshot);
  } catch (err) {
    await snapshot?.close();
    throw err;
  }
}

async function streamFrom(
  deps: Pick<ReadDeps, "readSql" | "config" | "chainState">,
  query: SubscriptionQuery,
  opts: { format: ListFormat; headers: Record<string, string | number>; requestId?: string },
  snapshot: Snapshot | undefined,
): Promise<Response> {
  const sql = snapshot?.sql ?? deps.readSql;
  // Read now, not from the cache: the bound must include every batch committed before this request.
  const chain = snapshot
    ? (await readChains(snapshot.sql)).find((r) => r.chainId === query.chainId)
    : await deps.chainState.fresh(query.chainId);
  const q: SubscriptionQuery = { ...query, maxBlock: chain?.indexedBlock ?? undefined };
  const headers = opts.headers;
  delete headers["x-indexed-block"];
  delete headers["x-indexed-at"];
  freshnessHeaders(headers, chain);
  const batches = keysetBatches({
    after: q.after,
    read: (after, size) => selectSubscriptions(sql, { ...q, after }, size),
    position: (r) => ({ blockNumber: String(r.block_number!), logIndex: r.log_index! }),
  });
  return listResponse({
    format: opts.format,
    batches: snapshot ? closing(batches, snapshot.close) : batches,
    toRecord: toSubscriptionRecord,
    toCsvRow: toSubscriptionCsvRow,
    columns: SUBSCRIPTION_CSV_COLUMNS,
    filename: subscriptionsFilename(q.merchant, q.chainId),
    headers,
    logLevel: deps.config.LOG_LEVEL,
    logFields: { route: "subscriptions", merchant: q.merchant, chain_id: q.chainId, request_id: opts.requestId },
  });
}

/**
 * One allocation of the merchant by on-chain id, or undefined (unknown, or another merchant's): a module allocation,
 * else a spend permission whose uint256(hash) it is (`hash`: only a permission).
 */
export async function getSubscription(
  sql: Sql,
  q: { merchant: string; chainId: number; subscriptionId: string; hash?: boolean },
): Promise<SubscriptionRow | undefined> {
  const row = q.hash ? undefined : await getModuleSubscription(sql, q);
  return row ?? getPermission(sql, q);
}

async function getModuleSubscription(
  sql: Sql,
  q: { merchant: string; chainId: number; subscriptionId: string },
): Promise<ModuleSubscriptionRow | undefined> {
  const [row] = await withDeadline(
    sql<ModuleSubscriptionRow[]>`
      select ${columns(sql)}
      from subscriptions s
      cross join ${chainNow(sql, q.chainId)}
      ${statusJoins(sql)}
      ${renewalJoins(sql)}
      where s.chain_id = ${q.chainId} and s.subscription_id = ${q.subscriptionId} and s.merchant = ${q.merchant}`,
    DEADLINE_FAST_MS,
  );
  return row;
}

/** Creation position of an allocation (or a permission) of the merchant (for `starting_after`), or undefined. */
export async function subscriptionPosition(
  sql: Sql,
  q: { merchant: string; chainId: number; module: string; subscriptionId: string },
): Promise<{ blockNumber: string; logIndex: number } | undefined> {
  return (await modulePosition(sql, q)) ?? permissionPosition(sql, q);
}

async function modulePosition(
  sql: Sql,
  q: { merchant: string; chainId: number; module: string; subscriptionId: string },
): Promise<{ blockNumber: string; logIndex: number } | undefined> {
  const [row] = await withDeadline(
    sql<{ block_number: string; log_index: number }[]>`
      select block_number, log_index from subscriptions
      where chain_id = ${q.chainId} and subscription_id = ${q.subscriptionId}
        and module = ${q.module} and merchant = ${q.merchant}`,
    DEADLINE_FAST_MS,
  );
  return row && { blockNumber: row.block_number, logIndex: row.log_index };
}
