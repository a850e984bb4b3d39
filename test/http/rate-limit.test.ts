/** The in-memory token-bucket limiter of src/api/rate-limit.ts, driven by an injected clock. */
import { describe, expect, test } from "bun:test";
import { createRateLimiter } from "../../src/http/rate-limit";

function clock(start = 1_000_000) {
  let t = start;
  return { now: () => t, advance: (ms: number) => (t += ms) };
}

describe("createRateLimiter", () => {
  test("allows perMinute requests at once, then refuses with a positive Retry-After", () => {
    const c = clock();
    const limiter = createRateLimiter({ perMinute: 5, now: c.now });
    for (let i = 0; i < 5; i++) expect(limiter.check("a")).toEqual({ ok: true });
    const refused = limiter.check("a");
    expect(refused.ok).toBe(false);
    // 5 per minute = one token every 12 s.
    expect(refused).toEqual({ ok: false, retryAfterSeconds: 12 });
  });

  test("keys are independent", () => {
    const c = clock();
    const limiter = createRateLimiter({ perMinute: 2, now: c.now });
    expect(limiter.check("a").ok).toBe(true);
    expect(limiter.check("a").ok).toBe(true);
    expect(limiter.check("a").ok).toBe(false);
    expect(limiter.check("b").ok).toBe(true);
    expect(limiter.check("b").ok).toBe(true);
    expect(limiter.check("b").ok).toBe(false);
  });

  test("refills over time at perMinute, never above the burst", () => {
    const c = clock();
    const limiter = createRateLimiter({ perMinute: 60, burst: 3, now: c.now });
    for (let i = 0; i < 3; i++) expect(limiter.check("a").ok).toBe(true);
    expect(limiter.check("a")).toEqual({ ok: false, retryAfterSeconds: 1 });
    c.advance(500);
    expect(limiter.check("a").ok).toBe(false);
    c.advance(500);
    expect(limiter.check("a").ok).toBe(true);
    expect(limiter.check("a").ok).toBe(false);
    c.advance(3_600_000);
    for (let i = 0; i < 3; i++) expect(limiter.check("a").ok).toBe(true);
    expect(limiter.check("a").ok).toBe(false);
  });

  test("Retry-After shrinks as the bucket refills", () => {
    const c = clock();
    const limiter = createRateLimiter({ perMinute: 1, now: c.now });
    expect(limiter.check("a").ok).toBe(true);
    expect(limiter.check("a")).toEqual({ ok: false, retryAfterSeconds: 60 });
    c.advance(45_000);
    expect(limiter.check("a")).toEqual({ ok: false, retryAfterSeconds: 15 });
    c.advance(15_000);
    expect(limiter.check("a").ok).toBe(true);
  });

  test("idle keys are forgotten once their bucket would be full again", () => {
    const c = clock();
    const limiter = createRateLimiter({ perMinute: 60, now: c.now });
    for (let i = 0; i < 1000; i++) limiter.check(`ip-${i}`);
    expect(limiter.size()).toBe(1000);
    c.advance(30_000);
    limiter.check("fresh");
    expect(limiter.size()).toBe(1001);
    c.advance(31_000);
    limiter.check("fresh");
    // The 1000 old keys were idle for 61 s (a full refill takes 60 s); "fresh" was seen 31 s ago.
    expect(limiter.size()).toBe(1);
  });

  test("never tracks more than maxKeys; a forgotten key starts with a full bucket", () => {
    const c = clock();
    const limiter = createRateLimiter({ perMinute: 1, maxKeys: 100, now: c.now });
    for (let i = 0; i < 1000; i++) {
      expect(limiter.check(`k${i}`).ok).toBe(true);
      expect(limiter.size()).toBeLessThanOrEqual(100);
    }
    expect(limiter.check("k999").ok).toBe(false); // recent: still limited
    expect(limiter.check("k0").ok).toBe(true); // evicted long ago
  });

  test("rejects nonsense options", () => {
    expect(() => createRateLimiter({ perMinute: 0 })).toThrow(RangeError);
    expect(() => createRateLimiter({ perMinute: 10, burst: 0 })).toThrow(RangeError);
  });
});
