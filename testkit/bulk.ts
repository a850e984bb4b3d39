/**
 * A large merchant on top of the standard fixture (testkit/seed.ts), written with set-based SQL: `activity` records
 * and `subscriptions` allocations on one module of chain A, all at or below the fixture's indexed block. Tokens
 * rotate through USDC (6 decimals), WETH (18), a token without metadata and a token whose symbol is a spreadsheet
 * formula with a comma, a quote and a line break (2 decimals), so CSV escaping and exact decimals are exercised.
 */
import type { Sql } from "../src/db/client";
import { CHAIN_A, INDEXED_BLOCK_A, NOW_A, TOK, W } from "./seed";

/** The large merchant. */
export const BIG = "0x00000000000000000000000000000000000b16b1";
/** Its module on chain A. */
export const BIG_MODULE = "0xb16b16b16b16b16b16b16b16b16b16b16b16b16b";
/** A token whose symbol a spreadsheet would run as a formula. */
export const EVIL_TOKEN = "0x0000000000000000000000000000000000e71100";
/** The symbol of {@link EVIL_TOKEN}. */
export const EVIL_SYMBOL = '=HYPERLINK("http://x",1),\n';

/** Records per block: the activity of `n` records spans n / 16 blocks from block 1500. */
const PER_BLOCK = 16;
const FIRST_BLOCK = 1500;

/** Writes the merchant's `activity` records and `subscriptions` allocations (plans 1 to 4, one token each). */
export async function seedBigMerchant(sql: Sql, opts: { activity: number; subscriptions: number }): Promise<void> {
  if (
    FIRST_BLOCK + opts.activity / PER_BLOCK >= INDEXED_BLOCK_A ||
    FIRST_BLOCK + opts.subscriptions >= INDEXED_BLOCK_A
  ) {
    throw new Error("the big merchant must stay below the fixture's indexed block");
  }
  const tokens = [TOK.usdc, TOK.weth, TOK.nometa, EVIL_TOKEN];
  await sql`insert into tokens (chain_id, address, symbol, decimals)
    values (${CHAIN_A}, ${EVIL_TOKEN}, ${EVIL_SYMBOL}, 2) on conflict do nothing`;
  await sql`insert into modules (chain_id, address, merchant, block_number, log_index, tx_hash)
    values (${CHAIN_A}, ${BIG_MODULE}, ${BIG}, 1, 9, ${"0x" + "b1".repeat(32)})`;
  for (const [i, token] of tokens.entries()) {
    await sql`insert into plans (chain_id, module, plan_id, token, amount, interval_s, grace_s, block_number, log_index)
      values (${CHAIN_A}, ${BIG_MODULE}, ${i + 1}, ${token}, 1000000, 2592000, 259200, 1, ${i + 1})`;
  }
  // Amounts: USDC and the formula token small, WETH with 18 decimals and a long fraction; every type and null.
  await sql`insert into activity (chain_id, block_number, log_index, tx_hash, block_hash, block_time, merchant, module,
      subscription_id, type, token, amount, fee, reason, keeper)
    select ${CHAIN_A}, ${FIRST_BLOCK} + g / ${PER_BLOCK}, g % ${PER_BLOCK}, '0xc' || lpad(to_hex(g), 63, '0'),
      '0x' || lpad(to_hex(${FIRST_BLOCK} + g / ${PER_BLOCK}), 64, '0'),
      to_timestamp(${NOW_A - 10_000_000}::bigint + g * 12), ${BIG}, ${BIG_MODULE}, g % 97 + 1,
      case g % 3 when 0 then 'CHARGE' when 1 then 'FAIL' else 'REFILL' end,
      (${tokens}::text[])[1 + g % 4],
      case when g % 3 = 1 then 0 when g % 4 = 1 then g::numeric * 1000000000123 else 1234500 + g end,
      case when g % 3 = 0 then g * 10 end,
      case when g % 3 = 1 then 'InsufficientBalance' end,
      case when g % 3 <> 2 then ${W.keeper} end
    from generate_series(0, ${opts.activity - 1}) g`;
  await sql`insert into subscriptions (chain_id, subscription_id, module, merchant, subscriber, plan_id,
      max_executions, times_executed, total_spent, created_at, last_paid_at, next_charge_at, allowance_expiry,
      paused, cancelled, block_number, log_index, tx_hash)
    select ${CHAIN_A}, 1000000 + g, ${BIG_MODULE}, ${BIG}, '0xd' || lpad(to_hex(g), 39, '0'), 1 + g % 4,
      case when g % 3 = 0 then 12 else 0 end, g % 5, (g % 5) * 1000000 + g, ${NOW_A - 100 * 86400}::bigint,
      case when g % 5 = 0 then 0 else ${NOW_A - 86400}::bigint end, ${NOW_A + 86400}::bigint, 0,
      g % 11 = 0, g % 13 = 0, ${FIRST_BLOCK} + g / 2, g % 2, '0xe' || lpad(to_hex(g), 63, '0')
    from generate_series(0, ${opts.subscriptions - 1}) g`;
}
