/**
 * `bun run status`'s "renewals at risk": the stored outlooks that still hold (the same joins as `/v0/renewals`), per
 * chain and reason; "not computed yet" only while no outlook is stored. The README's `npm run dev` computes outlooks
 * (its webhooks print `renewal_at_risk`), and before this the line said "not computed yet" whatever the database held.
 */
import { afterAll, beforeAll, expect, test } from "bun:test";
import { loadConfig } from "../../src/common/config";
import type { Db } from "../../src/db/client";
import { formatStatus } from "../../src/cli/status";
import { gatherStatus } from "../../src/http/features/control/status";
import { createTestDb } from "../../testkit/db";

const CHAIN = 31337;
const MODULE = "0x00000000000000000000000000000000000000aa";
const MERCHANT = "0x70997970c51812dc3a010c7d01b50e0d17dc79c8";
const TOKEN = "0x00000000000000000000000000000000000000bb";
const DUE = 2_000_000_000;

let db: Db;
const config = loadConfig({ CHAIN_ID: String(CHAIN) });

/** A subscription due at DUE; `paused` makes it not chargeable. */
async function subscription(id: number, opts: { paused?: boolean } = {}) {
  await db.sql`
    insert into subscriptions (chain_id, subscription_id, module, merchant, subscriber, plan_id, max_executions,
      times_executed, created_at, last_paid_at, next_charge_at, paused, block_number, log_index, tx_hash)
    values (${CHAIN}, ${id}, ${MODULE}, ${MERCHANT}, ${"0x" + id.toString(16).padStart(40, "0")}, 1, 0,
      1, 1, 1, ${DUE}, ${opts.paused ?? false}, ${id}, 0, ${"0x" + "00".repeat(32)})`;
}

/** An outlook of subscription `id` judged for `nextChargeAt`. */
async function outlook(id: number, reason: string | null, nextChargeAt = DUE) {
  await db.sql`
    insert into renewal_outlooks (chain_id, subscription_id, merchant, subscriber, token, next_charge_at, due_at,
      outlook, reason, amount, balance, allowance, credit, shortfall, checked_block, checked_at)
    values (${CHAIN}, ${id}, ${MERCHANT}, ${"0x" + id.toString(16).padStart(40, "0")}, ${TOKEN}, ${nextChargeAt},
      ${DUE}, ${reason ? "at_risk" : "will_renew"}, ${reason}, 10, 0, 0, 0, ${reason ? 10 : 0}, 5, now())`;
}

beforeAll(async () => {
  db = await createTestDb();
});
afterAll(() => db?.close());

test("not computed yet while no outlook is stored; then the outlooks that hold, per chain and reason", async () => {
  const before = await gatherStatus(db.sql, config);
  expect(before.renewals_at_risk).toBeNull();
  expect(formatStatus(before)).toContain("renewals at risk  not computed yet");

  for (const id of [1, 2, 3, 4]) await subscription(id);
  await subscription(5, { paused: true });
  await outlook(1, "InsufficientBalance");
  await outlook(2, "InsufficientBalance");
  await outlook(3, "AllowanceExpired");
  await outlook(4, null); // will renew
  await outlook(5, "InsufficientAllowance"); // paused: no longer holds, as in the API
  await subscription(6);
  await outlook(6, "InsufficientAllowance", DUE - 1); // judged for an earlier due instant: stale

  const report = await gatherStatus(db.sql, config);
  expect(report.renewals_at_risk).toEqual([
    {
      chain_id: CHAIN,
      due: 4,
      at_risk: 3,
      by_reason: { AllowanceExpired: 1, InsufficientAllowance: 0, InsufficientBalance: 2, ManagerNotOwner: 0 },
    },
  ]);
  expect(report.attention).toEqual([]);
  const text = formatStatus(report);
  expect(text).toContain("renewals at risk\n");
  expect(text).toContain(`  ${CHAIN}  3 of 4 due renewals · AllowanceExpired 1, InsufficientBalance 2`);
  expect(text).not.toContain("not computed yet");
});

test("outlooks stored but none holding: none due", async () => {
  await db.sql`update subscriptions set paused = true`;
  const report = await gatherStatus(db.sql, config);
  expect(report.renewals_at_risk).toEqual([]);
  expect(formatStatus(report)).toContain("renewals at risk  none due");
});
