/**
 * The Spend Permission source of a batch (spend-permissions spec §6): the manager's logs of the batch's range,
 * decoded for the configured spenders, `revokedBy` resolved from the revoking transaction (stored in the event's
 * args, so a replay never asks the node again), timestamps and block hashes checked against the headers, and the
 * events merged with the protocol's in chain order.
 */
import type { PublicClient } from "viem";
import { ConfigError, type SpendPermissionSource } from "../common/config";
import type { Q } from "../db/query";
import { getHeaders, getLogs, withRetry, type Header, type RetryPolicy } from "../chain/rpc";
import { NATIVE_TOKEN, revokedBy } from "../domain/spend-permission";
import type { TokenMeta } from "./tokens";
import { bloomMayContain } from "./bloom";
import { ChainBehindError, RangeRefusedError, ReorgDetectedError, RpcUnavailableError } from "./errors";
import type { BatchEvent, PreparedBatch } from "./fetch";
import type { DecodedEvent, RawLog } from "./decode";
import {
  decodeSpendPermissionLog,
  parseSpenders,
  SPEND_PERMISSION_TOPICS,
  spendPermissionFilters,
  type SpenderSet,
} from "./spend-permissions";

/** The source as the indexer uses it. */
export type SpendPermissionIndexing = {
  manager: string;
  spenders: SpenderSet;
  startBlock: bigint;
  graceS: number;
  entryPoints: string[];
  nativeSymbol?: string;
};

/** The indexing view of a configured source (undefined: the chain has none). */
export function spendPermissionIndexing(
  source: SpendPermissionSource | undefined,
): SpendPermissionIndexing | undefined {
  if (!source) return undefined;
  return {
    manager: source.manager.toLowerCase(),
    spenders: source.spenders === "*" ? "*" : parseSpenders(source.spenders.join(",")),
    startBlock: BigInt(source.startBlock),
    graceS: source.graceS,
    entryPoints: source.entryPoints,
    nativeSymbol: source.nativeSymbol,
  };
}

/** Chain order of logs: by block, then log index. */
const byPosition = (a: DecodedEvent, b: DecodedEvent) =>
  a.blockNumber === b.blockNumber ? a.logIndex - b.logIndex : a.blockNumber < b.blockNumber ? -1 : 1;

/** getLogs of [from, to] that halves its range on refusal. */
async function logsSplit(
  client: PublicClient,
  filter: { address: string[]; topics: (string[] | null)[] },
  from: bigint,
  to: bigint,
  policy?: RetryPolicy,
): Promise<RawLog[]> {
  try {
    return await getLogs(client, filter, from, to, policy);
  } catch (err) {
    if (!(err instanceof RangeRefusedError)) throw err;
    if (from === to) throw new RpcUnavailableError(`eth_getLogs refused a single block (${from}): ${err.message}`);
    const mid = (from + to) / 2n;
    const left = await logsSplit(client, filter, from, mid, policy);
    return left.concat(await logsSplit(client, filter, mid + 1n, to, policy));
  }
}

/** Who sent a Revoked log's transaction, from its receipt and the transaction itself (§6.3). */
async function resolveRevokedBy(
  client: PublicClient,
  ev: DecodedEvent,
  entryPoints: string[],
  policy?: RetryPolicy,
): Promise<string> {
  const hash = ev.txHash as `0x${string}`;
  const [receipt, tx] = await Promise.all([
    withRetry("eth_getTransactionReceipt", () => client.getTransactionReceipt({ hash }), policy),
    withRetry("eth_getTransactionByHash", () => client.getTransaction({ hash }), policy),
  ]);
  if (receipt.blockHash.toLowerCase() !== ev.blockHash) {
    throw new ReorgDetectedError(`the receipt of ${ev.txHash} is from another fork`);
  }
  return revokedBy({
    revokedLogIndex: ev.logIndex,
    account: String(ev.args.account),
    spender: String(ev.args.spender),
    logs: receipt.logs.map((l) => ({ address: l.address, topics: l.topics, logIndex: l.logIndex })),
    txFrom: tx.from,
    txTo: tx.to ?? null,
    entryPoints,
  });
}

/**
 * The manager's events of [from, to] for the configured spenders (nothing below the source's start block), in chain
 * order, with block times and `revokedBy` on Revoked.
 */
export async function fetchSpendPermissionEvents(
  client: PublicClient,
  sp: SpendPermissionIndexing,
  from: bigint,
  to: bigint,
  policy?: RetryPolicy,
): Promise<DecodedEvent[]> {
  const low = from > sp.startBlock ? from : sp.startBlock;
  if (low > to) return [];
  const filters = spendPermissionFilters(sp.manager, sp.spenders);
  const lists = await Promise.all(filters.map((f) => logsSplit(client, f, low, to, policy)));
  const events: DecodedEvent[] = [];
  for (const log of lists.flat()) {
    const ev = decodeSpendPermissionLog(log, sp.manager, sp.spenders);
    if (ev) events.push(ev);
  }
  const seen = new Set<string>();
  // The filters' answers are concatenated: put back in chain order (a Used before the Revoked of its permission).
  const unique = events
    .filter((e) => {
      const key = `${e.blockNumber}:${e.logIndex}`;
      return seen.has(key) ? false : (seen.add(key), true);
    })
    .sort(byPosition);
  for (const ev of unique) {
    if (ev.name === "SpendPermissionRevoked") {
      ev.args.revokedBy = await resolveRevokedBy(client, ev, sp.entryPoints, policy);
    }
  }
  return unique;
}

/**
 * Whether headers already read (the batch's window, its cursor, `known`) show that no block of the batch's range
 * from the source's start holds a log of the manager. A block without a header or bloom in hand rules out nothing.
 */
function bloomsRuleOutManager(
  sp: SpendPermissionIndexing,
  batch: PreparedBatch,
  known?: ReadonlyMap<bigint, Header>,
): boolean {
  const low = batch.from > sp.startBlock ? batch.from : sp.startBlock;
  if (low > batch.to) return true;
  const headers = new Map<bigint, Header>(known ?? []);
  for (const h of batch.windowHeaders) headers.set(h.number, h);
  headers.set(batch.toHeader.number, batch.toHeader);
  for (let n = low; n <= batch.to; n++) {
    const bloom = headers.get(n)?.logsBloom;
    if (!bloom || bloomMayContain(bloom, sp.manager)) return false;
  }
  return true;
}

/**
 * Adds the manager's events of the batch's range to `batch` in chain order (by block, then log index), checking
 * each log's block hash against the chain's header of that number and filling its time. The manager's
 * `eth_getLogs` are skipped when the blooms of headers in hand (`polled`: read in this poll) rule it out in every
 * block of the range (a bloom has false positives, never false negatives).
 */
export async function withSpendPermissionEvents(
  client: PublicClient,
  sp: SpendPermissionIndexing | undefined,
  batch: PreparedBatch,
  policy?: RetryPolicy,
  polled?: ReadonlyMap<bigint, Header>,
): Promise<PreparedBatch> {
  if (!sp || bloomsRuleOutManager(sp, batch, polled)) return batch;
  const found = await fetchSpendPermissionEvents(client, sp, batch.from, batch.to, policy);
  if (found.length === 0) return batch;
  const known = new Map<bigint, { hash: string; timestamp: number }>();
  for (const h of batch.windowHeaders) known.set(h.number, h);
  known.set(batch.toHeader.number, batch.toHeader);
  for (const ev of batch.events) known.set(ev.blockNumber, { hash: ev.blockHash, timestamp: ev.blockTime });
  const missing = [...new Set(found.map((e) => e.blockNumber))].filter((n) => !known.has(n));
  for (const [n, h] of await getHeaders(client, missing, policy)) {
    if (!h) throw new ChainBehindError(`block ${n} is not available from the node yet`);
    known.set(n, h);
  }
  for (const ev of found) {
    const h = known.get(ev.blockNumber)!;
    if (h.hash !== ev.blockHash) throw new ReorgDetectedError(`logs of block ${ev.blockNumber} are from another fork`);
    ev.blockTime = h.timestamp;
  }
  const events = [...batch.events, ...(found as BatchEvent[])].sort(byPosition);
  return { ...batch, events };
}

/** The stored form of a spender set: sorted addresses, comma-separated, or `*`. */
export const spenderList = (spenders: SpenderSet) => (spenders === "*" ? "*" : [...spenders].sort().join(","));

/**
 * At start: checks that the manager has code (a ConfigError naming the variable otherwise) and that no spender
 * indexed before was removed from the configuration (its rows would stay: a ConfigError naming it), then records the
 * source in the chain's row (manager, spenders, start block, grace), which the API reads for the status rule.
 * Returns the spenders added since the last start (all of them when none is recorded; null: none), to be caught up.
 */
export async function recordSpendPermissionSource(
  q: Q,
  client: PublicClient,
  chainId: number,
  sp: SpendPermissionIndexing | undefined,
  policy?: RetryPolicy,
): Promise<SpenderSet | null> {
  if (!sp) return null;
  const code = await withRetry("eth_getCode", () => client.getCode({ address: sp.manager as `0x${string}` }), policy);
  if (!code || code === "0x") {
    throw new ConfigError(`SPEND_PERMISSION_MANAGER=${sp.manager} has no code on chain ${chainId}`);
  }
  const [row] = await q<{ spenders: string | null; manager: string | null }[]>`
    select spend_permission_spenders as spenders, spend_permission_manager as manager from chains
    where chain_id = ${chainId}`;
  if (row?.manager && row.manager !== sp.manager) {
    throw new ConfigError(
      `SPEND_PERMISSION_MANAGER=${sp.manager} differs from the indexed manager ${row.manager} on chain ${chainId}`,
    );
  }
  const stored = row?.spenders ? parseSpenders(row.spenders) : null;
  let added: SpenderSet | null = null;
  // No spender set recorded: the source's first start (maybe on a chain indexed before without it), or every spender
  // was forgotten (`sp:forget`): all the configured spenders are caught up to the cursor (nothing before a first batch).
  if (stored === null) added = sp.spenders;
  else {
    if (stored === "*" && sp.spenders !== "*") {
      throw new ConfigError(`SPEND_PERMISSION_SPENDERS no longer holds * (every spender) on chain ${chainId}`);
    }
    if (stored !== "*") {
      const removed = [...stored].filter((s) => sp.spenders !== "*" && !sp.spenders.has(s));
      if (removed.length > 0) {
        throw new ConfigError(
          `SPEND_PERMISSION_SPENDERS no longer names ${removed.join(", ")} on chain ${chainId}: clear its rows first`,
        );
      }
      added = sp.spenders === "*" ? "*" : new Set([...sp.spenders].filter((s) => !stored.has(s)));
      if (added !== "*" && added.size === 0) added = null;
    }
  }
  // Added spenders are recorded with their history, by the catch-up's transaction (a crash before it repeats it).
  const spenders = added ? row!.spenders : spenderList(sp.spenders);
  await q`update chains set spend_permission_manager = ${sp.manager}, spend_permission_spenders = ${spenders},
      spend_permission_start_block = ${sp.startBlock.toString()}, spend_permission_grace_s = ${sp.graceS}
    where chain_id = ${chainId}`;
  return added;
}

/**
 * The tokens of a batch's Approved logs: ERC-20s not known yet join `wanted` (read by `symbol()`/`decimals()` as plan
 * tokens are); the native token is never called — its metadata is returned from the configuration, else the chain's
 * viem definition, else ETH, with 18 decimals. `known`: null to take every token again (after a rollback).
 */
export function permissionTokens(
  sp: SpendPermissionIndexing | undefined,
  client: PublicClient,
  events: readonly DecodedEvent[],
  wanted: Set<string>,
  known: ReadonlySet<string> | null,
): TokenMeta[] {
  if (!sp) return [];
  const native = NATIVE_TOKEN.toLowerCase();
  let nativeSeen = false;
  for (const ev of events) {
    if (ev.name !== "SpendPermissionApproved") continue;
    const token = String(ev.args.token);
    if (known?.has(token)) continue;
    if (token === native) nativeSeen = true;
    else wanted.add(token);
  }
  if (!nativeSeen) return [];
  const symbol = sp.nativeSymbol ?? client.chain?.nativeCurrency.symbol ?? "ETH";
  return [{ address: native, symbol, decimals: 18 }];
}

/**
 * Orphan lookup (§6.2): the Approved logs of `hashes` before the source's start block (a Used of a configured spender
 * whose permission was approved earlier), by `topic1 = hash`, with their block times. Charges before the start block
 * stay uncounted.
 */
export async function fetchEarlierApprovals(
  client: PublicClient,
  sp: SpendPermissionIndexing,
  hashes: string[],
  policy?: RetryPolicy,
): Promise<DecodedEvent[]> {
  if (hashes.length === 0 || sp.startBlock === 0n) return [];
  const filter = { address: [sp.manager], topics: [[SPEND_PERMISSION_TOPICS.approved], hashes] };
  const events: DecodedEvent[] = [];
  for (const log of await logsSplit(client, filter, 0n, sp.startBlock - 1n, policy)) {
    const ev = decodeSpendPermissionLog(log, sp.manager, sp.spenders);
    if (ev) events.push(ev);
  }
  const missing = [...new Set(events.filter((e) => e.blockTime === null).map((e) => e.blockNumber))];
  const headers = await getHeaders(client, missing, policy);
  for (const ev of events) {
    if (ev.blockTime !== null) continue;
    const h = headers.get(ev.blockNumber);
    if (!h) throw new ChainBehindError(`block ${ev.blockNumber} is not available from the node yet`);
    ev.blockTime = h.timestamp;
  }
  return events;
}
