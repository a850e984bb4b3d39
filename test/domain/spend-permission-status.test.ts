import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import fc from "fast-check";
import type { Db, Sql } from "../../src/db/client";
import {
  applyRevoked,
  applyUsed,
  effectiveGrace,
  FOREVER_END,
  permissionFromApproved,
  permissionStatus,
  type PermissionState,
} from "../../src/domain/spend-permission";
import { permissionNow, permissionStatusSql } from "../../src/domain/spend-permission-status";
import { createTestDb } from "../../testkit/db";

let db: Db;
beforeAll(async () => {
  db = await createTestDb();
}, 60_000);
afterAll(async () => {
  await db.close();
}, 60_000);

/** The SQL rule's answer for one stored permission at `nowS`, through the real table and the chain's grace. */
async function sqlStatus(s: PermissionState, nowS: number, graceS: number): Promise<string> {
  return db.sql.begin(async (tx) => {
    await tx`insert into chains (chain_id, processor, start_block, spend_permission_grace_s)
      values (1, '0xp', 0, ${graceS})`;
    await tx`insert into spend_permissions (chain_id, subscription_id, hash, manager, merchant, subscriber, token,
        allowance, period_s, start_s, end_s, salt, extra_data, times_executed, total_spent, last_period_end,
        next_charge_at, revoked, block_number, log_index, tx_hash, created_at)
      values (1, 1, '0xh', '0xm', '0xs', '0xa', '0xt', ${s.allowance.toString()}, ${s.period}, ${s.start}, ${s.end}, 0,
        '0x', ${s.timesExecuted}, ${s.totalSpent.toString()}, ${s.paidThrough}, ${s.nextChargeAt}, ${s.revoked}, 1, 0,
        '0x', now())`;
    const q = tx as unknown as Sql;
    // "now" of the row is the wall clock: the case's instant replaces it, the grace is the chain's.
    const [row] = await tx<{ status: string }[]>`
      select ${permissionStatusSql(q)} as status
      from spend_permissions sp cross join (select ${nowS}::bigint as now_s, grace_s from ${permissionNow(q, 1)}) n`;
    await tx`delete from spend_permissions`;
    await tx`delete from chains`;
    return row!.status;
  });
}

describe("the permission status rule", () => {
  test("SQL and TypeScript agree around every boundary (end, paid_through + grace, the grace cap)", async () => {
    const input = fc.record({
      start: fc.integer({ min: 0, max: 2_000_000_000 }),
      period: fc.integer({ min: 1, max: 10_000_000 }),
      periods: fc.integer({ min: 1, max: 5 }),
      forever: fc.boolean(),
      charges: fc.integer({ min: 0, max: 3 }),
      revoked: fc.boolean(),
      grace: fc.integer({ min: 0, max: 20_000_000 }),
    });
    await fc.assert(
      fc.asyncProperty(input, fc.integer({ min: -2, max: 2 }), fc.nat(2), async (c, delta, at) => {
        const end = c.forever ? FOREVER_END : c.start + c.periods * c.period + 100;
        const s = permissionFromApproved({
          account: "0x1",
          spender: "0x2",
          token: "0x3",
          allowance: 10n,
          period: c.period,
          start: c.start,
          end,
          salt: 0n,
          extraData: "0x",
        } as never);
        for (let i = 0; i < c.charges; i++) {
          const ps = c.start + i * c.period;
          applyUsed(s, { start: ps, end: Math.min(ps + c.period, end), spend: 10n });
        }
        if (c.revoked) applyRevoked(s, "subscriber", c.start);
        const instants = [end, s.paidThrough + effectiveGrace(s, c.grace), s.paidThrough + c.grace];
        const nowS = instants[at]! + delta;
        expect(await sqlStatus(s, nowS, c.grace)).toBe(permissionStatus(s, nowS, c.grace));
      }),
      { numRuns: 150 },
    );
  });
});
