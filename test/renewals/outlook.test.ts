import { describe, expect, test } from "bun:test";
import { evaluateRenewals, type BlockReads, type DueCharge, type WalletFunds } from "../../src/renewals/outlook";

const USDC = "0xtoken";
const DAI = "0xdai";
const T0 = 1_800_000_000;

/** A charge of `amount` due at `at` (id doubles as key). */
const charge = (id: number, amount: bigint, at: number, extra: Partial<DueCharge> = {}): DueCharge => ({
  key: String(id),
  onChainId: BigInt(id),
  wallet: "0xw",
  token: USDC,
  amount,
  nextChargeAt: at,
  allowanceExpiry: 0,
  ...extra,
});

/** Reads at `blockTime` where each `<wallet>:<token>` has the given funds and each key the given credit (default 0). */
const reads = (
  funds: Record<string, WalletFunds | undefined>,
  credits: Record<string, bigint | undefined> = {},
  blockTime = T0,
): BlockReads => ({
  blockTime,
  funds: (w, t) => funds[`${w}:${t}`],
  credit: (k) => (k in credits ? credits[k] : 0n),
});

const MAX = 2n ** 256n - 1n;

describe("evaluateRenewals", () => {
  test("enough of everything: will_renew, shortfall 0, what the block showed", () => {
    const out = evaluateRenewals(
      [charge(1, 9_990_000n, T0 + 100)],
      reads({ "0xw:0xtoken": { balance: 20_000_000n, allowance: MAX } }),
    );
    expect(out.get("1")).toEqual({
      dueAt: T0 + 100,
      outlook: "will_renew",
      reason: null,
      amount: 9_990_000n,
      balance: 20_000_000n,
      allowance: MAX,
      credit: 0n,
      shortfall: 0n,
    });
  });

  test("each reason with its shortfall", () => {
    const funds = (balance: bigint, allowance: bigint) => reads({ "0xw:0xtoken": { balance, allowance } });
    const low = evaluateRenewals([charge(1, 9_990_000n, T0)], funds(4_200_000n, MAX)).get("1")!;
    expect([low.outlook, low.reason, low.shortfall]).toEqual(["at_risk", "InsufficientBalance", 5_790_000n]);
    const approve = evaluateRenewals([charge(1, 9_990_000n, T0)], funds(50_000_000n, 4_200_000n)).get("1")!;
    expect([approve.reason, approve.shortfall]).toEqual(["InsufficientAllowance", 5_790_000n]);
    // The allowance is checked before the balance (the contract's order).
    const both = evaluateRenewals([charge(1, 10n, T0)], funds(3n, 4n)).get("1")!;
    expect([both.reason, both.shortfall]).toEqual(["InsufficientAllowance", 6n]);
    const expired = evaluateRenewals([charge(1, 10n, T0 + 50, { allowanceExpiry: T0 + 49 })], funds(100n, 100n)).get(
      "1",
    )!;
    expect([expired.reason, expired.shortfall]).toEqual(["AllowanceExpired", 10n]);
  });

  test("allowance expiry: exactly at the due instant still renews; the due instant is never before the block", () => {
    const f = { "0xw:0xtoken": { balance: 100n, allowance: 100n } };
    expect(evaluateRenewals([charge(1, 10n, T0 + 50, { allowanceExpiry: T0 + 50 })], reads(f)).get("1")!.outlook).toBe(
      "will_renew",
    );
    // Past due (next_charge_at before the block): T is the block's time, and an expiry before it fails the charge.
    const past = evaluateRenewals([charge(1, 10n, T0 - 500, { allowanceExpiry: T0 - 1 })], reads(f)).get("1")!;
    expect([past.dueAt, past.reason]).toEqual([T0, "AllowanceExpired"]);
    // An expiry before everything else, even with credit covering the charge (checked first by the contract).
    const first = evaluateRenewals([charge(1, 10n, T0 + 5, { allowanceExpiry: T0 })], reads(f, { "1": 10n })).get("1")!;
    expect(first.reason).toBe("AllowanceExpired");
  });

  test("credit covering the charge renews whatever the funds, and consumes none of them", () => {
    const out = evaluateRenewals(
      [charge(1, 10n, T0 + 1), charge(2, 10n, T0 + 2)],
      reads({ "0xw:0xtoken": { balance: 10n, allowance: 10n } }, { "1": 10n }),
    );
    expect(out.get("1")).toMatchObject({ outlook: "will_renew", credit: 10n });
    expect(out.get("2")).toMatchObject({ outlook: "will_renew", credit: 0n, balance: 10n });
    // Credit below the amount is not drawn (the contract draws only a whole charge): the funds decide.
    const partial = evaluateRenewals(
      [charge(1, 10n, T0)],
      reads({ "0xw:0xtoken": { balance: 5n, allowance: MAX } }, { "1": 9n }),
    );
    expect(partial.get("1")).toMatchObject({ reason: "InsufficientBalance", shortfall: 5n, credit: 9n });
  });

  test("two 10 renewals against a balance of 15: the later one is at risk for 5", () => {
    const out = evaluateRenewals(
      [charge(2, 10_000_000n, T0 + 200), charge(1, 10_000_000n, T0 + 100)],
      reads({ "0xw:0xtoken": { balance: 15_000_000n, allowance: MAX } }),
    );
    expect(out.get("1")).toMatchObject({ outlook: "will_renew", shortfall: 0n, balance: 15_000_000n });
    expect(out.get("2")).toMatchObject({
      outlook: "at_risk",
      reason: "InsufficientBalance",
      balance: 15_000_000n, // what the block showed, not the running balance
      shortfall: 5_000_000n,
    });
  });

  test("ties of due instant go by on-chain id as a number, not as text", () => {
    const out = evaluateRenewals(
      [charge(10, 10n, T0), charge(9, 10n, T0)],
      reads({ "0xw:0xtoken": { balance: 10n, allowance: MAX } }),
    );
    expect(out.get("9")!.outlook).toBe("will_renew");
    expect(out.get("10")!.reason).toBe("InsufficientBalance");
    // Two past-due charges are both due at the block's time: the id decides, not the older next_charge_at.
    const past = evaluateRenewals(
      [charge(3, 10n, T0 - 100), charge(2, 10n, T0 - 50)],
      reads({ "0xw:0xtoken": { balance: 10n, allowance: MAX } }),
    );
    expect(past.get("2")!.outlook).toBe("will_renew");
    expect(past.get("3")!.outlook).toBe("at_risk");
  });

  test("the allowance is shared too; an at-risk charge consumes nothing, so a smaller later one can renew", () => {
    const out = evaluateRenewals(
      [charge(1, 6n, T0 + 1), charge(2, 10n, T0 + 2), charge(3, 4n, T0 + 3), charge(4, 1n, T0 + 4)],
      reads({ "0xw:0xtoken": { balance: 100n, allowance: 10n } }),
    );
    expect(out.get("1")!.outlook).toBe("will_renew"); // allowance 10 → 4
    expect(out.get("2")).toMatchObject({ reason: "InsufficientAllowance", shortfall: 6n });
    expect(out.get("3")!.outlook).toBe("will_renew"); // 4 → 0
    expect(out.get("4")).toMatchObject({ reason: "InsufficientAllowance", shortfall: 1n });
  });

  test("an expired allowance consumes nothing either", () => {
    const out = evaluateRenewals(
      [charge(1, 10n, T0 + 1, { allowanceExpiry: T0 }), charge(2, 10n, T0 + 2)],
      reads({ "0xw:0xtoken": { balance: 10n, allowance: 10n } }),
    );
    expect(out.get("1")!.reason).toBe("AllowanceExpired");
    expect(out.get("2")!.outlook).toBe("will_renew");
  });

  test("other wallets and other tokens draw on their own funds", () => {
    const out = evaluateRenewals(
      [charge(1, 10n, T0 + 1), charge(2, 10n, T0 + 2, { token: DAI }), charge(3, 10n, T0 + 3, { wallet: "0xv" })],
      reads({
        "0xw:0xtoken": { balance: 10n, allowance: MAX },
        "0xw:0xdai": { balance: 10n, allowance: MAX },
        "0xv:0xtoken": { balance: 10n, allowance: MAX },
      }),
    );
    expect([...out.values()].map((o) => o.outlook)).toEqual(["will_renew", "will_renew", "will_renew"]);
  });

  test("a group whose funds or any credit could not be read gets no outlook; other groups do", () => {
    const charges = [charge(1, 10n, T0), charge(2, 10n, T0 + 1), charge(3, 10n, T0, { wallet: "0xv" })];
    const out = evaluateRenewals(
      charges,
      reads({ "0xw:0xtoken": { balance: 100n, allowance: MAX }, "0xv:0xtoken": undefined }, { "2": undefined }),
    );
    expect([...out.keys()]).toEqual([]);
    const other = evaluateRenewals(
      charges,
      reads({ "0xw:0xtoken": undefined, "0xv:0xtoken": { balance: 9n, allowance: MAX } }),
    );
    expect([...other.keys()]).toEqual(["3"]);
    expect(other.get("3")!.reason).toBe("InsufficientBalance");
  });
});

describe("evaluateRenewals with spend permissions (spend-permissions §4)", () => {
  const MGR = "0xmanager";
  /** A permission's charge: `manager` set, the hash as the id. */
  const permission = (id: bigint, amount: bigint, at: number): DueCharge => ({
    key: `p${id}`,
    onChainId: id,
    wallet: "0xw",
    token: USDC,
    amount,
    nextChargeAt: at,
    allowanceExpiry: 0,
    manager: MGR,
  });
  /** Reads where the manager's ownership of `0xw` is `owner` (undefined: the read failed). */
  const withOwner = (r: BlockReads, owner: boolean | null | undefined): BlockReads => ({
    ...r,
    isOwner: (w, m) => (w === "0xw" && m === MGR ? owner : undefined),
  });
  const funds = (balance: bigint, allowance = 0n) => reads({ "0xw:0xtoken": { balance, allowance } });

  test("allowance 9990000 against a balance of 4000000: InsufficientBalance, shortfall 5990000, credit 0", () => {
    const out = evaluateRenewals([permission(7n, 9_990_000n, T0 + 60)], withOwner(funds(4_000_000n), true));
    expect(out.get("p7")).toEqual({
      dueAt: T0 + 60,
      outlook: "at_risk",
      reason: "InsufficientBalance",
      amount: 9_990_000n,
      balance: 4_000_000n,
      allowance: 9_990_000n, // the period's allowance, not an ERC-20 allowance
      credit: 0n,
      shortfall: 5_990_000n,
    });
    const ok = evaluateRenewals([permission(7n, 9_990_000n, T0 + 60)], withOwner(funds(10_000_000n), true));
    expect(ok.get("p7")).toMatchObject({ outlook: "will_renew", reason: null, shortfall: 0n });
  });

  test("the manager no longer an owner comes first: ManagerNotOwner for the full amount, consuming nothing", () => {
    const out = evaluateRenewals(
      [permission(1n, 10n, T0 + 1), charge(2, 10n, T0 + 2)],
      withOwner(funds(10n, MAX), false),
    );
    expect(out.get("p1")).toMatchObject({ outlook: "at_risk", reason: "ManagerNotOwner", shortfall: 10n });
    expect(out.get("2")!.outlook).toBe("will_renew");
  });

  test("an account that does not answer isOwnerAddress skips that check; a failed read leaves the group out", () => {
    const skipped = evaluateRenewals([permission(1n, 10n, T0)], withOwner(funds(10n), null));
    expect(skipped.get("p1")!.outlook).toBe("will_renew");
    const failed = evaluateRenewals(
      [permission(1n, 10n, T0), charge(2, 10n, T0)],
      withOwner(funds(100n, MAX), undefined),
    );
    expect(failed.size).toBe(0);
    // A module subscription needs no ownership read.
    expect(evaluateRenewals([charge(2, 10n, T0)], withOwner(funds(100n, MAX), undefined)).size).toBe(1);
  });

  test("two permissions of one account against 15000000: the earlier renews, the later is at risk", () => {
    const out = evaluateRenewals(
      [permission(2n, 9_990_000n, T0 + 200), permission(3n, 9_990_000n, T0 + 100)],
      withOwner(funds(15_000_000n), true),
    );
    expect(out.get("p3")).toMatchObject({ outlook: "will_renew", balance: 15_000_000n });
    expect(out.get("p2")).toMatchObject({
      outlook: "at_risk",
      reason: "InsufficientBalance",
      balance: 15_000_000n,
      shortfall: 4_980_000n,
    });
  });

  test("ties of due instant: module subscriptions first (by id), then permissions (by hash), whatever the ids", () => {
    const hashLow = BigInt(`0x${"00".repeat(31)}01`);
    const hashHigh = BigInt(`0x${"ff".repeat(32)}`);
    // All past due: each due instant is the block's time, so only the tie order decides.
    const out = evaluateRenewals(
      [permission(hashHigh, 10n, T0 - 300), permission(hashLow, 10n, T0 - 200), charge(99, 10n, T0 - 100)],
      withOwner(funds(20n, MAX), true),
    );
    expect(out.get("99")!.outlook).toBe("will_renew");
    expect(out.get(`p${hashLow}`)!.outlook).toBe("will_renew");
    expect(out.get(`p${hashHigh}`)).toMatchObject({
      outlook: "at_risk",
      reason: "InsufficientBalance",
      shortfall: 10n,
    });
  });

  test("a permission's charge draws on the balance only: a later module charge keeps the whole allowance", () => {
    const out = evaluateRenewals(
      [permission(1n, 5n, T0 + 1), charge(2, 10n, T0 + 2)],
      withOwner(funds(15n, 10n), true),
    );
    expect(out.get("p1")!.outlook).toBe("will_renew");
    expect(out.get("2")).toMatchObject({ outlook: "will_renew", allowance: 10n, balance: 15n });
  });
});
