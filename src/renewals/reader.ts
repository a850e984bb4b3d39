/**
 * Reads what the renewal outlook needs at one pinned block (renewals.md §3): each wallet's balance and allowance to
 * the processor in a token, and each subscription's prepaid credit. Through Multicall3 `aggregate3` in chunks where
 * the chain has it, else a JSON-RPC batch of `eth_call`s; with its own viem clients and concurrency, never the
 * indexer's. A call that reverts or a chunk that fails leaves its values out (the caller keeps older outlooks).
 */
import { createPublicClient, http, type Address, type Hex, type PublicClient } from "viem";
import { createLimiter } from "../common/async";
import { aggregate3Data, aggregate3Words, allowanceData, balanceOfData, creditOfData } from "./abi";
import type { WalletFunds } from "./outlook";

/** What one evaluation reads: (wallet, token) pairs, and subscriptions' credits by key. */
export type ReadRequest = {
  pairs: { wallet: string; token: string }[];
  credits: { key: string; module: string; subscriptionId: bigint }[];
};

/** What the block showed; a missing entry is a read that failed. `funds` is keyed `<wallet>:<token>`. */
export type ReadResult = {
  funds: Map<string, WalletFunds>;
  credits: Map<string, bigint>;
  /** Calls that failed (reverted, or their chunk failed). */
  failed: number;
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
  /** Calls per `aggregate3` (or per JSON-RPC batch). */
  chunkSize?: number;
  timeoutMs?: number;
};

type Call = { to: Address; data: Hex; set: (v: bigint) => void };

const word = (data: Hex): bigint | undefined => (data.length >= 66 ? BigInt(data.slice(0, 66)) : undefined);

/** Creates the reader of one chain. */
export function createRenewalReader(opts: ReaderOptions): RenewalReader {
  const chunkSize = opts.chunkSize ?? 1500;
  let sent = 0;
  const transport = (batch: boolean) =>
    http(opts.rpcUrl, {
      timeout: opts.timeoutMs ?? 30_000,
      retryCount: 1,
      batch: batch ? { batchSize: chunkSize, wait: 0 } : false,
      onFetchRequest: () => void sent++,
    });
  const client = createPublicClient({ transport: transport(false), cacheTime: 0 }) as PublicClient;
  const batched = createPublicClient({ transport: transport(true), cacheTime: 0 }) as PublicClient;
  let hasMulticall = false;
  // RENEWAL_RPC_CONCURRENCY bounds the requests in flight across every read at once (a pass reads slices side by side).
  const slots = createLimiter(opts.concurrency);

  const viaMulticall = async (block: bigint, chunk: Call[]): Promise<number> => {
    // A raw eth_call: viem's `call` formats and checks a 100 KB calldata at a cost that dwarfs the node's work.
    const data = (await client.request({
      method: "eth_call",
      params: [{ to: opts.multicall, data: aggregate3Data(chunk) }, `0x${block.toString(16)}`],
    })) as Hex;
    let failed = 0;
    aggregate3Words(data).forEach((v, i) => {
      if (v === undefined) failed++;
      else chunk[i]!.set(v);
    });
    return failed;
  };

  const viaBatch = async (block: bigint, chunk: Call[]): Promise<number> => {
    const answers = await Promise.allSettled(
      chunk.map((c) => batched.call({ to: c.to, data: c.data, blockNumber: block })),
    );
    let failed = 0;
    answers.forEach((a, i) => {
      const v = a.status === "fulfilled" && a.value.data ? word(a.value.data) : undefined;
      if (v === undefined) failed++;
      else chunk[i]!.set(v);
    });
    return failed;
  };

  return {
    async head() {
      const b = await client.getBlock({ blockTag: "latest" });
      return { number: b.number, time: Number(b.timestamp) };
    },
    async read(block, request) {
      const funds = new Map<string, WalletFunds>();
      const credits = new Map<string, bigint>();
      const calls: Call[] = [];
      const partial = new Map<string, { balance?: bigint; allowance?: bigint }>();
      for (const { wallet, token } of request.pairs) {
        const p: { balance?: bigint; allowance?: bigint } = {};
        partial.set(`${wallet}:${token}`, p);
        const to = token as Address;
        calls.push({ to, data: balanceOfData(wallet), set: (v) => (p.balance = v) });
        calls.push({ to, data: allowanceData(wallet, opts.processor), set: (v) => (p.allowance = v) });
      }
      for (const c of request.credits) {
        const data = creditOfData(c.module, c.subscriptionId);
        calls.push({ to: opts.processor as Address, data, set: (v) => credits.set(c.key, v) });
      }
      // Where the chain has no Multicall3 at the block (checked until it does), a JSON-RPC batch.
      if (!hasMulticall)
        hasMulticall = (await client.getCode({ address: opts.multicall, blockNumber: block }))?.length! > 2;
      const via = hasMulticall ? viaMulticall : viaBatch;
      const chunks: Call[][] = [];
      for (let i = 0; i < calls.length; i += chunkSize) chunks.push(calls.slice(i, i + chunkSize));
      let failed = 0;
      await Promise.all(
        chunks.map(async (chunk) => {
          failed += await slots(() => via(block, chunk).catch(() => chunk.length));
        }),
      );
      for (const [k, p] of partial) {
        if (p.balance !== undefined && p.allowance !== undefined)
          funds.set(k, { balance: p.balance, allowance: p.allowance });
      }
      return { funds, credits, failed, via: hasMulticall ? "multicall" : "batch" };
    },
    requests: () => sent,
  };
}
