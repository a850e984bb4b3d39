import type { PublicClient } from "viem";
import { decodeLog, moduleTopics, type DecodedEvent, type RawLog } from "./decode";
import { eachBounded } from "../common/async";
import { moduleOfEvent } from "../domain/attribution";
import { bloomMayContain } from "./bloom";
import {
  ChainBehindError,
  LogsInDoubtError,
  RangeRefusedError,
  ReorgDetectedError,
  RpcUnavailableError,
} from "./errors";
import { getHeaders, getLogs, getLogsByHash, type Header, type RetryPolicy } from "../chain/rpc";
import type { Cursor } from "./store";

/** Default: above this many modules, module logs are fetched by topic (no address list) and filtered here. */
export const TOPIC_MODE_MODULES = 500;

/** Raw logs of one range, and which module addresses they cover. */
export type FetchedLogs = {
  from: bigint;
  to: bigint;
  processorLogs: RawLog[];
  moduleLogs: RawLog[];
  /** Module addresses whose logs were requested, or "all" when fetched by topic. */
  queried: Set<string> | "all";
  /** Headers read ahead for the logs lacking a timestamp, while earlier batches were written. */
  headers?: Promise<Map<bigint, Header | null>>;
};

/** A decoded event whose block timestamp is known. */
export type BatchEvent = DecodedEvent & { blockTime: number };

/** A fully prepared batch: decoded events in chain order with timestamps, and the headers to keep. */
export type PreparedBatch = {
  from: bigint;
  to: bigint;
  events: BatchEvent[];
  /** Last block whose logs are known (≥ `to`: the blocks after `to` up to it hold none). */
  covered: bigint;
  /** Header of `to`: the new cursor. */
  toHeader: Header;
  /** Headers of the range that fall in the reorg window below the target (stored in `blocks`). */
  windowHeaders: Header[];
};

/**
 * Fetches the logs of the processor and of the modules known now: one `eth_getLogs` for all their addresses
 * (one scan of the range), or, past `addressLimit` modules, the processor by address and modules by topic.
 */
export async function fetchLogs(
  client: PublicClient,
  processor: string,
  modules: Iterable<string>,
  from: bigint,
  to: bigint,
  policy?: RetryPolicy,
  addressLimit = TOPIC_MODE_MODULES,
): Promise<FetchedLogs> {
  const known = [...modules];
  if (known.length > addressLimit) {
    const [processorLogs, moduleLogs] = await Promise.all([
      getLogs(client, { address: [processor] }, from, to, policy),
      getLogs(client, { topics: [moduleTopics] }, from, to, policy),
    ]);
    return { from, to, processorLogs, moduleLogs, queried: "all" };
  }
  const logs = await getLogs(client, { address: [processor, ...known] }, from, to, policy);
  const processorLogs: RawLog[] = [];
  const moduleLogs: RawLog[] = [];
  for (const log of logs) (log.address.toLowerCase() === processor ? processorLogs : moduleLogs).push(log);
  return { from, to, processorLogs, moduleLogs, queried: new Set(known) };
}

/** Reads ahead, in the background, the headers of the blocks whose logs lack a timestamp. */
export function readHeadersAhead(client: PublicClient, fetched: FetchedLogs, policy?: RetryPolicy): void {
  const blocks = new Set<bigint>();
  for (const list of [fetched.processorLogs, fetched.moduleLogs])
    for (const log of list) if (!log.blockTimestamp && log.blockNumber) blocks.add(BigInt(log.blockNumber));
  if (blocks.size === 0) return;
  fetched.headers = getHeaders(client, [...blocks], policy);
  fetched.headers.catch(() => {});
}

/** How many logs a fetched range holds. */
export const logCount = (f: FetchedLogs) => f.processorLogs.length + f.moduleLogs.length;

/**
 * Cuts a fetched range into consecutive sub-ranges of at most `maxLogs` logs each (at block boundaries; one
 * block is never split), so a dense range that came back in one answer is still written in bounded batches.
 */
export function splitFetched(fetched: FetchedLogs, maxLogs: number): FetchedLogs[] {
  if (logCount(fetched) <= maxLogs) return [fetched];
  const perBlock = new Map<number, number>();
  for (const list of [fetched.processorLogs, fetched.moduleLogs]) {
    for (const log of list) {
      const n = Number(log.blockNumber);
      perBlock.set(n, (perBlock.get(n) ?? 0) + 1);
    }
  }
  const starts: bigint[] = [fetched.from];
  let acc = 0;
  for (const n of [...perBlock.keys()].sort((a, b) => a - b)) {
    const count = perBlock.get(n)!;
    if (acc > 0 && acc + count > maxLogs && BigInt(n) > starts.at(-1)!) {
      starts.push(BigInt(n));
      acc = 0;
    }
    acc += count;
  }
  const parts: FetchedLogs[] = starts.map((start, i) => ({
    from: start,
    to: i + 1 < starts.length ? starts[i + 1]! - 1n : fetched.to,
    processorLogs: [],
    moduleLogs: [],
    queried: fetched.queried,
    headers: fetched.headers,
  }));
  const partOf = (log: RawLog) => {
    const n = BigInt(log.blockNumber ?? fetched.from);
    let i = parts.length - 1;
    while (i > 0 && parts[i]!.from > n) i--;
    return parts[i]!;
  };
  for (const log of fetched.processorLogs) partOf(log).processorLogs.push(log);
  for (const log of fetched.moduleLogs) partOf(log).moduleLogs.push(log);
  return parts;
}

/** getLogs that splits its range on refusal (for follow-up queries of a range already accepted once). */
async function getLogsSplit(
  client: PublicClient,
  address: string[],
  from: bigint,
  to: bigint,
  policy?: RetryPolicy,
): Promise<RawLog[]> {
  try {
    return await getLogs(client, { address }, from, to, policy);
  } catch (err) {
    if (!(err instanceof RangeRefusedError)) throw err;
    if (from === to) throw new RpcUnavailableError(`eth_getLogs refused a single block (${from}): ${err.message}`);
    const mid = (from + to) / 2n;
    const left = await getLogsSplit(client, address, from, mid, policy);
    return left.concat(await getLogsSplit(client, address, mid + 1n, to, policy));
  }
}

/** Decodes a range's logs in chain order (once each), fetching logs of modules the range itself created. */
async function collectEvents(
  client: PublicClient,
  fetched: FetchedLogs,
  all: Set<string>,
  policy?: RetryPolicy,
): Promise<DecodedEvent[]> {
  const { from, to } = fetched;
  const events: DecodedEvent[] = [];
  for (const log of fetched.processorLogs) {
    const ev = decodeLog(log, "processor");
    if (!ev) continue;
    events.push(ev);
    if (ev.name === "ModuleCreated") all.add(moduleOfEvent(ev)!);
  }
  let moduleLogs = fetched.moduleLogs;
  if (fetched.queried !== "all") {
    const queried = fetched.queried;
    const missing = [...all].filter((m) => !queried.has(m));
    if (missing.length > 0) moduleLogs = moduleLogs.concat(await getLogsSplit(client, missing, from, to, policy));
  }
  for (const log of moduleLogs) {
    if (!all.has(log.address.toLowerCase())) continue;
    const ev = decodeLog(log, "module");
    if (ev) events.push(ev);
  }
  return sortUnique(events);
}

/** Sorts events in chain order and drops repeats (a node answering twice for one log must not write it twice). */
function sortUnique(events: DecodedEvent[]): DecodedEvent[] {
  events.sort((a, b) =>
    a.blockNumber === b.blockNumber ? a.logIndex - b.logIndex : a.blockNumber < b.blockNumber ? -1 : 1,
  );
  let kept = 0;
  for (const ev of events) {
    const prev = kept > 0 ? events[kept - 1]! : null;
    if (prev && prev.blockNumber === ev.blockNumber && prev.logIndex === ev.logIndex) continue;
    events[kept++] = ev;
  }
  events.length = kept;
  return events;
}

/** Headers by number; a block the node does not return is asked again twice (load balancers), then ChainBehindError. */
async function headersOf(
  client: PublicClient,
  wanted: bigint[],
  policy?: RetryPolicy,
  known?: ReadonlyMap<bigint, Header>,
): Promise<Map<bigint, Header>> {
  const have = known ? wanted.filter((n) => known.has(n)) : [];
  const headers = await getHeaders(client, have.length > 0 ? wanted.filter((n) => !known!.has(n)) : wanted, policy);
  for (const n of have) headers.set(n, known!.get(n)!);
  for (let round = 0; round < 2; round++) {
    const missing = wanted.filter((n) => !headers.get(n));
    if (missing.length === 0) break;
    for (const [n, h] of await getHeaders(client, missing, policy)) headers.set(n, h);
  }
  const missing = wanted.filter((n) => !headers.get(n));
  if (missing.length > 0) throw new ChainBehindError(`block ${missing[0]} is not available from the node yet`);
  return headers as Map<bigint, Header>;
}

/**
 * The first block of the unconfirmed window whose logs are in doubt: its header's bloom says the processor or a
 * module may have logged there, no log came back for it, and asking for its logs by hash (which fails rather than
 * answering empty when the node lacks the block) did not settle it. Logs found that way join `events`.
 * Returns null when every block is settled.
 */
async function firstDoubtfulBlock(opts: {
  client: PublicClient;
  events: DecodedEvent[];
  headers: Map<bigint, Header>;
  from: bigint;
  to: bigint;
  ours: Set<string>;
  processor: string | null;
  policy?: RetryPolicy;
}): Promise<bigint | null> {
  const { client, events, headers, ours, processor } = opts;
  const logged = new Set(events.map((e) => e.blockNumber));
  const suspects: Header[] = [];
  for (let n = opts.from; n <= opts.to; n++) {
    const h = headers.get(n)!;
    if (logged.has(n) || !h.logsBloom) continue;
    for (const a of ours) {
      if (bloomMayContain(h.logsBloom, a)) {
        suspects.push(h);
        break;
      }
    }
  }
  let doubt: bigint | null = null;
  await eachBounded(suspects, 4, async (h) => {
    try {
      // Every log of the block: a module created in it logs there too.
      const logs = await getLogsByHash(client, {}, h.hash, DOUBT_RETRY);
      const found = logs.filter((l) => l.address.toLowerCase() === processor).map((l) => decodeLog(l, "processor"));
      const created = new Set(found.filter((e) => e?.name === "ModuleCreated").map((e) => moduleOfEvent(e!)!));
      for (const log of logs) {
        const a = log.address.toLowerCase();
        if (a !== processor && (ours.has(a) || created.has(a))) found.push(decodeLog(log, "module"));
      }
      for (const ev of found) {
        if (ev && ev.blockHash === h.hash) events.push({ ...ev, blockTime: ev.blockTime ?? h.timestamp });
      }
    } catch {
      if (doubt === null || h.number < doubt) doubt = h.number;
    }
  });
  if (suspects.length > 0) sortUnique(events);
  return doubt;
}

// Asking a block's logs by hash is a check: fail fast, the next poll asks again.
const DOUBT_RETRY: RetryPolicy = { attempts: 2, baseMs: 50, maxMs: 100 };

/**
 * Completes fetched logs into a batch: fetches logs of modules created in the range (or discovered after the
 * fetch was issued), decodes in chain order, fills block timestamps, and checks the range against the chain (hash
 * linkage inside the reorg window, log block hashes against headers, logs against header blooms). A block whose
 * logs stay in doubt ends the batch before it; when it is the first block, LogsInDoubtError.
 *
 * `modules` is the set known before the range; it is not modified.
 */
export async function prepareBatch(opts: {
  client: PublicClient;
  fetched: FetchedLogs;
  modules: ReadonlySet<string> | ReadonlyMap<string, unknown>;
  base: Cursor | null;
  /** Newest block the indexer may index now (head − CONFIRMATIONS). */
  target: bigint;
  window: bigint;
  /** Null on a permission-only chain (no processor or module logs to check). */
  processor: string | null;
  policy?: RetryPolicy;
  /** Headers already read in this poll (the head's), not asked again. */
  known?: ReadonlyMap<bigint, Header>;
}): Promise<PreparedBatch> {
  const { client, fetched, base, target, window, policy, processor } = opts;
  const { from, to } = fetched;
  const all = new Set<string>(opts.modules.keys());
  const ahead = fetched.headers ? await fetched.headers.catch(() => null) : null;
  let known = opts.known;
  if (ahead && ahead.size > 0) {
    const merged = new Map<bigint, Header>(opts.known ?? []);
    for (const [n, h] of ahead) if (h && !merged.has(n)) merged.set(n, h);
    known = merged;
  }
  let events = await collectEvents(client, fetched, all, policy);

  // Headers: every block of the range that can end up in the reorg window (the last `window` blocks up to the
  // target), blocks lacking timestamps, and the new cursor block. A range wholly below the window (final) needs no
  // header for its cursor: the batch ends at its last event's block (hash from the log, time from the log or the
  // header fetched for it), and the empty blocks after it go with the next batch (their logs are known: none).
  const windowStart = target - window + 1n > from ? target - window + 1n : from;
  const last = events.at(-1);
  const deep = to < windowStart;
  const endAt = deep && last ? last.blockNumber : to;
  const wanted = new Set<bigint>();
  if (!(deep && last)) wanted.add(to);
  for (let n = windowStart; n <= to; n++) wanted.add(n);
  for (const ev of events) if (ev.blockTime === null) wanted.add(ev.blockNumber);
  const headers = wanted.size > 0 ? await headersOf(client, [...wanted], policy, known) : new Map<bigint, Header>();
  const windowHeaders: Header[] = [];
  for (let n = windowStart; n <= to; n++) {
    const h = headers.get(n)!;
    const parent = n - 1n === base?.block ? base.hash : headers.get(n - 1n)?.hash;
    if (parent !== undefined && h.parentHash !== parent) {
      throw new ReorgDetectedError(`block ${n} does not extend ${n - 1n} (${h.parentHash} != ${parent})`);
    }
    windowHeaders.push(h);
  }
  for (const ev of events) {
    const h = headers.get(ev.blockNumber);
    if (h) {
      if (h.hash !== ev.blockHash)
        throw new ReorgDetectedError(`logs of block ${ev.blockNumber} are from another fork`);
      if (ev.blockTime === null) ev.blockTime = h.timestamp;
    }
    if (ev.blockTime === null) throw new ReorgDetectedError(`no timestamp for block ${ev.blockNumber}`);
  }
  if (deep && last) {
    const toHeader = headers.get(endAt) ?? {
      number: endAt,
      hash: last!.blockHash,
      parentHash: "",
      timestamp: last!.blockTime!,
    };
    return { from, to: endAt, covered: to, events: events as BatchEvent[], toHeader, windowHeaders: [] };
  }
  const ours = new Set(processor ? [processor, ...all] : all);
  const doubt = await firstDoubtfulBlock({ client, events, headers, from: windowStart, to, ours, processor, policy });
  if (doubt === null)
    return { from, to, covered: to, events: events as BatchEvent[], toHeader: headers.get(to)!, windowHeaders };
  if (doubt === from) throw new LogsInDoubtError(`the logs of block ${doubt} are not available from the node yet`);
  events = events.filter((e) => e.blockNumber < doubt);
  return {
    from,
    to: doubt - 1n,
    covered: doubt - 1n,
    events: events as BatchEvent[],
    toHeader: headers.get(doubt - 1n)!,
    windowHeaders: windowHeaders.filter((h) => h.number < doubt),
  };
}
