import { afterAll, beforeAll, beforeEach, describe, expect, test } from "bun:test";
import type { Db } from "../../src/db/client";
import { ClaimTakenError } from "../../src/keeper/errors";
import {
  adoptSentClaim,
  claimSubscription,
  findDueSubscriptions,
  noteRecheck,
  recordClaimTx,
  releaseClaim,
} from "../../src/keeper/queries";
import { createTestDb } from "../../testkit/db";

const CHAIN = 31337;
const MODULE = "0x00000000000000000000000000000000000000aa";
const MERCHANT = "0x00000000000000000000000000000000000000bb";
const NOW = 1_000_000n;
const SCHEDULE = [100, 200];
const ME = "0xkeeper:me";

let db: Db;
let block = 1;

beforeAll(async () => {
  db = await createTestDb();
}, 60_000);

afterAll(async () => {
  await db.close();
}, 60_000);

beforeEach(async () => {
  const { sql } = db;
  for (const table of [
    "subscriptions",
    "plans",
    "activity",
    "events",
    "blocked_subscribers",
    "keeper_claims",
    "keeper_rechecks",
  ]) {
    await sql`delete from ${sql(table)}`;
  }
  // plan 1: interval 1000 s, grace 500 s
  await sql`insert into plans (chain_id, module, plan_id, token, amount, interval_s, grace_s, block_number, log_index)
            values (${CHAIN}, ${MODULE}, 1, '0x00000000000000000000000000000000000000cc', 10, 1000, 500, 1, 0)`;
});

type SubRow = {
  id: number;
  subscriber?: string;
  nextChargeAt?: bigint;
  lastPaidAt?: bigint;
  timesExecuted?: number;
  maxExecutions?: number;
  allowanceExpiry?: bigint;
  paused?: boolean;
  cancelled?: boolean;
};

async function addSubscription(s: SubRow) {
  await db.sql`
    insert into subscriptions (chain_id, subscription_id, module, merchant, subscriber, plan_id, max_executions,
      times_executed, created_at, last_paid_at, next_charge_at, allowance_expiry, paused, cancelled,
      block_number, log_index, tx_hash)
    values (${CHAIN}, ${s.id}, ${MODULE}, ${MERCHANT}, ${s.subscriber ?? `0x${String(s.id).padStart(40, "0")}`}, 1,
      ${s.maxExecutions ?? 0}, ${s.timesExecuted ?? 0}, 0, ${(s.lastPaidAt ?? 0n).toString()},
      ${(s.nextChargeAt ?? NOW - 10n).toString()}, ${(s.allowanceExpiry ?? 0n).toString()}, ${s.paused ?? false},
      ${s.cancelled ?? false}, ${block++}, 0, '0x01')`;
}

async function addActivity(id: number, type: "CHARGE" | "FAIL" | "REFILL", at: bigint) {
  const b = block++;
  await db.sql`
    insert into activity (chain_id, block_number, log_index, tx_hash, block_hash, block_time, merchant, module,
      subscription_id, type, token, amount, fee, reason, keeper)
    values (${CHAIN}, ${b}, 0, ${`0x${b.toString(16).padStart(64, "0")}`}, '0x03', to_timestamp(${Number(at)}), ${MERCHANT},
      ${MODULE}, ${id}, ${type}, null, 0, null, ${type === "FAIL" ? "InsufficientAllowance" : null}, null)`;
}

async function addEvent(id: number, name: string, at: bigint) {
  const b = block++;
  await db.sql`
    insert into events (chain_id, block_number, log_index, tx_hash, block_hash, block_time, address, name,
      subscription_id, args)
    values (${CHAIN}, ${b}, 0, '0x02', '0x03', to_timestamp(${Number(at)}), ${MODULE}, ${name}, ${id}, '{}'::jsonb)`;
}

async function dueIds(now = NOW, owner = ME): Promise<string[]> {
  const rows = await findDueSubscriptions(db.sql, { chainId: CHAIN, now, retrySchedule: SCHEDULE, owner, limit: 100 });
  return rows.map((r) => r.subscription_id);
}

describe("findDueSubscriptions", () => {
  test("returns subscriptions whose next charge has passed, oldest first", async () => {
    await addSubscription({ id: 1, nextChargeAt: NOW - 5n });
    await addSubscription({ id: 2, nextChargeAt: NOW - 50n });
    await addSubscription({ id: 3, nextChargeAt: NOW });
    await addSubscription({ id: 4, nextChargeAt: NOW + 1n });
    expect(await dueIds()).toEqual(["2", "1", "3"]);
  });

  test("skips paused, cancelled, exhausted and blocked subscriptions", async () => {
    await addSubscription({ id: 1, paused: true });
    await addSubscription({ id: 2, cancelled: true });
    await addSubscription({ id: 3, maxExecutions: 2, timesExecuted: 2 });
    await addSubscription({ id: 4, maxExecutions: 2, timesExecuted: 1 });
    await addSubscription({ id: 5, subscriber: "0x00000000000000000000000000000000000000f5" });
    await addSubscription({ id: 6, subscriber: "0x00000000000000000000000000000000000000f6" });
    await db.sql`insert into blocked_subscribers (chain_id, module, subscriber, blocked, block_number, log_index) values
      (${CHAIN}, ${MODULE}, '0x00000000000000000000000000000000000000f5', true, 1, 0),
      (${CHAIN}, ${MODULE}, '0x00000000000000000000000000000000000000f6', false, 1, 0)`;
    expect(await dueIds()).toEqual(["4", "6"]);
  });

  test("retries failures on the schedule, the last delay repeating", async () => {
    await addSubscription({ id: 1 });
    await addActivity(1, "FAIL", NOW - 99n);
    expect(await dueIds()).toEqual([]);
    expect(await dueIds(NOW + 1n)).toEqual(["1"]);
    await addActivity(1, "FAIL", NOW);
    expect(await dueIds(NOW + 199n)).toEqual([]);
    expect(await dueIds(NOW + 200n)).toEqual(["1"]);
    await addActivity(1, "FAIL", NOW + 200n);
    expect(await dueIds(NOW + 399n)).toEqual([]);
    expect(await dueIds(NOW + 400n)).toEqual(["1"]);
  });

  test("counts failures only since the last charge", async () => {
    await addSubscription({ id: 1, lastPaidAt: NOW - 1000n, timesExecuted: 1 });
    await addActivity(1, "FAIL", NOW - 3000n);
    await addActivity(1, "FAIL", NOW - 2500n);
    await addActivity(1, "CHARGE", NOW - 1000n);
    expect(await dueIds()).toEqual(["1"]);
    await addActivity(1, "FAIL", NOW - 50n);
    expect(await dueIds()).toEqual([]);
    expect(await dueIds(NOW + 50n)).toEqual(["1"]);
  });

  test("a refill, a resume or an allowance change restarts the schedule", async () => {
    for (const [id, name] of [
      [1, "REFILL"],
      [2, "SubscriptionResumed"],
      [3, "AllowanceExpiryUpdated"],
    ] as const) {
      await addSubscription({ id });
      await addActivity(id, "FAIL", NOW - 10n);
      if (name === "REFILL") await addActivity(id, "REFILL", NOW - 5n);
      else await addEvent(id, name, NOW - 5n);
    }
    await addSubscription({ id: 4 });
    await addActivity(4, "FAIL", NOW - 10n);
    expect(await dueIds()).toEqual(["1", "2", "3"]);
  });

  test("stops retrying a paid subscription once its grace period is over", async () => {
    // paid at NOW-1400: due at NOW-400, grace ends at NOW+100
    await addSubscription({ id: 1, lastPaidAt: NOW - 1400n, nextChargeAt: NOW - 400n, timesExecuted: 1 });
    await addActivity(1, "FAIL", NOW - 300n);
    expect(await dueIds()).toEqual(["1"]);
    expect(await dueIds(NOW + 100n)).toEqual(["1"]);
    expect(await dueIds(NOW + 101n)).toEqual([]);
  });

  test("a lapsed subscription without failures still gets one attempt", async () => {
    await addSubscription({ id: 1, lastPaidAt: NOW - 5000n, nextChargeAt: NOW - 4000n, timesExecuted: 1 });
    expect(await dueIds()).toEqual(["1"]);
  });

  test("a never-paid subscription keeps retrying on the last delay", async () => {
    await addSubscription({ id: 1, nextChargeAt: NOW - 100_000n });
    await addActivity(1, "FAIL", NOW - 100_000n);
    await addActivity(1, "FAIL", NOW - 50_000n);
    await addActivity(1, "FAIL", NOW - 200n);
    expect(await dueIds()).toEqual(["1"]);
  });

  test("does not retry after AllowanceExpired until the expiry moves", async () => {
    await addSubscription({ id: 1, allowanceExpiry: NOW - 10_000n });
    expect(await dueIds()).toEqual(["1"]);
    await addActivity(1, "FAIL", NOW - 5_000n);
    expect(await dueIds()).toEqual([]);
    await db.sql`update subscriptions set allowance_expiry = ${(NOW + 10_000n).toString()} where subscription_id = 1`;
    expect(await dueIds()).toEqual(["1"]);
  });

  test("hides subscriptions another keeper has a live claim on", async () => {
    await addSubscription({ id: 1 });
    await addSubscription({ id: 2 });
    const other = "0xkeeper:other";
    expect(await claimSubscription(db.sql, { chainId: CHAIN, subscriptionId: "1", owner: other, ttlMs: 60_000 })).toBe(
      true,
    );
    expect(await claimSubscription(db.sql, { chainId: CHAIN, subscriptionId: "1", owner: ME, ttlMs: 60_000 })).toBe(
      false,
    );
    expect(await dueIds()).toEqual(["2"]);
    expect(await dueIds(NOW, other)).toEqual(["1", "2"]);
    await releaseClaim(db.sql, { chainId: CHAIN, subscriptionId: "1", owner: other });
    expect(await claimSubscription(db.sql, { chainId: CHAIN, subscriptionId: "1", owner: ME, ttlMs: 60_000 })).toBe(
      true,
    );
  });

  test("an expired claim can be taken over", async () => {
    await addSubscription({ id: 1 });
    expect(await claimSubscription(db.sql, { chainId: CHAIN, subscriptionId: "1", owner: "0xdead:1", ttlMs: 1 })).toBe(
      true,
    );
    await Bun.sleep(20);
    expect(await dueIds()).toEqual(["1"]);
    expect(await claimSubscription(db.sql, { chainId: CHAIN, subscriptionId: "1", owner: ME, ttlMs: 60_000 })).toBe(
      true,
    );
  });

  test("a transaction is recorded on the keeper's own claim (taken back if expired), never over another's live one", async () => {
    const tx = (owner: string, n: number) =>
      recordClaimTx(db.sql, { chainId: CHAIN, subscriptionId: "1", owner, ttlMs: 60_000, txHash: `0x0${n}`, nonce: n });
    const claim = async () =>
      (await db.sql`select owner, tx_hash, tx_nonce::int as tx_nonce from keeper_claims where subscription_id = 1`)[0];
    expect(await claimSubscription(db.sql, { chainId: CHAIN, subscriptionId: "1", owner: ME, ttlMs: 60_000 })).toBe(
      true,
    );
    await tx(ME, 1);
    expect(await claim()).toEqual({ owner: ME, tx_hash: "0x01", tx_nonce: 1 });
    await expect(tx("0xother:1", 2)).rejects.toBeInstanceOf(ClaimTakenError);
    expect(await claim()).toEqual({ owner: ME, tx_hash: "0x01", tx_nonce: 1 });
    // Expired (the keeper was slow): the next record takes it back.
    await db.sql`update keeper_claims set expires_at = now() - interval '1 second'`;
    await tx("0xother:1", 3);
    expect(await claim()).toEqual({ owner: "0xother:1", tx_hash: "0x03", tx_nonce: 3 });
    // A new claim of the same owner forgets the transaction of the previous one.
    await claimSubscription(db.sql, { chainId: CHAIN, subscriptionId: "1", owner: "0xother:1", ttlMs: 60_000 });
    expect(await claim()).toEqual({ owner: "0xother:1", tx_hash: null, tx_nonce: null });
  });

  test("a replacement (same owner, same nonce) remembers the versions before it; a new nonce or claim forgets them", async () => {
    const record = (owner: string, hash: string, nonce: number) =>
      recordClaimTx(db.sql, { chainId: CHAIN, subscriptionId: "1", owner, ttlMs: 60_000, txHash: hash, nonce });
    const earlier = async () =>
      (await db.sql<{ e: string[] }[]>`select earlier_tx_hashes as e from keeper_claims where subscription_id = 1`)[0]!
        .e;
    expect(await claimSubscription(db.sql, { chainId: CHAIN, subscriptionId: "1", owner: ME, ttlMs: 60_000 })).toBe(
      true,
    );
    await record(ME, "0xa1", 5);
    expect(await earlier()).toEqual([]);
    await record(ME, "0xa2", 5);
    await record(ME, "0xa3", 5);
    expect(await earlier()).toEqual(["0xa1", "0xa2"]);
    await record(ME, "0xa3", 5); // the same transaction recorded again
    expect(await earlier()).toEqual(["0xa1", "0xa2"]);
    await record(ME, "0xb1", 6);
    expect(await earlier()).toEqual([]);
    await record(ME, "0xb2", 6);
    // Taken back after expiry by another instance: its transaction at that nonce is no version of ours.
    await db.sql`update keeper_claims set expires_at = now() - interval '1 second'`;
    await record("0xother:1", "0xc1", 6);
    expect(await earlier()).toEqual([]);
    await record("0xother:1", "0xc2", 6);
    await claimSubscription(db.sql, { chainId: CHAIN, subscriptionId: "1", owner: "0xother:1", ttlMs: 60_000 });
    expect(await earlier()).toEqual([]);
  });

  test("a dead instance's claim is adopted only while it names the same owner and transaction, renewed, with the nonce", async () => {
    const dead = {
      subscription_id: "1",
      owner: "0xkeeper:dead",
      tx_hash: "0x01",
      tx_nonce: null,
      earlier_tx_hashes: [],
    };
    await db.sql`
      insert into keeper_claims (chain_id, subscription_id, owner, tx_hash, tx_nonce, expires_at)
      values (${CHAIN}, 1, ${dead.owner}, ${dead.tx_hash}, null, now() + interval '1 second')`;
    const adopt = (claim: typeof dead) =>
      adoptSentClaim(db.sql, { chainId: CHAIN, claim, owner: ME, ttlMs: 3_600_000, nonce: 7, hash: claim.tx_hash });
    const claim = async () =>
      (
        await db.sql`
          select owner, tx_hash, tx_nonce::int as tx_nonce, expires_at > now() + interval '1 minute' as renewed
          from keeper_claims where subscription_id = 1`
      )[0];
    // The claim moved on (another transaction, another owner): left as it is.
    expect(await adopt({ ...dead, tx_hash: "0x02" })).toBe(false);
    expect(await adopt({ ...dead, owner: "0xkeeper:other" })).toBe(false);
    expect(await claim()).toEqual({ owner: dead.owner, tx_hash: "0x01", tx_nonce: null, renewed: false });
    expect(await adopt(dead)).toBe(true);
    expect(await claim()).toEqual({ owner: ME, tx_hash: "0x01", tx_nonce: 7, renewed: true });
  });

  test("adopting an earlier version of a replacement never broadcast: the claim names it and the versions before it", async () => {
    const dead = {
      subscription_id: "1",
      owner: "0xkeeper:dead",
      tx_hash: "0x04",
      tx_nonce: "9",
      earlier_tx_hashes: ["0x01", "0x02", "0x03"],
    };
    await db.sql`
      insert into keeper_claims (chain_id, subscription_id, owner, tx_hash, tx_nonce, earlier_tx_hashes, expires_at)
      values (${CHAIN}, 1, ${dead.owner}, ${dead.tx_hash}, 9, ${dead.earlier_tx_hashes}::text[], now() + interval '1 second')`;
    expect(
      await adoptSentClaim(db.sql, {
        chainId: CHAIN,
        claim: dead,
        owner: ME,
        ttlMs: 3_600_000,
        nonce: 9,
        hash: "0x02",
      }),
    ).toBe(true);
    const [row] = await db.sql`
      select owner, tx_hash, tx_nonce::int as n, earlier_tx_hashes as e from keeper_claims where subscription_id = 1`;
    expect(row).toEqual({ owner: ME, tx_hash: "0x02", n: 9, e: ["0x01"] });
  });

  describe("with maxAttempts (KEEPER_MAX_ATTEMPTS) and a recheck interval", () => {
    const capped = async (now = NOW) =>
      (
        await findDueSubscriptions(db.sql, {
          chainId: CHAIN,
          now,
          retrySchedule: SCHEDULE,
          owner: ME,
          limit: 100,
          maxAttempts: 2,
          recheckIntervalS: 1000,
        })
      ).map((r) => `${r.subscription_id}${r.recheck ? ":recheck" : ""}`);

    test("a never-paid subscription out of attempts is due only once per recheck interval, flagged", async () => {
      await addSubscription({ id: 1 });
      await addActivity(1, "FAIL", NOW - 500n);
      expect(await capped()).toEqual(["1"]);
      await addActivity(1, "FAIL", NOW - 300n);
      // The schedule (200 s after the 2nd failure) no longer applies: the recheck interval does.
      expect(await capped()).toEqual([]);
      expect(await capped(NOW + 699n)).toEqual([]);
      expect(await capped(NOW + 700n)).toEqual(["1:recheck"]);
      await noteRecheck(db.sql, { chainId: CHAIN, subscriptionId: "1", at: NOW + 700n });
      expect(await capped(NOW + 1699n)).toEqual([]);
      expect(await capped(NOW + 1700n)).toEqual(["1:recheck"]);
    });

    test("a refill, a resume or an allowance change restarts the count", async () => {
      for (const [id, name] of [
        [1, "REFILL"],
        [2, "SubscriptionResumed"],
        [3, "AllowanceExpiryUpdated"],
      ] as const) {
        await addSubscription({ id });
        await addActivity(id, "FAIL", NOW - 400n);
        await addActivity(id, "FAIL", NOW - 300n);
        if (name === "REFILL") await addActivity(id, "REFILL", NOW - 5n);
        else await addEvent(id, name, NOW - 5n);
      }
      expect(await capped()).toEqual(["1", "2", "3"]);
    });

    test("a subscription paid before is not capped: its grace period ends its retries", async () => {
      await addSubscription({ id: 1, lastPaidAt: NOW - 1100n, nextChargeAt: NOW - 100n, timesExecuted: 1 });
      await addActivity(1, "FAIL", NOW - 450n);
      await addActivity(1, "FAIL", NOW - 250n);
      await addActivity(1, "FAIL", NOW - 200n);
      expect(await capped()).toEqual(["1"]);
    });
  });
});
