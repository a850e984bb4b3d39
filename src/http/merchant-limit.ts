/**
 * The per-merchant rate limit (RATE_LIMIT_PER_MERCHANT_PER_MINUTE): one token bucket per merchant, whatever
 * credential (any of its keys, any of its sessions) and whichever API process a request reaches.
 *
 * On Postgres the bucket is a row of `merchant_rate_limits`, shared by every process: a process leases a block of
 * tokens from it in one short transaction (refill by the time elapsed on the database's clock, then take up to a
 * block) and spends them in memory, so a request costs no statement; it leases the next block in the background when
 * half of the current one is spent, and a refused lease is remembered until its Retry-After, so a merchant over its
 * limit costs no statement per request either. Leased tokens are spent within `leaseMs` or forgotten (never returned:
 * a crashed process cannot give them back), so a process can run at most one block ahead of the shared bucket. On
 * PGlite (one process) the bucket lives in memory.
 */
import type { Sql } from "../db/client";
import { RateLimitedError } from "./errors";
import { createRateLimiter } from "./rate-limit";

/** A per-merchant limiter. */
export type MerchantLimiter = {
  /**
   * Counts one request of `merchant` (lowercase address): undefined when admitted from tokens in hand (the hot path:
   * no promise, no statement), else a promise that leases and resolves, or rejects with RateLimitedError (429 with
   * Retry-After). Throws RateLimitedError at once while a refusal is remembered.
   */
  hit: (merchant: string) => Promise<void> | undefined;
  /** Leases made so far (statements run), for tests and benchmarks. */
  leases: () => number;
};

/** Options of {@link createMerchantLimiter}. */
export type MerchantLimiterOptions = {
  /** Sustained requests per minute per merchant. */
  perMinute: number;
  /** Bucket size (default `perMinute`). */
  burst?: number;
  /** The primary database: buckets shared through it. Absent: in this process's memory. */
  sql?: Sql;
  /** Tokens leased at once (default: a second of the rate, at most 1/16 of the burst, at least 1). */
  block?: number;
  /** How long leased tokens may be spent (default 5,000 ms). */
  leaseMs?: number;
  /** Clock in ms (default `Date.now`). */
  now?: () => number;
};

/** One merchant's tokens in hand in this process. */
type Hand = { tokens: number; expires: number; deniedUntil: number; leasing?: Promise<void> };

/** Most merchants whose leases a process keeps (the idlest are dropped beyond it; their tokens are forgotten). */
const MAX_MERCHANTS = 100_000;

/** Creates the limiter: shared through `sql` when given, else in memory. */
export function createMerchantLimiter(opts: MerchantLimiterOptions): MerchantLimiter {
  const now = opts.now ?? Date.now;
  const burst = opts.burst ?? opts.perMinute;
  if (!opts.sql) {
    const local = createRateLimiter({ perMinute: opts.perMinute, burst, now });
    let checks = 0;
    return {
      hit: (merchant) => {
        checks++;
        const d = local.check(merchant);
        if (!d.ok) throw new RateLimitedError(d.retryAfterSeconds);
        return undefined;
      },
      leases: () => checks,
    };
  }
  const sql = opts.sql;
  const perSecond = opts.perMinute / 60;
  const block = Math.max(1, Math.floor(opts.block ?? Math.min(perSecond, burst / 16)));
  const leaseMs = opts.leaseMs ?? 5_000;
  const hands = new Map<string, Hand>();
  let leases = 0;

  const lease = async (merchant: string, hand: Hand) => {
    leases++;
    const { granted, level } = await leaseTokens(sql, { merchant, want: block, perSecond, burst });
    const t = now();
    if (granted > 0) {
      hand.tokens = (hand.expires > t ? hand.tokens : 0) + granted;
      hand.expires = t + leaseMs;
    } else if (hand.tokens < 1) {
      hand.deniedUntil = t + ((1 - level) / perSecond) * 1000;
    }
  };
  const startLease = (merchant: string, hand: Hand) =>
    (hand.leasing ??= lease(merchant, hand).finally(() => {
      hand.leasing = undefined;
    }));
  const spend = (merchant: string, hand: Hand): boolean => {
    if (hand.tokens < 1 || hand.expires <= now()) return false;
    hand.tokens--;
    // Half the block spent: the next one is leased before this one runs out.
    if (hand.tokens < block / 2 && !hand.leasing) startLease(merchant, hand).catch(() => {});
    return true;
  };
  const refuse = (hand: Hand) => new RateLimitedError(Math.max(1, (hand.deniedUntil - now()) / 1000));
  /** Leases until a token is in hand, or the shared bucket is empty (then a 429). */
  const acquire = async (merchant: string, hand: Hand) => {
    for (;;) {
      await startLease(merchant, hand);
      if (spend(merchant, hand)) return;
      // Granted tokens were all taken by requests waiting on the same lease: lease again unless the bucket is empty.
      if (hand.deniedUntil > now()) throw refuse(hand);
    }
  };

  return {
    hit: (merchant) => {
      let hand = hands.get(merchant);
      if (!hand) {
        if (hands.size >= MAX_MERCHANTS) hands.delete(hands.keys().next().value!);
        hand = { tokens: 0, expires: 0, deniedUntil: 0 };
        hands.set(merchant, hand);
      }
      if (spend(merchant, hand)) return undefined;
      if (hand.deniedUntil > now()) throw refuse(hand);
      return acquire(merchant, hand);
    },
    leases: () => leases,
  };
}

/**
 * Refills the merchant's shared bucket by the time elapsed since its last lease (database clock) and takes up to
 * `want` whole tokens from it, in one transaction; `level` is what remains after the grant.
 */
export async function leaseTokens(
  sql: Sql,
  q: { merchant: string; want: number; perSecond: number; burst: number },
): Promise<{ granted: number; level: number }> {
  return sql.begin(async (tx) => {
    const [row] = await tx<{ tokens: number }[]>`
      insert into merchant_rate_limits as r (merchant, tokens, refilled_at)
      values (${q.merchant}, ${q.burst}::float8, clock_timestamp())
      on conflict (merchant) do update set
        tokens = least(
          ${q.burst}::float8,
          r.tokens + extract(epoch from clock_timestamp() - r.refilled_at)::float8 * ${q.perSecond}::float8
        ),
        refilled_at = clock_timestamp()
      returning tokens`;
    const level = Number(row!.tokens);
    const granted = Math.max(0, Math.min(q.want, Math.floor(level)));
    if (granted > 0) {
      await tx`update merchant_rate_limits set tokens = tokens - ${granted}::float8 where merchant = ${q.merchant}`;
    }
    return { granted, level: level - granted };
  });
}

/**
 * Spends one token of `merchant`'s bucket: resolves when admitted, rejects with RateLimitedError (429 with
 * Retry-After) when the bucket is empty. For a hot path, `limiter.hit` answers a request from tokens in hand
 * without a promise.
 */
export async function spendMerchantToken(limiter: MerchantLimiter, merchant: string): Promise<void> {
  const leasing = limiter.hit(merchant);
  if (leasing) await leasing;
}
