/**
 * Reads what the renewal outlook needs at one pinned block (renewals.md §3, spend-permissions §4): each wallet's
 * balance in a token (the native balance through Multicall3's `getEthBalance` for a spend permission's native token)
 * and its allowance to the processor, each subscription's prepaid credit, and whether a spend permission manager still
 * owns a smart account (`isOwnerAddress`). Through Multicall3 `aggregate3` in chunks where the chain has it, else
 * JSON-RPC batches of `eth_call`s (100 at most); with its own viem clients and concurrency, never the indexer's. A call
 * that reverts or a chunk that fails leaves its values out (the caller keeps older outlooks). One hostile token cannot
 * fail the others' reads: where the node takes `eth_call`'s state override, a chunk runs Multicall3's `aggregate3` with
 * a gas limit per call (GasCappedAggregate, placed for that call only); elsewhere a chunk is given gas in proportion to
 * its calls. Either way the calls of a chunk that failed, or that failed in it (a token burning the gas it was given
 * starves the calls after it), are asked again in halves, down to single calls with their own gas limit.
 */
import { createPublicClient, http, type Address, type Hex, type PublicClient } from "viem";
import { errorText, isRevert, rpcCodeOf } from "../chain/errors";
import { createLimiter } from "../common/async";
import { NATIVE_TOKEN } from "../domain/spend-permission";
import {
  aggregate3Data,
  aggregate3Words,
  allowanceData,
  balanceOfData,
  creditOfData,
  getEthBalanceData,
  isOwnerAddressData,
} from "./abi";
import { cappedAggregateCode } from "./capped-aggregate-code";
import type { WalletFunds } from "./outlook";

/**
 * What one evaluation reads: (wallet, token) pairs, subscriptions' credits by key, and (wallet, manager) pairs whose
 * ownership a spend permission needs. A pair with `allowance: false` (only spend permissions charge it) skips the
 * allowance to the processor, which then reads as 0; the native token (`0xEeee…`) never has one.
 */
export type ReadRequest = {
  pairs: { wallet: string; token: string; allowance?: boolean }[];
  credits: { key: string; module: string; subscriptionId: bigint }[];
  owners?: { wallet: string; manager: string }[];
};

/**
 * What the block showed; a missing entry is a read that failed. `funds` is keyed `<wallet>:<token>`, `owners`
 * `<wallet>:<manager>`: true or false as the account answered, null when it does not answer `isOwnerAddress`.
 */
export type ReadResult = {
  funds: Map<string, WalletFunds>;
  credits: Map<string, bigint>;
  owners: Map<string, boolean | null>;
  /** Calls that failed (reverted, or their chunk failed). */
  failed: number;
  /** Tokens (lowercase) a call of which the node ran and judged failed on its own (reverted, out of gas, no answer). */
  rejected: Set<string>;
  via: "multicall" | "batch";
};

/** The reader of one chain. */
export type RenewalReader = {
  /** The newest block: the one to pin an evaluation to. */
  head(): Promise<{ number: bigint; time: number }>;
  read(block: bigint, request: ReadRequest): Promise<ReadResult>;
  /** HTTP requests sent so far (each a JSON-RPC call or batch). */
  requests(): number;
};

/** Options of `createRenewalReader`. */
export type ReaderOptions = {
  rpcUrl: string;
  processor: string;
  multicall: Address;
  /** Requests in flight at once (`RENEWAL_RPC_CONCURRENCY`). */
  concurrency: number;
  /** Calls per `aggregate3` (a JSON-RPC batch takes `BATCH_MAX_CALLS` at most). */
  chunkSize?: number;
  timeoutMs?: number;
  /** Gas of one call alone or in a JSON-RPC batch (a balanceOf, allowance or creditOf costs a few thousand). */
  callGas?: number;
  /** false: never try eth_call's state override (default: tried once, used where the node takes it). */
  stateOverride?: boolean;
};

/**
 * Gas one read may use: an ERC-20's `balanceOf` or `allowance` needs under 30,000, even behind a proxy. Also the
 * per-call limit built into GasCappedAggregate (contracts/multicall), which a test holds equal.
 */
export const CALL_GAS = 100_000;
/** Where the reader places GasCappedAggregate's code for one eth_call (an address no chain has code at). */
export const CAPPED_AGGREGATE_ADDRESS = "0xc0ffee0000000000000000000000000000ca11ed";
/** Gas of one `aggregate3` at most: under the 30M blocks of most chains, which nodes cap `eth_call` at. */
export const CHUNK_GAS_CAP = 25_000_000;
/** Calls per JSON-RPC batch at most (providers refuse or rate-limit bigger batches). */
export const BATCH_MAX_CALLS = 100;

/**
 * One read. `blame`: the token a failure of the call counts against (quarantine); `native`: the wallet whose native
 * balance it reads (a JSON-RPC batch asks `eth_getBalance` instead of Multicall3's `getEthBalance`).
 */
type Call = { to: Address; data: Hex; set: (v: bigint) => void; blame?: string; native?: Address };

/** Whether the node ran the call and it failed (a revert, or out of gas: anvil says "EVM error OutOfGas"). */
const ranAndFailed = (err: unknown) => isRevert(err) || /out ?of ?gas/.test(errorText(err));

/**
 * What one attempt at some calls gave: the indices (into its calls) that failed, whether the node ran them (rather
 * than failing itself), and whether each ran with its own gas limit (a failure is then that call's own).
 */
type Outcome = { failed: number[]; judged: boolean; own?: boolean };

const NATIVE = NATIVE_TOKEN.toLowerCase();
const uint = (n: bigint) => n.toString(16).padStart(64, "0");

const word = (data: Hex): bigint | undefined => (data.length >= 66 ? BigInt(data.slice(0, 66)) : undefined);

/** The words of an `aggregate3` answer for `n` calls, or undefined when it is not one. */
function wordsOf(answer: Hex, n: number): (bigint | undefined)[] | undefined {
  if (answer.length < 2 + 128) return undefined;
  try {
    const words = aggregate3Words(answer);
    return words.length === n ? words : undefined;
  } catch {
    return undefined;
  }
}

/** Creates the reader of one chain. */
export function createRenewalReader(opts: ReaderOptions): RenewalReader {
  const chunkSize = opts.chunkSize ?? 1500;
  const callGas = opts.callGas ?? CALL_GAS;
  let sent = 0;
  const transport = (batch: boolean) =>
    http(opts.rpcUrl, {
      timeout: opts.timeoutMs ?? 30_000,
      retryCount: 1,
      batch: batch ? { batchSize: Math.min(chunkSize, BATCH_MAX_CALLS), wait: 0 } : false,
      onFetchRequest: () => void sent++,
    });
  const client = createPublicClient({ transport: transport(false), cacheTime: 0 }) as PublicClient;
  const batched = createPublicClient({ transport: transport(true), cacheTime: 0 }) as PublicClient;
  let hasMulticall = false;
  // RENEWAL_RPC_CONCURRENCY bounds the requests in flight across every read at once (a pass reads slices side by side).
  const slots = createLimiter(opts.concurrency);
  const hex = (n: bigint | number): Hex => `0x${n.toString(16)}`;

  /** One call alone, with its own gas limit. A revert (out of gas included) is the call's own failure. */
  const single = async (block: bigint, c: Call): Promise<Outcome> => {
    try {
      const data = (await client.request({
        method: "eth_call",
        params: [{ to: c.to, data: c.data, gas: hex(callGas) }, hex(block)],
      })) as Hex;
      const v = word(data);
      if (v === undefined) return { failed: [0], judged: true }; // returned nothing: not an ERC-20 answer
      c.set(v);
      return { failed: [], judged: true };
    } catch (err) {
      return { failed: [0], judged: ranAndFailed(err) };
    }
  };

  // Whether the node takes eth_call's state override (null: not known yet): then each call of a chunk has its own gas
  // limit (GasCappedAggregate), else Multicall3's aggregate3 with the chunk's gas in proportion to its calls.
  let overrides: boolean | null = opts.stateOverride === false ? false : null;
  const viaMulticall = async (block: bigint, chunk: Call[]): Promise<Outcome> => {
    if (chunk.length === 1) return single(block, chunk[0]!);
    const capped = overrides !== false;
    // A raw eth_call: viem's `call` formats and checks a 100 KB calldata at a cost that dwarfs the node's work.
    const gas = hex(Math.min(CHUNK_GAS_CAP, 50_000 + chunk.length * (capped ? CALL_GAS + 10_000 : callGas)));
    const data = aggregate3Data(chunk);
    const params = capped
      ? [
          { to: CAPPED_AGGREGATE_ADDRESS, data, gas },
          hex(block),
          { [CAPPED_AGGREGATE_ADDRESS]: { code: cappedAggregateCode } },
        ]
      : [{ to: opts.multicall, data, gas }, hex(block)];
    try {
      const answer = (await client.request({ method: "eth_call", params } as never)) as Hex;
      const words = wordsOf(answer, chunk.length);
      if (!words) {
        // No aggregate3 answer: a node that ignored the override (the address has no code), or a broken answer.
        if (!capped || overrides !== null) return { failed: chunk.map((_, i) => i), judged: false };
        overrides = false;
        return viaMulticall(block, chunk);
      }
      if (capped) overrides = true;
      const failed: number[] = [];
      words.forEach((v, i) => {
        if (v === undefined) failed.push(i);
        else chunk[i]!.set(v);
      });
      return { failed, judged: true, own: capped };
    } catch (err) {
      // A node that refuses the override (an error answer, not a failed execution): Multicall3 from now on.
      if (capped && overrides === null && rpcCodeOf(err) !== undefined && !ranAndFailed(err)) {
        overrides = false;
        return viaMulticall(block, chunk);
      }
      return { failed: chunk.map((_, i) => i), judged: ranAndFailed(err) };
    }
  };

  const viaBatch = async (block: bigint, chunk: Call[]): Promise<Outcome> => {
    const answers = await Promise.allSettled(
      chunk.map((c) =>
        c.native
          ? batched.getBalance({ address: c.native, blockNumber: block }).then((v) => ({ data: `0x${uint(v)}` as Hex }))
          : batched.call({ to: c.to, data: c.data, blockNumber: block, gas: BigInt(callGas) }),
      ),
    );
    const failed: number[] = [];
    let judged = true;
    answers.forEach((a, i) => {
      const v = a.status === "fulfilled" && a.value.data ? word(a.value.data) : undefined;
      if (v !== undefined) return void chunk[i]!.set(v);
      failed.push(i);
      if (a.status === "rejected" && !ranAndFailed(a.reason)) judged = false;
    });
    return { failed, judged, own: true };
  };

  /**
   * Reads `calls`; the calls that failed among several are asked again in halves (a failure of the node, rather than
   * of a call, is not: the next pass tries again). Returns the calls that failed, each with whether the node judged
   * it failed on its own (a single call, or one the node ran and answered for).
   */
  const readAll = async (block: bigint, calls: Call[], via: typeof viaMulticall): Promise<Map<Call, boolean>> => {
    const out = new Map<Call, boolean>();
    const go = async (part: Call[]): Promise<void> => {
      const r: Outcome = await slots(() =>
        via(block, part).catch(() => ({ failed: part.map((_, i) => i), judged: false })),
      );
      const failed = r.failed.map((i) => part[i]!);
      if (failed.length === 0) return;
      // A failure of the node (not of a call), a single call, or calls that each had their own gas: final.
      if (!r.judged || part.length === 1 || r.own) {
        for (const c of failed) out.set(c, r.judged);
        return;
      }
      const half = Math.ceil(failed.length / 2);
      await Promise.all([go(failed.slice(0, half)), go(failed.slice(half))]);
    };
    const chunks: Call[][] = [];
    const size = via === viaBatch ? Math.min(chunkSize, BATCH_MAX_CALLS) : chunkSize;
    for (let i = 0; i < calls.length; i += size) chunks.push(calls.slice(i, i + size));
    await Promise.all(chunks.map(go));
    return out;
  };

  return {
    async head() {
      const b = await client.getBlock({ blockTag: "latest" });
      return { number: b.number, time: Number(b.timestamp) };
    },
    async read(block, request) {
      const funds = new Map<string, WalletFunds>();
      const credits = new Map<string, bigint>();
      const owners = new Map<string, boolean | null>();
      const calls: Call[] = [];
      const partial = new Map<string, { balance?: bigint; allowance?: bigint }>();
      for (const { wallet, token, allowance } of request.pairs) {
        const native = token === NATIVE;
        const p: { balance?: bigint; allowance?: bigint } = allowance === false || native ? { allowance: 0n } : {};
        partial.set(`${wallet}:${token}`, p);
        const set = (v: bigint) => (p.balance = v);
        if (native) {
          const data = getEthBalanceData(wallet);
          calls.push({ to: opts.multicall, data, set, blame: token, native: wallet as Address });
          continue;
        }
        const to = token as Address;
        calls.push({ to, data: balanceOfData(wallet), set, blame: token });
        if (p.allowance === undefined)
          calls.push({ to, data: allowanceData(wallet, opts.processor), set: (v) => (p.allowance = v), blame: token });
      }
      for (const c of request.credits) {
        const data = creditOfData(c.module, c.subscriptionId);
        calls.push({ to: opts.processor as Address, data, set: (v) => credits.set(c.key, v) });
      }
      const ownerCalls = new Map<Call, string>();
      for (const { wallet, manager } of request.owners ?? []) {
        const key = `${wallet}:${manager}`;
        // Any other word than a bool: not an answer of that kind of wallet.
        const c: Call = {
          to: wallet as Address,
          data: isOwnerAddressData(manager),
          set: (v) => owners.set(key, v === 1n ? true : v === 0n ? false : null),
        };
        ownerCalls.set(c, key);
        calls.push(c);
      }
      // Where the chain has no Multicall3 at the block (checked until it does), a JSON-RPC batch.
      if (!hasMulticall)
        hasMulticall = (await client.getCode({ address: opts.multicall, blockNumber: block }))?.length! > 2;
      const failed = await readAll(block, calls, hasMulticall ? viaMulticall : viaBatch);
      const rejected = new Set<string>();
      let failures = 0;
      for (const [c, judged] of failed) {
        const owner = ownerCalls.get(c);
        // An account that reverts `isOwnerAddress` (or returns nothing) is not a smart wallet of that kind.
        if (owner !== undefined && judged) {
          owners.set(owner, null);
          continue;
        }
        failures++;
        if (judged && c.blame) rejected.add(c.blame);
      }
      for (const [k, p] of partial) {
        if (p.balance !== undefined && p.allowance !== undefined)
          funds.set(k, { balance: p.balance, allowance: p.allowance });
      }
      return { funds, credits, owners, failed: failures, rejected, via: hasMulticall ? "multicall" : "batch" };
    },
    requests: () => sent,
  };
}
