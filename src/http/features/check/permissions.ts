/** The indexed authorization check of a spend permission (spend-permissions spec §2.5). */
import type { Sql } from "../../../db/client";
import { expiryInstant, nextChargeInstant, permissionPeriodView } from "../../../domain/spend-permission";
import { permissionStateOf, type PermissionRecordRow } from "../../../domain/spend-permission-record";
import { permissionNow, permissionStatusSql } from "../../../domain/spend-permission-status";
import { isoFromUnix } from "../../../domain/records";
import { DEADLINE_FAST_MS, withDeadline } from "../../deadline";
import { InvalidParameterError } from "../../errors";
import type { RawParams } from "../../params";
import type { CheckQuery, IndexedAnswer } from "./service";
import { BaseError, type Address, type PublicClient } from "viem";
import { spendPermissionManagerAbi } from "../../../chain/abis";
import { ChainUnavailableError } from "../../errors";
import type { SpendPermission } from "../../../domain/spend-permission";
import type { OnchainResult } from "./model";

const PLAN_KEY = /^(0x[0-9a-fA-F]{40}):([0-9]{1,78}):([0-9]{1,15})$/;

/** `plan_ids` of a permission check: plan keys `<token>:<allowance>:<period>`, deduplicated; [] when absent. */
export function parsePlanKeys(params: RawParams, name = "plan_ids"): string[] {
  const v = params[name];
  if (v === undefined || v === null) return [];
  const out: string[] = [];
  for (const part of v.split(",")) {
    const m = PLAN_KEY.exec(part);
    if (!m) {
      throw new InvalidParameterError(
        name,
        `${name} must be comma-separated plan keys <token>:<allowance>:<period> for a spend permission manager`,
      );
    }
    const key = `${m[1]!.toLowerCase()}:${BigInt(m[2]!)}:${Number(m[3])}`;
    if (!out.includes(key)) out.push(key);
    if (out.length > 100) throw new InvalidParameterError(name, `${name} holds more than 100 plan keys`);
  }
  return out;
}

type Row = PermissionRecordRow & {
  known_chain_id: string | null;
  indexed_block: string | null;
  indexed_time: Date | null;
  now_exact: number;
  grace_s: string;
};

/**
 * The permissions of (`wallet`, `spender`) on the manager matching the plan keys (any when none): authorized when
 * one is ACTIVE. One statement, with the chain's freshness row and "now" folded in.
 */
export async function indexedPermissionCheck(sql: Sql, q: CheckQuery & { spender: string }): Promise<IndexedAnswer> {
  const rows = await withDeadline(
    sql<Row[]>`
      select n.known_chain_id, n.indexed_block, n.indexed_time, n.now_s::text as now_s, n.now_exact, n.grace_s,
        sp.chain_id, sp.subscription_id::text, sp.hash, sp.manager, sp.merchant, sp.subscriber, sp.token,
        sp.allowance::text, sp.period_s, sp.start_s, sp.end_s, sp.salt::text, sp.extra_data, sp.times_executed,
        sp.total_spent::text, sp.last_period_start, sp.last_period_end, sp.last_period_spent::text, sp.next_charge_at,
        sp.revoked, sp.revoked_by, null as revoked_at, '0' as created_at,
        case when sp.hash is null then null else ${permissionStatusSql(sql)} end as status
      from ${permissionNow(sql, q.chainId)}
      left join spend_permissions sp on sp.chain_id = ${q.chainId} and sp.manager = ${q.module}
        and sp.subscriber = ${q.wallet} and sp.merchant = ${q.spender}
      order by sp.block_number, sp.log_index`,
    DEADLINE_FAST_MS,
  );
  const head = rows[0];
  const keyOf = (r: Row) => `${r.token}:${r.allowance}:${r.period_s}`;
  const wanted = new Set(q.planIds);
  const candidates = rows.filter((r) => r.hash !== null && (wanted.size === 0 || wanted.has(keyOf(r))));
  const active = candidates.filter((r) => r.status === "ACTIVE");
  const activeKeys = new Set(active.map(keyOf));
  const matching = q.planIds.length > 0 ? q.planIds.filter((k) => activeKeys.has(k)) : [...new Set(active.map(keyOf))];
  const grace = head ? Number(head.grace_s) : 0;
  const ends = active.map((r) => expiryInstant(permissionStateOf(r), grace)!);
  const nowExact = head ? Number(head.now_exact) : Date.now() / 1000;
  return {
    chainIndexed: head?.known_chain_id != null,
    indexedBlock: head?.indexed_block ?? null,
    indexedTime: head?.indexed_time ?? null,
    result: {
      authorized: active.length > 0,
      matching_plan_ids: matching,
      details: [...candidates].reverse().map((r) => {
        const s = permissionStateOf(r);
        const now = Number(r.now_s);
        const next = nextChargeInstant(s, now);
        return {
          allocation_id: `${r.chain_id}:${r.manager}:${r.hash}`,
          plan_id_on_chain: keyOf(r),
          status: r.status,
          next_charge_date: next === null ? null : isoFromUnix(next),
          times_executed: r.times_executed,
          is_subscribed: permissionPeriodView(s, now).isSubscribed,
        };
      }),
      indexed_block: head?.indexed_block ?? null,
      valid_until: ends.length ? isoFromUnix(Math.min(...ends)) : null,
    },
    validForMs: ends.length ? Math.max(0, (Math.min(...ends) - nowExact) * 1000) : Infinity,
  };
}

const multicall3Abi = [
  {
    type: "function",
    name: "getCurrentBlockTimestamp",
    stateMutability: "view",
    inputs: [],
    outputs: [{ name: "timestamp", type: "uint256" }],
  },
] as const;

/** The indexed candidates of a permission check, as structs for the manager's views, and the chain's grace. */
export async function permissionCandidates(
  sql: Sql,
  q: CheckQuery & { spender: string },
): Promise<{ permissions: SpendPermission[]; graceS: number }> {
  const rows = await withDeadline(
    sql<Row[]>`
      select n.grace_s, sp.subscriber, sp.merchant, sp.token, sp.allowance::text, sp.period_s, sp.start_s, sp.end_s,
        sp.salt::text, sp.extra_data
      from ${permissionNow(sql, q.chainId)}
      join spend_permissions sp on sp.chain_id = ${q.chainId} and sp.manager = ${q.module}
        and sp.subscriber = ${q.wallet} and sp.merchant = ${q.spender}
      order by sp.block_number, sp.log_index`,
    DEADLINE_FAST_MS,
  );
  const wanted = new Set(q.planIds);
  const permissions = rows
    .filter((r) => wanted.size === 0 || wanted.has(`${r.token}:${r.allowance}:${r.period_s}`))
    .map((r) => ({
      account: r.subscriber as Address,
      spender: r.merchant as Address,
      token: r.token as Address,
      allowance: BigInt(r.allowance),
      period: Number(r.period_s),
      start: Number(r.start_s),
      end: Number(r.end_s),
      salt: BigInt(r.salt),
      extraData: r.extra_data as `0x${string}`,
    }));
  return { permissions, graceS: rows[0] ? Number(rows[0].grace_s) : 0 };
}

/**
 * The chain's answer for the candidates: one Multicall3 `aggregate3` at the latest block reading, for each,
 * `isValid(P)` and `getLastUpdatedPeriod(P)`, and the block's timestamp; P is authorized when it is valid, not ended,
 * paid (`spend > 0`) and within grace of its paid period (`ts < lup.end + G`) — the status rule exactly.
 */
export async function onchainPermissionCheck(
  client: PublicClient,
  q: CheckQuery,
  candidates: { permissions: SpendPermission[]; graceS: number },
  multicall: Address,
): Promise<OnchainResult> {
  const method = "isValid+getLastUpdatedPeriod" as const;
  if (candidates.permissions.length === 0) return { authorized: false, method };
  const manager = q.module as Address;
  const contracts = [
    { address: multicall, abi: multicall3Abi, functionName: "getCurrentBlockTimestamp" } as const,
    ...candidates.permissions.flatMap(
      (p) =>
        [
          { address: manager, abi: spendPermissionManagerAbi, functionName: "isValid", args: [p] },
          { address: manager, abi: spendPermissionManagerAbi, functionName: "getLastUpdatedPeriod", args: [p] },
        ] as const,
    ),
  ];
  let results: readonly unknown[];
  try {
    results = (await client.multicall({
      contracts: contracts as never,
      allowFailure: false,
      multicallAddress: multicall,
    })) as readonly unknown[];
  } catch (err) {
    const kind = err instanceof BaseError && /timed? ?out/i.test(err.name + err.shortMessage) ? "timed out" : "failed";
    throw new ChainUnavailableError(`the RPC call to chain ${q.chainId} ${kind}`);
  }
  const ts = Number(results[0] as bigint);
  const authorized = candidates.permissions.some((p, i) => {
    const valid = results[1 + 2 * i] as boolean;
    const lup = results[2 + 2 * i] as { start: number; end: number; spend: bigint };
    const grace = Math.min(candidates.graceS, p.period);
    return valid && ts < p.end && lup.spend > 0n && ts < Number(lup.end) + grace;
  });
  return { authorized, method };
}
