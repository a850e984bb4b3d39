import { describe, expect, test } from "bun:test";
import {
  FOREVER_END,
  applyRevoked,
  applyUsed,
  expiryInstant,
  nextChargeInstant,
  permissionFromApproved,
  permissionPeriodView,
  permissionStatus,
  type PermissionState,
} from "../../src/domain/spend-permission";

const S = 1_767_225_600;
const P = 2_592_000;
const G = 86_400;
const H = 3_600;
const D = 86_400;

const approved = (fields: Partial<PermissionState> = {}) =>
  permissionFromApproved({
    account: "0x1111111111111111111111111111111111111111",
    spender: "0x2222222222222222222222222222222222222222",
    token: "0x3333333333333333333333333333333333333333",
    allowance: 9_990_000n,
    period: P,
    start: S,
    end: FOREVER_END,
    salt: 1n,
    extraData: "0x",
    ...fields,
  });

const row = (s: PermissionState, now: number) => {
  const view = permissionPeriodView(s, now);
  return [permissionStatus(s, now, G), nextChargeInstant(s, now), view.isSubscribed, view.remainingInPeriod];
};

describe("a permission's status, next charge and period through the example timeline", () => {
  test("approve before start, charge, rollover, lapse, charge again, revoke", () => {
    const s = approved();
    expect(row(s, S - 10 * D)).toEqual(["PENDING", S, false, null]);
    expect(row(s, S + H)).toEqual(["PENDING", S, true, 9_990_000n]);
    applyUsed(s, { start: S, end: S + P, spend: 9_990_000n });
    expect(row(s, S + H)).toEqual(["ACTIVE", S + P, true, 0n]);
    expect(row(s, S + P)).toEqual(["ACTIVE", S + P, true, 9_990_000n]);
    expect(row(s, S + P + G - 1)).toEqual(["ACTIVE", S + P, true, 9_990_000n]);
    expect(row(s, S + P + G)).toEqual(["EXPIRED", S + P, true, 9_990_000n]);
    expect(expiryInstant(s, G)).toBe(S + P + G);
    applyUsed(s, { start: S + P, end: S + 2 * P, spend: 9_990_000n });
    expect(row(s, S + P + G + 5)).toEqual(["ACTIVE", S + 2 * P, true, 0n]);
    expect([s.timesExecuted, s.totalSpent, s.paidThrough]).toEqual([2, 19_980_000n, S + 2 * P]);
    applyRevoked(s, "subscriber", S + P + G + 10);
    // Revoked: the period fields are still what the contract shows (the charged current period).
    expect(row(s, S + P + G + 10)).toEqual(["CANCELLED", null, false, 0n]);
    expect(expiryInstant(s, G)).toBeNull();
  });

  test("partial spends in one period add up; the grace is capped at the period", () => {
    const s = approved({ period: 3_600 });
    applyUsed(s, { start: S, end: S + 3_600, spend: 5n });
    applyUsed(s, { start: S, end: S + 3_600, spend: 2n });
    expect(s.lastPeriod).toEqual({ start: S, end: S + 3_600, spend: 7n });
    expect(permissionPeriodView(s, S + 10).remainingInPeriod).toBe(9_990_000n - 7n);
    // grace 1 day on an hourly permission: lapsed one period after the paid one ends
    expect(expiryInstant(s, G)).toBe(S + 7_200);
    expect(permissionStatus(s, S + 7_199, G)).toBe("ACTIVE");
    expect(permissionStatus(s, S + 7_200, G)).toBe("EXPIRED");
  });

  test("a finite end: the last period is cut, nothing is due after it, EXPIRED at end", () => {
    const end = S + 2 * P + 100;
    const s = approved({ end });
    expect(expiryInstant(s, G)).toBe(end); // never charged: EXPIRED when it ends
    applyUsed(s, { start: S + 2 * P, end, spend: 9_990_000n });
    expect(nextChargeInstant(s, S + 2 * P + 1)).toBeNull();
    expect(expiryInstant(s, G)).toBe(end);
    expect(row(s, end - 1)).toEqual(["ACTIVE", null, true, 0n]);
    expect(row(s, end)).toEqual(["EXPIRED", null, false, null]);
  });
});
