/**
 * A fixture builder for API tests: writes rows straight into chains, tokens, modules, plans, subscriptions,
 * blocked_subscribers and activity (what the indexer would have written), so every status, activity type and
 * failure reason is present with exactly known values.
 *
 *   const f = await seedFixture(db.sql);   // two merchants, two chains, three tokens, every status
 *   f.activity                             // merchant M1's activity on chain A in chain order
 */
import type { Sql } from "../src/db/client";
import { accounts } from "./accounts";

const lower = (a: string) => a.toLowerCase();

/** The indexed (default) chain of the fixture. */
export const CHAIN_A = 31337;
/** A second indexed chain (not configured: known only from its `chains` row). */
export const CHAIN_B = 10;
/** Chain A's newest indexed block time (2100-01-01): far ahead of the wall clock, so it is the API's "now". */
export const NOW_A = 4_102_444_800;
/** Chain A's newest indexed block. */
export const INDEXED_BLOCK_A = 5000;
/** Chain B's newest indexed block; its block time lies in the past, so the wall clock is "now" there. */
export const INDEXED_BLOCK_B = 300;

/** Merchant with modules on both chains. */
export const M1 = lower(accounts.merchant.address);
/** A second merchant. */
export const M2 = lower(accounts.merchant2.address);
/** A merchant without modules. */
export const M_NONE = lower(accounts.deployer.address);

/** Wallets. */
export const W = {
  alice: lower(accounts.alice.address),
  bob: lower(accounts.bob.address),
  carol: lower(accounts.carol.address),
  dave: lower(accounts.dave.address),
  erin: lower(accounts.erin.address),
  keeper: lower(accounts.keeper.address),
  keeper2: lower(accounts.keeper2.address),
  // Synthetic wallets, one per remaining scenario.
  frank: "0x000000000000000000000000000000000000f4a1",
  grace: "0x000000000000000000000000000000000000f4a2",
  heidi: "0x000000000000000000000000000000000000f4a3",
  ivan: "0x000000000000000000000000000000000000f4a4",
  judy: "0x000000000000000000000000000000000000f4a5",
  mallory: "0x000000000000000000000000000000000000f4a6",
};

/** Module addresses: A1 and A2 of M1 on chain A, A3 of M2 on chain A, B1 of M1 on chain B. */
export const MOD = {
  a1: "0xa1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1",
  a2: "0xa2a2a2a2a2a2a2a2a2a2a2a2a2a2a2a2a2a2a2a2",
  a3: "0xa3a3a3a3a3a3a3a3a3a3a3a3a3a3a3a3a3a3a3a3",
  b1: "0xb1b1b1b1b1b1b1b1b1b1b1b1b1b1b1b1b1b1b1b1",
};

/** Tokens: USDC (6 decimals), WETH (18 decimals), one without metadata; chain B has its own USDC. */
export const TOK = {
  usdc: "0x00000000000000000000000000000000000c0de6",
  weth: "0x00000000000000000000000000000000000c0d18",
  nometa: "0x00000000000000000000000000000000000c0d00",
  usdcB: "0x00000000000000000000000000000000000b0de6",
};

/** Token metadata as the indexer stores it. */
export const TOKEN_META: Record<string, { symbol: string | null; decimals: number | null }> = {
  [`${CHAIN_A}:${TOK.usdc}`]: { symbol: "USDC", decimals: 6 },
  [`${CHAIN_A}:${TOK.weth}`]: { symbol: "WETH", decimals: 18 },
  [`${CHAIN_A}:${TOK.nometa}`]: { symbol: null, decimals: null },
  [`${CHAIN_B}:${TOK.usdcB}`]: { symbol: "USDC", decimals: 6 },
};

/** An amount above 2^64 (and 2^53): proves uint256 values stay exact. */
export const BIG_AMOUNT = "123456789012345678901234567890";
/** type(uint64).max, e.g. an allowance expiry meaning "never" in some wallets. */
export const MAX_UINT64 = "18446744073709551615";
/** A subscription id above 2^64. */
export const BIG_SUB_ID = "18446744073709551621";

const DAY = 86_400;

/** A `chains` row. */
export type ChainSeed = {
  chain_id: number;
  processor?: string;
  start_block?: number;
  indexed_block: number | null;
  indexed_time: Date | null;
  head_block: number | null;
  head_seen_at: Date | null;
};

/** A `plans` row. */
export type PlanSeed = {
  chain_id: number;
  module: string;
  plan_id: number;
  token: string;
  amount: string;
  interval_s: number;
  grace_s: number;
};

/** A `subscriptions` row (defaults fill the rest). */
export type SubscriptionSeed = {
  chain_id: number;
  subscription_id: string;
  module: string;
  merchant: string;
  subscriber: string;
  plan_id: number;
  max_executions?: number;
  times_executed?: number;
  total_spent?: string;
  created_at: number;
  last_paid_at?: number;
  next_charge_at: number;
  allowance_expiry?: number | string;
  paused?: boolean;
  cancelled?: boolean;
  block_number: number;
  log_index: number;
  /** The status the API must compute for it (checked by the tests). */
  expect: "ACTIVE" | "PENDING" | "PAUSED" | "CANCELLED" | "EXPIRED" | "BLOCKED";
};

/** An `activity` row. */
export type ActivitySeed = {
  chain_id: number;
  block_number: number;
  log_index: number;
  tx_hash: string;
  block_time: Date;
  merchant: string;
  module: string;
  subscription_id: string;
  type: "CHARGE" | "FAIL" | "REFILL";
  token: string | null;
  amount: string;
  fee: string | null;
  reason: string | null;
  keeper: string | null;
  /** A spend permission's charge: the permission's hash. */
  permission_hash?: string | null;
};

/** Inserts a `chains` row. */
export async function insertChain(sql: Sql, c: ChainSeed): Promise<void> {
  await sql`insert into chains (chain_id, processor, start_block, indexed_block, indexed_hash, indexed_time, head_block, head_seen_at)
    values (${c.chain_id}, ${c.processor ?? "0x" + "9".repeat(40)}, ${c.start_block ?? 0}, ${c.indexed_block},
      ${c.indexed_block === null ? null : "0x" + "ab".repeat(32)}, ${c.indexed_time}, ${c.head_block}, ${c.head_seen_at})`;
}

/** Inserts a `tokens` row. */
export async function insertToken(
  sql: Sql,
  t: { chain_id: number; address: string; symbol: string | null; decimals: number | null },
): Promise<void> {
  await sql`insert into tokens ${sql(t)}`;
}

/** Inserts a `modules` row. */
export async function insertModule(
  sql: Sql,
  m: { chain_id: number; address: string; merchant: string; block_number: number; log_index: number },
): Promise<void> {
  await sql`insert into modules ${sql({ ...m, tx_hash: txHash(m.chain_id * 1_000_000 + m.block_number, 0) })}`;
}

/** Inserts a `plans` row. */
export async function insertPlan(sql: Sql, p: PlanSeed): Promise<void> {
  await sql`insert into plans ${sql({ ...p, block_number: 1, log_index: p.plan_id })}`;
}

/** Inserts a `subscriptions` row. */
export async function insertSubscription(sql: Sql, s: SubscriptionSeed): Promise<void> {
  const { expect: _expect, ...row } = s;
  await sql`insert into subscriptions ${sql({
    max_executions: 0,
    times_executed: 0,
    total_spent: "0",
    last_paid_at: 0,
    allowance_expiry: 0,
    paused: false,
    cancelled: false,
    ...row,
    tx_hash: txHash(s.block_number, s.log_index),
  })}`;
}

/** Inserts a `blocked_subscribers` row. */
export async function insertBlocked(
  sql: Sql,
  b: { chain_id: number; module: string; subscriber: string; blocked: boolean },
): Promise<void> {
  await sql`insert into blocked_subscribers ${sql({ ...b, block_number: 2, log_index: 0 })}`;
}

/** Inserts `activity` rows. */
export async function insertActivity(sql: Sql, rows: ActivitySeed[]): Promise<void> {
  const withHash = rows.map((r) => ({ ...r, block_hash: blockHash(r.block_number) }));
  for (let i = 0; i < rows.length; i += 500) await sql`insert into activity ${sql(withHash.slice(i, i + 500))}`;
}

/** A deterministic lowercase block hash. */
export function blockHash(block: number): string {
  return "0x" + block.toString(16).padStart(64, "0");
}

/** A deterministic lowercase transaction hash. */
export function txHash(block: number, n: number): string {
  return "0x" + block.toString(16).padStart(32, "0") + n.toString(16).padStart(32, "0");
}

/** Block timestamp of the fixture's activity: 12 s blocks from 2026-01-01. */
export function blockTime(block: number): Date {
  return new Date(Date.UTC(2026, 0, 1) + block * 12_000);
}

/** What {@link seedFixture} wrote. */
export type Fixture = {
  chains: ChainSeed[];
  plans: PlanSeed[];
  subscriptions: SubscriptionSeed[];
  /** Every activity row, in (chain, block, log index) order. */
  activity: ActivitySeed[];
  /** Wall-clock seconds at seeding time (chain B's "now" is the wall clock). */
  wallNow: number;
};

/**
 * Seeds the standard fixture. Chain A ("now" = NOW_A): module A1 (plans 1 USDC 30 d + 3 d grace, 2 WETH 1 d, 3 no
 * metadata 7 d + 1 d grace) and A2 (plan 1 USDC) of M1, A3 of M2. Chain B: module B1 of M1. Subscriptions cover
 * every status, the precedence between them and the grace boundary (exactly at it, one second past it).
 */
export async function seedFixture(sql: Sql): Promise<Fixture> {
  const wallNow = Math.floor(Date.now() / 1000);
  const chains: ChainSeed[] = [
    {
      chain_id: CHAIN_A,
      indexed_block: INDEXED_BLOCK_A,
      indexed_time: new Date(NOW_A * 1000),
      head_block: INDEXED_BLOCK_A + 2,
      head_seen_at: new Date(),
    },
    {
      chain_id: CHAIN_B,
      indexed_block: INDEXED_BLOCK_B,
      indexed_time: new Date(Date.UTC(2020, 0, 1)),
      head_block: INDEXED_BLOCK_B,
      head_seen_at: new Date(),
    },
  ];
  for (const c of chains) await insertChain(sql, c);

  for (const [key, meta] of Object.entries(TOKEN_META)) {
    const [chain, address] = key.split(":");
    await insertToken(sql, { chain_id: Number(chain), address, ...meta });
  }

  await insertModule(sql, { chain_id: CHAIN_A, address: MOD.a1, merchant: M1, block_number: 1, log_index: 0 });
  await insertModule(sql, { chain_id: CHAIN_A, address: MOD.a2, merchant: M1, block_number: 1, log_index: 1 });
  await insertModule(sql, { chain_id: CHAIN_A, address: MOD.a3, merchant: M2, block_number: 1, log_index: 2 });
  await insertModule(sql, { chain_id: CHAIN_B, address: MOD.b1, merchant: M1, block_number: 1, log_index: 0 });

  const plans: PlanSeed[] = [
    {
      chain_id: CHAIN_A,
      module: MOD.a1,
      plan_id: 1,
      token: TOK.usdc,
      amount: "10000000",
      interval_s: 30 * DAY,
      grace_s: 3 * DAY,
    },
    { chain_id: CHAIN_A, module: MOD.a1, plan_id: 2, token: TOK.weth, amount: BIG_AMOUNT, interval_s: DAY, grace_s: 0 },
    {
      chain_id: CHAIN_A,
      module: MOD.a1,
      plan_id: 3,
      token: TOK.nometa,
      amount: "5",
      interval_s: 7 * DAY,
      grace_s: DAY,
    },
    {
      chain_id: CHAIN_A,
      module: MOD.a2,
      plan_id: 1,
      token: TOK.usdc,
      amount: "1000000",
      interval_s: 30 * DAY,
      grace_s: 0,
    },
    {
      chain_id: CHAIN_A,
      module: MOD.a3,
      plan_id: 1,
      token: TOK.usdc,
      amount: "2000000",
      interval_s: 30 * DAY,
      grace_s: 0,
    },
    {
      chain_id: CHAIN_B,
      module: MOD.b1,
      plan_id: 1,
      token: TOK.usdcB,
      amount: "3000000",
      interval_s: 30 * DAY,
      grace_s: 0,
    },
  ];
  for (const p of plans) await insertPlan(sql, p);

  const P1 = 30 * DAY + 3 * DAY; // interval + grace of A1 plan 1
  const base = { chain_id: CHAIN_A, module: MOD.a1, merchant: M1 };
  let blk = 10;
  const at = () => ({ block_number: (blk += 10), log_index: 1 });
  const created = NOW_A - 200 * DAY;
  const subscriptions: SubscriptionSeed[] = [
    // ACTIVE: paid 10 days ago, 3 of 12 executions, allowance expiring.
    {
      ...base,
      ...at(),
      subscription_id: "1",
      subscriber: W.alice,
      plan_id: 1,
      max_executions: 12,
      times_executed: 3,
      total_spent: "30000000",
      created_at: created,
      last_paid_at: NOW_A - 10 * DAY,
      next_charge_at: NOW_A + 20 * DAY,
      allowance_expiry: NOW_A + 100 * DAY,
      expect: "ACTIVE",
    },
    // PENDING: never paid; next charge in the past (due at once).
    {
      ...base,
      ...at(),
      subscription_id: "2",
      subscriber: W.bob,
      plan_id: 1,
      created_at: NOW_A - 60,
      next_charge_at: NOW_A - 60,
      expect: "PENDING",
    },
    // PAUSED (paid once, lapsed: PAUSED wins over EXPIRED).
    {
      ...base,
      ...at(),
      subscription_id: "3",
      subscriber: W.carol,
      plan_id: 1,
      times_executed: 2,
      total_spent: "20000000",
      created_at: created,
      last_paid_at: NOW_A - 100 * DAY,
      next_charge_at: NOW_A - 70 * DAY,
      paused: true,
      expect: "PAUSED",
    },
    // CANCELLED while paused: CANCELLED wins over PAUSED.
    {
      ...base,
      ...at(),
      subscription_id: "4",
      subscriber: W.dave,
      plan_id: 1,
      times_executed: 1,
      total_spent: "10000000",
      created_at: created,
      last_paid_at: NOW_A - 5 * DAY,
      next_charge_at: NOW_A + 25 * DAY,
      paused: true,
      cancelled: true,
      expect: "CANCELLED",
    },
    // BLOCKED wins over CANCELLED.
    {
      ...base,
      ...at(),
      subscription_id: "5",
      subscriber: W.erin,
      plan_id: 1,
      times_executed: 1,
      total_spent: "10000000",
      created_at: created,
      last_paid_at: NOW_A - 5 * DAY,
      next_charge_at: NOW_A + 25 * DAY,
      cancelled: true,
      expect: "BLOCKED",
    },
    // BLOCKED although otherwise active (the block is per module, so it covers every plan).
    {
      ...base,
      ...at(),
      subscription_id: "6",
      subscriber: W.erin,
      plan_id: 2,
      times_executed: 4,
      total_spent: "4",
      created_at: created,
      last_paid_at: NOW_A - 60,
      next_charge_at: NOW_A + DAY - 60,
      expect: "BLOCKED",
    },
    // EXPIRED: one second past last_paid + interval + grace.
    {
      ...base,
      ...at(),
      subscription_id: "7",
      subscriber: W.frank,
      plan_id: 1,
      times_executed: 2,
      total_spent: "20000000",
      created_at: created,
      last_paid_at: NOW_A - P1 - 1,
      next_charge_at: NOW_A - P1 - 1 + 30 * DAY,
      expect: "EXPIRED",
    },
    // ACTIVE exactly at the grace boundary (isActive: block.timestamp <= lastPaid + interval + grace).
    {
      ...base,
      ...at(),
      subscription_id: "8",
      subscriber: W.grace,
      plan_id: 1,
      times_executed: 2,
      total_spent: "20000000",
      created_at: created,
      last_paid_at: NOW_A - P1,
      next_charge_at: NOW_A - P1 + 30 * DAY,
      expect: "ACTIVE",
    },
    // Every execution used (3 of 3): still ACTIVE until the window lapses, but nothing queued.
    {
      ...base,
      ...at(),
      subscription_id: "9",
      subscriber: W.heidi,
      plan_id: 1,
      max_executions: 3,
      times_executed: 3,
      total_spent: "30000000",
      created_at: created,
      last_paid_at: NOW_A - DAY,
      next_charge_at: NOW_A + 29 * DAY,
      expect: "ACTIVE",
    },
    // Unblocked again (blocked_subscribers row with blocked = false): ACTIVE, WETH plan with a uint256-sized total,
    // allowance expiry type(uint64).max.
    {
      ...base,
      ...at(),
      subscription_id: "10",
      subscriber: W.ivan,
      plan_id: 2,
      times_executed: 7,
      total_spent: BIG_AMOUNT,
      created_at: created,
      last_paid_at: NOW_A - 3600,
      next_charge_at: NOW_A - 3600 + DAY,
      allowance_expiry: MAX_UINT64,
      expect: "ACTIVE",
    },
    // Paused before the first payment: PAUSED wins over PENDING.
    {
      ...base,
      ...at(),
      subscription_id: "11",
      subscriber: W.judy,
      plan_id: 1,
      created_at: NOW_A - 600,
      next_charge_at: NOW_A - 600,
      paused: true,
      expect: "PAUSED",
    },
    // Alice on plan 2: an old cancelled allocation, then a live one that is PENDING.
    {
      ...base,
      ...at(),
      subscription_id: "12",
      subscriber: W.alice,
      plan_id: 2,
      times_executed: 1,
      total_spent: BIG_AMOUNT,
      created_at: created,
      last_paid_at: NOW_A - 50 * DAY,
      next_charge_at: NOW_A - 49 * DAY,
      cancelled: true,
      expect: "CANCELLED",
    },
    {
      ...base,
      ...at(),
      subscription_id: "13",
      subscriber: W.alice,
      plan_id: 2,
      created_at: NOW_A - 30,
      next_charge_at: NOW_A - 30,
      expect: "PENDING",
    },
    // Alice on plan 3 (token without metadata): EXPIRED long ago; id above 2^64.
    {
      ...base,
      ...at(),
      subscription_id: BIG_SUB_ID,
      subscriber: W.alice,
      plan_id: 3,
      times_executed: 1,
      total_spent: "5",
      created_at: created,
      last_paid_at: NOW_A - 30 * DAY,
      next_charge_at: NOW_A - 23 * DAY,
      expect: "EXPIRED",
    },
    // Module A2 of M1: ACTIVE.
    {
      chain_id: CHAIN_A,
      module: MOD.a2,
      merchant: M1,
      ...at(),
      subscription_id: "15",
      subscriber: W.bob,
      plan_id: 1,
      times_executed: 1,
      total_spent: "1000000",
      created_at: created,
      last_paid_at: NOW_A - DAY,
      next_charge_at: NOW_A + 29 * DAY,
      expect: "ACTIVE",
    },
    // Module A3 of M2: ACTIVE (another merchant's data).
    {
      chain_id: CHAIN_A,
      module: MOD.a3,
      merchant: M2,
      ...at(),
      subscription_id: "16",
      subscriber: W.mallory,
      plan_id: 1,
      times_executed: 1,
      total_spent: "2000000",
      created_at: created,
      last_paid_at: NOW_A - DAY,
      next_charge_at: NOW_A + 29 * DAY,
      expect: "ACTIVE",
    },
    // Chain B, where "now" is the wall clock: one ACTIVE (paid a day ago), one EXPIRED (paid in 2001).
    {
      chain_id: CHAIN_B,
      module: MOD.b1,
      merchant: M1,
      block_number: 50,
      log_index: 0,
      subscription_id: "1",
      subscriber: W.alice,
      plan_id: 1,
      times_executed: 1,
      total_spent: "3000000",
      created_at: wallNow - 2 * DAY,
      last_paid_at: wallNow - DAY,
      next_charge_at: wallNow + 29 * DAY,
      expect: "ACTIVE",
    },
    {
      chain_id: CHAIN_B,
      module: MOD.b1,
      merchant: M1,
      block_number: 50,
      log_index: 3,
      subscription_id: "2",
      subscriber: W.bob,
      plan_id: 1,
      times_executed: 1,
      total_spent: "3000000",
      created_at: 999_000_000,
      last_paid_at: 1_000_000_000,
      next_charge_at: 1_000_000_000 + 30 * DAY,
      expect: "EXPIRED",
    },
  ];
  for (const s of subscriptions) await insertSubscription(sql, s);
  await insertBlocked(sql, { chain_id: CHAIN_A, module: MOD.a1, subscriber: W.erin, blocked: true });
  await insertBlocked(sql, { chain_id: CHAIN_A, module: MOD.a1, subscriber: W.ivan, blocked: false });

  const activity: ActivitySeed[] = [];
  const reasons = ["InsufficientAllowance", "InsufficientBalance", "TransferFailed", "AllowanceExpired"];
  const keepers = [W.keeper, W.keeper2, M1];
  // 60 blocks of M1 activity on chain A, up to three records per block (same transaction), every type and reason.
  for (let i = 0; i < 60; i++) {
    const block = 1000 + i * 7;
    const perBlock = 1 + (i % 3);
    for (let j = 0; j < perBlock; j++) {
      const n = i * 3 + j;
      const kind = n % 5;
      const sub = [
        { id: "1", token: TOK.usdc, module: MOD.a1 },
        { id: "10", token: TOK.weth, module: MOD.a1 },
        { id: BIG_SUB_ID, token: TOK.nometa, module: MOD.a1 },
        { id: "15", token: TOK.usdc, module: MOD.a2 },
      ][n % 4];
      const row: ActivitySeed = {
        chain_id: CHAIN_A,
        block_number: block,
        log_index: j * 2 + (i % 2),
        tx_hash: txHash(block, 1),
        block_time: blockTime(block),
        merchant: M1,
        module: sub.module,
        subscription_id: sub.id,
        type: kind <= 1 ? "CHARGE" : kind <= 3 ? "FAIL" : "REFILL",
        token: sub.token,
        amount: sub.token === TOK.weth ? BIG_AMOUNT : String(1_000_000 + n),
        fee: null,
        reason: null,
        keeper: keepers[n % 3],
      };
      if (row.type === "CHARGE") row.fee = sub.token === TOK.weth ? "3086419725308641972530864197" : String(25_000 + n);
      if (row.type === "FAIL") {
        row.amount = "0";
        row.reason = reasons[n % 4];
        // The indexer may leave the token empty on failures: the API falls back to the plan's token.
        if (n % 7 === 0) row.token = null;
      }
      if (row.type === "REFILL") row.keeper = W.alice;
      activity.push(row);
    }
  }
  // M2 on chain A, and M1 on chain B.
  for (let i = 0; i < 5; i++) {
    activity.push({
      chain_id: CHAIN_A,
      block_number: 1003 + i * 7,
      log_index: 0,
      tx_hash: txHash(1003 + i * 7, 2),
      block_time: blockTime(1003 + i * 7),
      merchant: M2,
      module: MOD.a3,
      subscription_id: "16",
      type: "CHARGE",
      token: TOK.usdc,
      amount: "2000000",
      fee: "50000",
      reason: null,
      keeper: W.keeper,
    });
    activity.push({
      chain_id: CHAIN_B,
      block_number: 60 + i,
      log_index: 0,
      tx_hash: txHash(60 + i, 3),
      block_time: blockTime(60 + i),
      merchant: M1,
      module: MOD.b1,
      subscription_id: "1",
      type: i === 2 ? "FAIL" : "CHARGE",
      token: TOK.usdcB,
      amount: i === 2 ? "0" : "3000000",
      fee: i === 2 ? null : "75000",
      reason: i === 2 ? "InsufficientBalance" : null,
      keeper: W.keeper,
    });
  }
  activity.sort((a, b) => a.chain_id - b.chain_id || a.block_number - b.block_number || a.log_index - b.log_index);
  await insertActivity(sql, activity);
  return { chains, plans, subscriptions, activity, wallNow };
}
