/**
 * `min_block` on `GET /v0/auth/check` (an answer only from an index that reached the block, waited for up to 2 s,
 * else 503 index_behind), the authenticated check (counted per credential, never on the address's bucket), and
 * `GET /v0/auth/plans` (what the gate's 402 says), over the seeded database.
 */
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { ADMIN_KEY, startSeededApp, type SeededApp } from "../../../../testkit/app";
import { CHAIN_A, INDEXED_BLOCK_A, MOD, TOK, W, BIG_AMOUNT } from "../../../../testkit/seed";

let s: SeededApp;
beforeAll(async () => {
  s = await startSeededApp({ RATE_LIMIT_PER_MINUTE: "3", TRUSTED_PROXY_HOPS: "1" });
}, 60_000);
afterAll(async () => {
  await s?.close();
});

let ip = 0;
/** A fresh client address each call unless given: the address's bucket (3 a minute) is not what is tested. */
const from = (client = `198.51.100.${++ip}`) => ({ "x-forwarded-for": client });
const check = (extra: string, headers: Record<string, string> = from()) =>
  s.get(`/v0/auth/check?module_address=${MOD.a1}&wallet=${W.alice}&plan_ids=1${extra}`, headers);
const setIndexed = (block: number) => s.db.sql`update chains set indexed_block = ${block} where chain_id = ${CHAIN_A}`;

describe("min_block", () => {
  test("at or below the indexed block: answered at once, from the index as it is", async () => {
    for (const b of [0, INDEXED_BLOCK_A]) {
      const res = await check(`&min_block=${b}`);
      expect(res.status).toBe(200);
      expect(res.body.indexed.indexed_block).toBe(String(INDEXED_BLOCK_A));
      expect(res.body.authorized).toBe(true);
    }
  });

  test("above it: waits for the index to reach the block, then answers from it (not from the cached answer)", async () => {
    expect((await check("")).body.indexed.indexed_block).toBe(String(INDEXED_BLOCK_A)); // cached now
    const t0 = Date.now();
    const pending = check(`&min_block=${INDEXED_BLOCK_A + 5}`);
    await Bun.sleep(300);
    await setIndexed(INDEXED_BLOCK_A + 5);
    try {
      const res = await pending;
      expect(res.status).toBe(200);
      expect(res.body.indexed.indexed_block).toBe(String(INDEXED_BLOCK_A + 5));
      expect(res.headers.get("x-indexed-block")).toBe(String(INDEXED_BLOCK_A + 5));
      expect(Date.now() - t0).toBeGreaterThanOrEqual(250);
      expect(Date.now() - t0).toBeLessThan(2_000);
    } finally {
      await setIndexed(INDEXED_BLOCK_A);
    }
  });

  test("not reached within 2 s: 503 index_behind with Retry-After", async () => {
    const t0 = Date.now();
    const res = await check(`&min_block=${INDEXED_BLOCK_A + 1}`);
    expect(res.status).toBe(503);
    expect(res.headers.get("retry-after")).toBe("1");
    expect(res.body.error).toMatchObject({ type: "api_error", code: "index_behind", param: "min_block" });
    expect(res.body.error.message).toContain(String(INDEXED_BLOCK_A));
    expect(Date.now() - t0).toBeGreaterThanOrEqual(1_900);
    expect(Date.now() - t0).toBeLessThan(4_000);
  });

  test("a malformed min_block is a 400 naming it, before any wait", async () => {
    for (const bad of ["abc", "-1", "1.5", "0x10", "1".repeat(21), ""]) {
      const res = await check(`&min_block=${encodeURIComponent(bad)}`);
      expect(res.status).toBe(400);
      expect(res.body.error).toMatchObject({ code: "invalid_parameter", param: "min_block" });
    }
  });
});

describe("authenticated check", () => {
  test("with a credential the check is counted on it, not on the address (shared by a NAT)", async () => {
    const nat = from("203.0.113.50");
    for (let i = 0; i < 6; i++) {
      const res = await check("", { ...nat, authorization: `Bearer ${ADMIN_KEY}` });
      expect(res.status).toBe(200);
      expect(res.headers.get("cache-control")).toBe("private, no-store");
    }
    // The address's own 3 a minute are all still there.
    for (let i = 0; i < 3; i++) expect((await check("", nat)).status).toBe(200);
    expect((await check("", nat)).status).toBe(429);
  });

  test("a bad credential is a 401 and spends the address's bucket (guessing keys stays limited)", async () => {
    const guesser = from("203.0.113.60");
    for (let i = 0; i < 3; i++) {
      const res = await check("", { ...guesser, authorization: "Bearer sk_live_guess" });
      expect(res.status).toBe(401);
    }
    expect((await check("", { ...guesser, authorization: "Bearer sk_live_guess" })).status).toBe(429);
  });
});

describe("GET /v0/auth/plans", () => {
  test("describes each plan in request order: token, symbol, decimals, amount, interval", async () => {
    const res = await s.get(
      `/v0/auth/plans?module_address=${MOD.a1.toUpperCase().replace("0X", "0x")}&plan_ids=2,1`,
      from(),
    );
    expect(res.status).toBe(200);
    expect(res.body).toEqual({
      chain_id: CHAIN_A,
      module_address: MOD.a1,
      plans: [
        {
          plan_id: "2",
          token: TOK.weth,
          symbol: "WETH",
          decimals: 18,
          amount: BIG_AMOUNT,
          interval_s: 86_400,
          grace_s: 0,
        },
        {
          plan_id: "1",
          token: TOK.usdc,
          symbol: "USDC",
          decimals: 6,
          amount: "10000000",
          interval_s: 30 * 86_400,
          grace_s: 3 * 86_400,
        },
      ],
    });
  });

  test("a plan the index does not know, or a module without plans, is a 400 on plan_ids", async () => {
    const unknown = await s.get(`/v0/auth/plans?module_address=${MOD.a1}&plan_ids=1,99`, from());
    expect(unknown.status).toBe(400);
    expect(unknown.body.error).toMatchObject({ code: "invalid_parameter", param: "plan_ids" });
    expect(unknown.body.error.message).toContain("99");
    const noModule = await s.get(`/v0/auth/plans?module_address=0x${"ab".repeat(20)}&plan_ids=1`, from());
    expect(noModule.status).toBe(400);
    const bad = await s.get(`/v0/auth/plans?module_address=0x12&plan_ids=1`, from());
    expect(bad.body.error.param).toBe("module_address");
  });
});
