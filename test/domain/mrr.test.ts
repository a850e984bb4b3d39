import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import fc from "fast-check";
import type { Db, Sql } from "../../src/db/client";
import {
  allocationMrr,
  allocationMrrSql,
  leaveReason,
  movementKind,
  permissionLeaveReason,
  rate,
} from "../../src/domain/mrr";
import { SUBSCRIPTION_STATUSES } from "../../src/domain/status";
import { createTestDb } from "../../testkit/db";

let db: Db;
beforeAll(async () => {
  db = await createTestDb();
}, 60_000);
afterAll(async () => {
  await db.close();
}, 60_000);

describe("an allocation's MRR", () => {
  test("SQL and TypeScript agree, up to uint256 amounts", async () => {
    const amount = fc.oneof(fc.bigInt({ min: 0n, max: 10n ** 12n }), fc.bigInt({ min: 0n, max: 2n ** 256n - 1n }));
    await fc.assert(
      fc.asyncProperty(
        fc.constantFrom(...SUBSCRIPTION_STATUSES),
        amount,
        fc.integer({ min: 0, max: 2 ** 32 - 1 }),
        async (status, a, interval) => {
          const q = db.sql as unknown as Sql;
          const [row] = await db.sql<{ mrr: string }[]>`
            select ${allocationMrrSql(q, db.sql`${status}::text`)}::text as mrr
            from (select ${a.toString()}::numeric(78,0) as amount, ${interval}::bigint as interval_s) p`;
          expect(BigInt(row!.mrr)).toBe(allocationMrr(status, a, interval));
        },
      ),
      { numRuns: 200 },
    );
  });

  test("floor(amount × 2,629,800 ÷ interval) while ACTIVE, else 0", () => {
    expect(allocationMrr("ACTIVE", 10_000_000n, 7 * 86_400)).toBe(43_482_142n);
    expect(allocationMrr("ACTIVE", 90_000_000n, 30 * 86_400)).toBe(91_312_500n);
    for (const s of SUBSCRIPTION_STATUSES.filter((s) => s !== "ACTIVE")) expect(allocationMrr(s, 1n, 1)).toBe(0n);
  });
});

describe("movement kinds and rates", () => {
  test("the table of analytics.md §2", () => {
    expect(movementKind(0n, 5n, false)).toBe("new");
    expect(movementKind(0n, 5n, true)).toBe("reactivation");
    expect(movementKind(5n, 7n, true)).toBe("expansion");
    expect(movementKind(7n, 5n, true)).toBe("contraction");
    expect(movementKind(5n, 0n, true)).toBe("churn");
    expect(movementKind(5n, 5n, true)).toBeNull();
  });

  test("6 digits, half to even, null on a zero denominator", () => {
    expect(rate(1n, 3n)).toBe("0.333333");
    expect(rate(2n, 3n)).toBe("0.666667");
    expect(rate(1n, 8_000_000n)).toBe("0.000000"); // 0.000000125: below half
    expect(rate(5n, 10_000_000n)).toBe("0.000000"); // exactly half, 0 is even
    expect(rate(15n, 10_000_000n)).toBe("0.000002"); // exactly half, 1 rounds to 2
    expect(rate(3n, 2n)).toBe("1.500000");
    expect(rate(-1n, 3n)).toBe("-0.333333");
    expect(rate(1n, 0n)).toBeNull();
  });

  test("equals exact decimal rounding for any fraction", () => {
    fc.assert(
      fc.property(
        fc.bigInt({ min: -(10n ** 30n), max: 10n ** 30n }),
        fc.bigInt({ min: 1n, max: 10n ** 30n }),
        (n, d) => {
          // Round-trip: the string is within half a unit of the exact value, ties going to the even digit.
          const r = rate(n, d)!;
          const units = BigInt(r.replace(".", ""));
          const diff2 = 2n * (n * 1_000_000n - units * d); // 2·(exact − rounded)·d
          const abs = diff2 < 0n ? -diff2 : diff2;
          expect(abs <= d).toBe(true);
          if (abs === d) expect(units % 2n).toBe(0n);
        },
      ),
      { numRuns: 500 },
    );
  });
});

describe("why an allocation left ACTIVE", () => {
  test("a module allocation: blocked, paused, who cancelled, or its last failed charge", () => {
    const none = { cancelledBySubscriber: false, lastFailure: null };
    expect(leaveReason("BLOCKED", none)).toBe("blocked");
    expect(leaveReason("PAUSED", none)).toBe("paused");
    expect(leaveReason("CANCELLED", { ...none, cancelledBySubscriber: true })).toBe("cancelled_by_subscriber");
    expect(leaveReason("CANCELLED", none)).toBe("cancelled_by_merchant");
    expect(leaveReason("EXPIRED", { ...none, lastFailure: "InsufficientBalance" })).toBe("InsufficientBalance");
    expect(leaveReason("EXPIRED", none)).toBe("not_charged");
    expect(leaveReason("ACTIVE", none)).toBeNull();
    expect(leaveReason("PENDING", none)).toBeNull();
  });

  test("a Spend Permission: revoked_by names who cancelled (unknown: the subscriber); a lapse or end: not_charged", () => {
    expect(permissionLeaveReason("CANCELLED", "subscriber")).toBe("cancelled_by_subscriber");
    expect(permissionLeaveReason("CANCELLED", "merchant")).toBe("cancelled_by_merchant");
    expect(permissionLeaveReason("CANCELLED", "unknown")).toBe("cancelled_by_subscriber");
    expect(permissionLeaveReason("EXPIRED", null)).toBe("not_charged");
    expect(permissionLeaveReason("ACTIVE", null)).toBeNull();
  });
});
