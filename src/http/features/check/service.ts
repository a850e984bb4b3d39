/** The two answers of the authorization check: from the index and from the contract. */
import {
  BaseError,
  ContractFunctionRevertedError,
  ContractFunctionZeroDataError,
  type Address,
  type PublicClient,
} from "viem";
import type { Sql } from "../../../db/client";
import { subscriptionModuleAbi } from "../../../chain/abis";
import { ApiError, ChainUnavailableError, InvalidParameterError } from "../../errors";
import { publicClientFor, type ChainRegistry } from "../../../chain/clients";
import { DEADLINE_FAST_MS, withDeadline } from "../../deadline";
import { allocationId, nextChargeDate } from "../subscriptions/service";
import { chainNow, paidUntilSql, statusJoins, statusSql } from "../../../domain/status";
import type { SubscriptionStatus } from "../subscriptions/model";
import type { IndexedResult, OnchainResult } from "./model";

/** What the check asks. */
export type CheckQuery = {
  chainId: number;
  module: string;
  wallet: string;
  planIds: string[];
  /** A spend permission check: the merchant's spender (and `planIds` are plan keys `<token>:<allowance>:<period>`). */
  spender?: string;
};

type CheckRow = {
  known_chain_id: string | null;
  indexed_block: string | null;
  indexed_time: Date | null;
  chain_id: string | null;
  module: string;
  subscription_id: string | null;
  plan_id: string;
  times_executed: string;
  next_charge_at: string;
  max_executions: string;
  paused: boolean;
  cancelled: boolean;
  is_blocked: boolean;
  status: SubscriptionStatus;
  /** Seconds from the statement's "now" until the row stops being ACTIVE with no event (numeric, as a string). */
  active_left_s: string | null;
  /** Last unix second the row is ACTIVE with no event (service.md: EXPIRED from the next second on). */
  paid_until: string | null;
};

/** The indexed answer plus the chain's freshness row as the same statement saw it. */
export type IndexedAnswer = {
  /** Whether the chain has a `chains` row (it has been indexed). */
  chainIndexed: boolean;
  indexedBlock: string | null;
  indexedTime: Date | null;
  result: IndexedResult;
  /**
   * Milliseconds, from the statement's "now", until the answer changes with no new batch: the first ACTIVE row
   * turns EXPIRED at last_paid_at + interval + grace + 1 s. Infinity when no row is ACTIVE (nothing else moves
   * with time).
   */
  validForMs: number;
};

/**
 * An indexed answer as the check cache keeps it: with the body and headers of its mode-indexed response (`init`:
 * the same headers as a `Headers`, which a Response copies faster than a plain object).
 */
export type CheckEntry = { answer: IndexedAnswer; body: string; headers: Record<string, string>; init: Headers };

/**
 * One statement over subscriptions_check_idx (chain, module, subscriber, plan) with the chain's freshness row
 * folded in: the status uses the same snapshot's "now" and `indexed_block`, at one round trip.
 */
export async function indexedCheck(sql: Sql, q: CheckQuery): Promise<IndexedAnswer> {
  const rows = await withDeadline(
    sql<CheckRow[]>`
      select n.known_chain_id, n.indexed_block, n.indexed_time,
        s.chain_id, s.module, s.subscription_id, s.plan_id, s.times_executed, s.next_charge_at, s.max_executions,
        s.paused, s.cancelled, coalesce(b.blocked, false) as is_blocked, ${statusSql(sql)} as status,
        ${activeLeft(sql)} as active_left_s, ${paidUntilSql(sql)} as paid_until
      from ${chainNow(sql, q.chainId)}
      left join subscriptions s on s.chain_id = ${q.chainId} and s.module = ${q.module}
        and s.subscriber = ${q.wallet} and s.plan_id = any(${q.planIds}::bigint[])
      ${statusJoins(sql)}
      order by s.block_number desc, s.log_index desc`,
    DEADLINE_FAST_MS,
  );
  const head = rows[0];
  const allocations = rows.filter((r) => r.subscription_id !== null) as (CheckRow & {
    chain_id: string;
    subscription_id: string;
  })[];
  const active = allocations.filter((r) => r.status === "ACTIVE");
  const left = active.map((r) => Number(r.active_left_s) * 1000);
  const expiresS = active.map((r) => Number(r.paid_until) + 1);
  const matching = q.planIds.filter((p) => allocations.some((r) => r.plan_id === p && r.status === "ACTIVE"));
  return {
    chainIndexed: head?.known_chain_id != null,
    indexedBlock: head?.indexed_block ?? null,
    indexedTime: head?.indexed_time ?? null,
    result: {
      authorized: matching.length > 0,
      matching_plan_ids: matching,
      details: allocations.map((r) => ({
        allocation_id: allocationId(r),
        plan_id_on_chain: r.plan_id,
        status: r.status,
        next_charge_date: nextChargeDate(r),
        times_executed: Number(r.times_executed),
      })),
      indexed_block: head?.indexed_block ?? null,
      // Computed once per answer (per cache entry): the first instant an ACTIVE row turns EXPIRED with no event.
      valid_until: expiresS.length ? new Date(Math.min(...expiresS) * 1000).toISOString() : null,
    },
    validForMs: Math.min(Infinity, ...left),
  };
}

/**
 * Seconds left until an ACTIVE row turns EXPIRED with no event: status is EXPIRED once floor(now) > paid_until,
 * i.e. from now = paid_until + 1 on; "now" is {@link chainNow}'s (the later of the wall clock and the indexed block
 * time) but unrounded, so the answer's cache entry ends exactly at the boundary, never after it.
 */
function activeLeft(sql: Sql) {
  return sql`(${paidUntilSql(sql)} + 1 - extract(epoch from greatest(now(), n.indexed_time)))`;
}

/**
 * The contract's answer: `isActive(wallet, plan)` for one plan, `isActiveAny(wallet, plans)` for several, at the
 * latest block. An address without module code is a 400 on module_address; any transport failure is a 502.
 */
export async function onchainCheck(client: PublicClient, q: CheckQuery): Promise<OnchainResult> {
  const method = q.planIds.length === 1 ? "isActive" : "isActiveAny";
  try {
    const authorized =
      method === "isActive"
        ? await client.readContract({
            address: q.module as Address,
            abi: subscriptionModuleAbi,
            functionName: "isActive",
            args: [q.wallet as Address, Number(q.planIds[0])],
          })
        : await client.readContract({
            address: q.module as Address,
            abi: subscriptionModuleAbi,
            functionName: "isActiveAny",
            args: [q.wallet as Address, q.planIds.map(Number)],
          });
    return { authorized, method };
  } catch (err) {
    const notAModule =
      err instanceof BaseError &&
      err.walk((e) => e instanceof ContractFunctionZeroDataError || e instanceof ContractFunctionRevertedError);
    if (notAModule) {
      throw new InvalidParameterError(
        "module_address",
        `module_address has no subscription module on chain ${q.chainId} (the call returned no data or reverted)`,
      );
    }
    // The RPC URL may carry a provider key: never echo the underlying error.
    const kind = err instanceof BaseError && /timed? ?out/i.test(err.name + err.shortMessage) ? "timed out" : "failed";
    throw new ChainUnavailableError(`the RPC call to chain ${q.chainId} ${kind}`);
  }
}

/**
 * 503: the chain's on-chain checks in flight are at ONCHAIN_CHECK_CONCURRENCY, or this client already holds its
 * share of them; `Retry-After: 1`.
 */
export class ChainBusyError extends ApiError {
  constructor(chainId: number, share?: number) {
    super(
      503,
      "api_error",
      "chain_busy",
      share === undefined
        ? `too many on-chain checks in flight on chain ${chainId}, retry shortly`
        : `this client already has ${share} on-chain checks in flight on chain ${chainId} (its share), retry shortly`,
      undefined,
      { "retry-after": "1" },
    );
  }
}

/** How long a check with `min_block` waits for the index to reach that block. */
export const MIN_BLOCK_WAIT_MS = 2_000;
/** How often the index's block is read while waiting. */
const MIN_BLOCK_POLL_MS = 50;

/** 503: the index has not reached `min_block` within MIN_BLOCK_WAIT_MS; `Retry-After: 1`. */
export class IndexBehindError extends ApiError {
  constructor(minBlock: string, indexedBlock: string | null) {
    super(
      503,
      "api_error",
      "index_behind",
      `the index is at block ${indexedBlock ?? "none"}, behind min_block ${minBlock}; retry shortly`,
      "min_block",
      { "retry-after": "1" },
    );
  }
}

/**
 * The indexed answer once the index has reached `minBlock`: asked again every MIN_BLOCK_POLL_MS for up to
 * MIN_BLOCK_WAIT_MS (the chain row is read by the same statement, so the answer is of that block or a newer one).
 */
export async function indexedCheckAt(
  sql: Sql,
  q: CheckQuery,
  minBlock: bigint,
  first?: IndexedAnswer,
  load: (sql: Sql, q: CheckQuery) => Promise<IndexedAnswer> = indexedCheck,
): Promise<IndexedAnswer> {
  const reached = (a: IndexedAnswer) => a.indexedBlock !== null && BigInt(a.indexedBlock) >= minBlock;
  const end = Date.now() + MIN_BLOCK_WAIT_MS;
  let answer = first ?? (await load(sql, q));
  while (!reached(answer)) {
    if (Date.now() + MIN_BLOCK_POLL_MS > end) throw new IndexBehindError(String(minBlock), answer.indexedBlock);
    await Bun.sleep(MIN_BLOCK_POLL_MS);
    answer = await load(sql, q);
  }
  return answer;
}

/** One plan as `GET /v0/auth/plans` describes it. */
export type PlanInfo = {
  plan_id: string;
  token: string;
  symbol: string | null;
  decimals: number | null;
  amount: string;
  interval_s: number;
  grace_s: number;
};

/** The indexed plans among `planIds` of a module, in request order; a 400 on plan_ids names those not indexed. */
export async function plansOf(sql: Sql, chainId: number, module: string, planIds: string[]): Promise<PlanInfo[]> {
  const rows = await withDeadline(
    sql<(Omit<PlanInfo, "interval_s" | "grace_s"> & { interval_s: string; grace_s: string })[]>`
      select p.plan_id::text as plan_id, p.token, t.symbol, t.decimals, p.amount::text as amount,
        p.interval_s::text as interval_s, p.grace_s::text as grace_s
      from plans p left join tokens t on t.chain_id = p.chain_id and t.address = p.token
      where p.chain_id = ${chainId} and p.module = ${module} and p.plan_id = any(${planIds}::bigint[])`,
    DEADLINE_FAST_MS,
  );
  const byId = new Map(rows.map((r) => [r.plan_id, r]));
  const missing = planIds.filter((id) => !byId.has(id));
  if (missing.length) {
    throw new InvalidParameterError(
      "plan_ids",
      `plan ${missing.join(", ")} of module ${module} is not indexed on chain ${chainId}`,
    );
  }
  return planIds.map((id) => {
    const r = byId.get(id)!;
    return { ...r, interval_s: Number(r.interval_s), grace_s: Number(r.grace_s) };
  });
}

/** On-chain checks with their own RPC budget. */
export type OnchainChecker = {
  /**
   * The contract's answer for `client` (its rate-limit key): `call` with the checker's RPC client (default
   * {@link onchainCheck}, a module's; a spend permission check brings its own); ChainBusyError when the chain's cap
   * is reached or the client holds its share of it.
   */
  check: (
    q: CheckQuery,
    client?: string,
    call?: (rpc: PublicClient, q: CheckQuery) => Promise<OnchainResult>,
  ) => Promise<OnchainResult>;
  /** Distinct RPC calls in flight on `chainId` (identical checks share one). */
  inFlight: (chainId: number) => number;
};

/**
 * The on-chain half of the public check, kept off the indexer's RPC budget: one viem client per chain of its own
 * (built from the registry's URL; the registry's client only where it has no URL), at most `concurrency` distinct
 * calls in flight per chain (one more is a 503 chain_busy, never a queue), and single flight: checks identical in
 * (chain, module, spender, wallet, plan ids) while one is in flight share its call and its answer (or error). Fair: one
 * client (a rate-limit key) starts a call only while it holds fewer than its share of the chain's calls — the cap
 * divided by the clients holding calls (itself included), and never more than half of it — so a caller flooding
 * the route gets its own 503s and leaves room for everyone else.
 */
export function createOnchainChecker(opts: {
  chains: ChainRegistry;
  concurrency: number;
  timeoutMs: number;
}): OnchainChecker {
  const clients = new Map<number, PublicClient>();
  const flights = new Map<string, Promise<OnchainResult>>();
  const active = new Map<number, number>();
  /** Calls in flight per chain and client. */
  const held = new Map<number, Map<string, number>>();

  /** The share of `client` on a chain whose holders are `holders` (a map of client → calls). */
  const shareOf = (holders: Map<string, number>, client: string) => {
    const clients = holders.size + (holders.has(client) ? 0 : 1);
    return Math.max(1, Math.floor(opts.concurrency / Math.max(2, clients)));
  };

  const clientOf = (chainId: number): PublicClient | undefined => {
    let client = clients.get(chainId);
    if (!client) {
      const url = opts.chains.rpcUrl?.(chainId);
      client = url ? publicClientFor(url, opts.timeoutMs) : opts.chains.get(chainId);
      if (client) clients.set(chainId, client);
    }
    return client;
  };

  return {
    check: (q, who = "", call = onchainCheck) => {
      const key = `${q.chainId}:${q.module}:${q.spender ?? ""}:${q.wallet}:${q.planIds.join(",")}`;
      const joined = flights.get(key);
      if (joined) return joined;
      const client = clientOf(q.chainId);
      if (!client) {
        return Promise.reject(
          new InvalidParameterError("chain_id", `no RPC endpoint is configured for chain ${q.chainId}`),
        );
      }
      const running = active.get(q.chainId) ?? 0;
      if (running >= opts.concurrency) return Promise.reject(new ChainBusyError(q.chainId));
      let holders = held.get(q.chainId);
      if (!holders) held.set(q.chainId, (holders = new Map()));
      const mine = holders.get(who) ?? 0;
      const share = shareOf(holders, who);
      if (mine >= share) return Promise.reject(new ChainBusyError(q.chainId, share));
      holders.set(who, mine + 1);
      active.set(q.chainId, running + 1);
      const flight = call(client, q).finally(() => {
        flights.delete(key);
        active.set(q.chainId, (active.get(q.chainId) ?? 1) - 1);
        const left = (holders.get(who) ?? 1) - 1;
        if (left > 0) holders.set(who, left);
        else holders.delete(who);
      });
      flights.set(key, flight);
      return flight;
    },
    inFlight: (chainId) => active.get(chainId) ?? 0,
  };
}
