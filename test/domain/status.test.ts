import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import fc from "fast-check";
import type { Db, Sql } from "../../src/db/client";
import { paidUntil, statusJoins, statusSql, subscriptionStatus, type StatusInput } from "../../src/domain/status";
import { createTestDb } from "../../testkit/db";

let db: Db;
beforeAll(async () => {
  db = await createTestDb();
}, 60_000);
afterAll(async () => {
  await db.close();
}, 60_000);

/** The SQL rule's answer for one allocation at `nowS`, through the real tables and joins. */
async function sqlStatus(s: StatusInput, nowS: number): Promise<string> {
  return db.sql.begin(async (tx) => {
    await tx`insert into plans (chain_id, module, plan_id, token, amount, interval_s, grace_s, block_number, log_index)
      values (1, '0xm', 1, '0xt', 1, ${s.interval}, ${s.grace}, 1, 0)`;
    await tx`insert into subscriptions (chain_id, subscription_id, module, merchant, subscriber, plan_id, max_executions,
        times_executed, created_at, last_paid_at, next_charge_at, paused, cancelled, block_number, log_index, tx_hash)
      values (1, 1, '0xm', '0xmerchant', '0xw', 1, 0, ${s.timesExecuted}, 0, ${s.lastPaidAt}, 0, ${s.paused},
        ${s.cancelled}, 1, 0, '0x')`;
    await tx`insert into blocked_subscribers (chain_id, module, subscriber, blocked, block_number, log_index)
      values (1, '0xm', '0xw', ${s.blocked}, 1, 0)`;
    const q = tx as unknown as Sql; // the fragments take the client type; a transaction renders them the same way
    const [row] = await tx<{ status: string }[]>`
      select ${statusSql(q)} as status
      from subscriptions s ${statusJoins(q)} cross join (select ${nowS}::bigint as now_s) n`;
    // Leave nothing behind: the next case starts from empty tables.
    await tx`delete from subscriptions`;
    await tx`delete from plans`;
    await tx`delete from blocked_subscribers`;
    return row!.status;
  });
}

describe("the status rule", () => {
  test("SQL and TypeScript agree, at and around the expiry boundary", async () => {
    const input = fc.record({
      blocked: fc.boolean(),
      cancelled: fc.boolean(),
      paused: fc.boolean(),
      timesExecuted: fc.integer({ min: 0, max: 3 }),
      lastPaidAt: fc.integer({ min: 0, max: 2_000_000_000 }),
      interval: fc.integer({ min: 1, max: 10_000_000 }),
      grace: fc.integer({ min: 0, max: 10_000_000 }),
    });
    await fc.assert(
      fc.asyncProperty(input, fc.integer({ min: -2, max: 2 }), async (s, delta) => {
        const nowS = paidUntil(s) + delta;
        expect(await sqlStatus(s, nowS)).toBe(subscriptionStatus(s, nowS));
      }),
      { numRuns: 150 },
    );
  });

  test("precedence: BLOCKED, CANCELLED, PAUSED, PENDING, EXPIRED, ACTIVE", () => {
    const base: StatusInput = {
      blocked: false,
      cancelled: false,
      paused: false,
      timesExecuted: 1,
      lastPaidAt: 100,
      interval: 10,
      grace: 5,
    };
    expect(subscriptionStatus(base, 115)).toBe("ACTIVE");
    expect(subscriptionStatus(base, 116)).toBe("EXPIRED");
    expect(subscriptionStatus({ ...base, timesExecuted: 0 }, 116)).toBe("PENDING");
    expect(subscriptionStatus({ ...base, timesExecuted: 0, paused: true }, 116)).toBe("PAUSED");
    expect(subscriptionStatus({ ...base, paused: true, cancelled: true }, 116)).toBe("CANCELLED");
    expect(subscriptionStatus({ ...base, paused: true, cancelled: true, blocked: true }, 116)).toBe("BLOCKED");
  });
});
