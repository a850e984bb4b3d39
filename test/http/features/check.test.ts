import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { Value } from "@sinclair/typebox/value";
import { CheckResult } from "../../../src/http/features/check/model";
import { createApp } from "../../../src/http/app";
import { createChainRegistry } from "../../../src/chain/clients";
import { BIG_SUB_ID, CHAIN_A, CHAIN_B, INDEXED_BLOCK_A, MOD, NOW_A, W } from "../../../testkit/seed";
import { request, startSeededApp, testConfig, type SeededApp } from "../../../testkit/app";

/** A chain configured through RPC_URL_<id> whose endpoint is a closed port, and that has no indexed data. */
const DEAD_CHAIN = 5;
const DEAD_RPC = "http://127.0.0.1:9";

let s: SeededApp;
beforeAll(async () => {
  s = await startSeededApp({ [`RPC_URL_${DEAD_CHAIN}`]: DEAD_RPC, RPC_TIMEOUT_MS: "1000" });
}, 60_000);
afterAll(async () => {
  await s?.close();
});

const check = (qs: string, headers: Record<string, string> = {}) => s.get(`/v0/auth/check?${qs}`, headers);
const q = (wallet: string, plans: string, extra = "") =>
  `module_address=${MOD.a1}&wallet=${wallet}&plan_ids=${plans}${extra}`;

describe("GET /v0/auth/check (indexed)", () => {
  test("public: answers without a credential, with every field of the result", async () => {
    const res = await check(q(W.alice, "1,2,3"));
    expect(res.status).toBe(200);
    expect(Value.Check(CheckResult, res.body)).toBe(true);
    expect(res.body).toEqual({
      authorized: true,
      mode: "indexed",
      wallet: W.alice,
      module_address: MOD.a1,
      chain_id: CHAIN_A,
      plan_ids: ["1", "2", "3"],
      indexed: {
        authorized: true,
        matching_plan_ids: ["1"],
        // Every allocation for the requested plans, whatever the status, newest first.
        details: [
          {
            allocation_id: `${CHAIN_A}:${MOD.a1}:${BIG_SUB_ID}`,
            plan_id_on_chain: "3",
            status: "EXPIRED",
            next_charge_date: new Date((NOW_A - 23 * 86_400) * 1000).toISOString(),
            times_executed: 1,
          },
          {
            allocation_id: `${CHAIN_A}:${MOD.a1}:13`,
            plan_id_on_chain: "2",
            status: "PENDING",
            next_charge_date: new Date((NOW_A - 30) * 1000).toISOString(),
            times_executed: 0,
          },
          {
            allocation_id: `${CHAIN_A}:${MOD.a1}:12`,
            plan_id_on_chain: "2",
            status: "CANCELLED",
            next_charge_date: null,
            times_executed: 1,
          },
          {
            allocation_id: `${CHAIN_A}:${MOD.a1}:1`,
            plan_id_on_chain: "1",
            status: "ACTIVE",
            next_charge_date: new Date((NOW_A + 20 * 86_400) * 1000).toISOString(),
            times_executed: 3,
          },
        ],
        indexed_block: String(INDEXED_BLOCK_A),
        // Plan 1 of a1 has a 30-day interval and 3 days of grace; alice paid 10 days before NOW_A.
        valid_until: new Date((NOW_A - 10 * 86_400 + 33 * 86_400 + 1) * 1000).toISOString(),
      },
    });
    expect(res.body.onchain).toBeUndefined();
    expect(res.headers.get("x-indexed-block")).toBe(String(INDEXED_BLOCK_A));
    expect(res.headers.get("x-indexed-at")).toBe(new Date(NOW_A * 1000).toISOString());
  });

  test("only the requested plans count; matching_plan_ids keeps request order", async () => {
    const none = await check(q(W.alice, "2,3"));
    expect(none.body.authorized).toBe(false);
    expect(none.body.indexed.matching_plan_ids).toEqual([]);
    expect(none.body.indexed.details.map((d: { plan_id_on_chain: string }) => d.plan_id_on_chain)).toEqual([
      "3",
      "2",
      "2",
    ]);
    const ordered = await s.get(`/v0/auth/check?module_address=${MOD.a1}&wallet=${W.ivan}&plan_ids=2,1`);
    expect(ordered.body.indexed.matching_plan_ids).toEqual(["2"]);
    const reversed = await check(q(W.alice, "3,1"));
    expect(reversed.body.plan_ids).toEqual(["3", "1"]);
    expect(reversed.body.indexed.matching_plan_ids).toEqual(["1"]);
  });

  test("repeated plan ids are checked once, in first-seen order; leading zeros are read as decimal", async () => {
    const res = await check(q(W.alice, "2,1,2,01,1"));
    expect(res.status).toBe(200);
    expect(res.body.plan_ids).toEqual(["2", "1"]);
    expect(res.body.indexed.matching_plan_ids).toEqual(["1"]);
  });

  test("each status decides authorization as the contract would", async () => {
    const cases: [string, string, boolean, string][] = [
      [W.alice, "1", true, "ACTIVE"],
      [W.bob, "1", false, "PENDING"],
      [W.carol, "1", false, "PAUSED"],
      [W.dave, "1", false, "CANCELLED"],
      [W.erin, "1", false, "BLOCKED"],
      [W.erin, "2", false, "BLOCKED"],
      [W.frank, "1", false, "EXPIRED"], // one second past the grace period
      [W.grace, "1", true, "ACTIVE"], // exactly at the end of the grace period
      [W.heidi, "1", true, "ACTIVE"], // every execution used, window still open
      [W.ivan, "2", true, "ACTIVE"], // unblocked again
      [W.judy, "1", false, "PAUSED"],
    ];
    for (const [wallet, plan, authorized, status] of cases) {
      const res = await check(q(wallet, plan));
      expect(res.body.authorized).toBe(authorized);
      expect(res.body.indexed.authorized).toBe(authorized);
      expect(res.body.indexed.details.map((d: { status: string }) => d.status)).toEqual([status]);
    }
    expect((await check(q(W.heidi, "1"))).body.indexed.details[0].next_charge_date).toBeNull();
  });

  test("addresses in any case are echoed lowercase", async () => {
    const res = await s.get(
      `/v0/auth/check?module_address=0x${MOD.a1.slice(2).toUpperCase()}&wallet=0x${W.alice.slice(2).toUpperCase()}&plan_ids=1`,
    );
    expect(res.body.wallet).toBe(W.alice);
    expect(res.body.module_address).toBe(MOD.a1);
    expect(res.body.authorized).toBe(true);
  });

  test("an unknown module or wallet is simply not authorized", async () => {
    const res = await s.get(`/v0/auth/check?module_address=0x${"0".repeat(40)}&wallet=${W.alice}&plan_ids=1`);
    expect(res.status).toBe(200);
    expect(res.body.authorized).toBe(false);
    expect(res.body.indexed.details).toEqual([]);
    expect(res.body.indexed.indexed_block).toBe(String(INDEXED_BLOCK_A));
    // Another module of the same merchant is a different module.
    expect((await s.get(`/v0/auth/check?module_address=${MOD.a2}&wallet=${W.alice}&plan_ids=1`)).body.authorized).toBe(
      false,
    );
  });

  test("chain_id: another indexed chain, a configured chain not indexed yet, an unknown chain", async () => {
    const b = await s.get(`/v0/auth/check?module_address=${MOD.b1}&wallet=${W.alice}&plan_ids=1&chain_id=${CHAIN_B}`);
    expect(b.body).toMatchObject({ authorized: true, chain_id: CHAIN_B });
    const bobB = await s.get(`/v0/auth/check?module_address=${MOD.b1}&wallet=${W.bob}&plan_ids=1&chain_id=${CHAIN_B}`);
    expect(bobB.body.indexed.details[0].status).toBe("EXPIRED");
    const fresh = await check(q(W.alice, "1", `&chain_id=${DEAD_CHAIN}`));
    expect(fresh.status).toBe(200);
    expect(fresh.body.indexed).toEqual({
      authorized: false,
      matching_plan_ids: [],
      details: [],
      indexed_block: null,
      valid_until: null,
    });
    expect(fresh.headers.get("x-indexed-block")).toBeNull();
    const unknown = await check(q(W.alice, "1", "&chain_id=999"));
    expect(unknown.status).toBe(400);
    expect(unknown.body.error).toMatchObject({ code: "invalid_parameter", param: "chain_id" });
  });

  test("an Authorization header must be a valid credential: a bad one is a 401 (it is what the check is counted on)", async () => {
    for (const authorization of ["Bearer nonsense", "garbage", `Bearer ${"x".repeat(500)}`]) {
      const res = await check(q(W.alice, "1"), { authorization });
      expect(res.status).toBe(401);
      expect(res.body.error.code).toBe("unauthenticated");
    }
  });
});

describe("GET /v0/auth/check (onchain and both, RPC down)", () => {
  test("onchain and both need an RPC endpoint for the chain", async () => {
    for (const mode of ["onchain", "both"]) {
      const res = await check(q(W.alice, "1", `&mode=${mode}`));
      expect(res.status).toBe(400);
      expect(res.body.error.param).toBe("chain_id");
    }
  });

  test("a dead RPC is a 502 chain_unavailable; in both mode the body carries the indexed result", async () => {
    const onchain = await check(q(W.alice, "1", `&mode=onchain&chain_id=${DEAD_CHAIN}`));
    expect(onchain.status).toBe(502);
    expect(onchain.body.error).toMatchObject({ type: "api_error", code: "chain_unavailable" });
    expect(onchain.body.error.message).not.toContain(DEAD_RPC);
    expect(onchain.body.error.indexed).toBeUndefined();
    const both = await check(q(W.alice, "1,2", `&mode=both&chain_id=${DEAD_CHAIN}`));
    expect(both.status).toBe(502);
    expect(both.body.error.code).toBe("chain_unavailable");
    expect(both.body.error.indexed).toEqual({
      authorized: false,
      matching_plan_ids: [],
      details: [],
      indexed_block: null,
      valid_until: null,
    });
  });
});

describe("rate limiting", () => {
  test("per client address: with TRUSTED_PROXY_HOPS=2 the 2nd X-Forwarded-For entry from the right, else the socket address, 429 with Retry-After", async () => {
    const config = testConfig({ RATE_LIMIT_PER_MINUTE: "2", TRUSTED_PROXY_HOPS: "2" });
    const app = createApp({ sql: s.db.sql, config, chains: await createChainRegistry(config) });
    const path = `/v0/auth/check?${q(W.alice, "1")}`;
    const from = (ip: string) => request(app, path, { "x-forwarded-for": `${ip}, 10.0.0.1` });
    expect((await from("203.0.113.1")).status).toBe(200);
    expect((await from("203.0.113.1")).status).toBe(200);
    const limited = await from("203.0.113.1");
    expect(limited.status).toBe(429);
    expect(limited.body.error).toMatchObject({ type: "rate_limit_error", code: "rate_limited" });
    expect(Number(limited.headers.get("retry-after"))).toBeGreaterThanOrEqual(1);
    // Another client is not affected; invalid requests count too (the limit comes first).
    expect((await from("203.0.113.2")).status).toBe(200);
    expect((await request(app, "/v0/auth/check?plan_ids=x", { "x-forwarded-for": "203.0.113.2" })).status).toBe(400);
    expect((await from("203.0.113.2")).status).toBe(429);
    // Without the header (no socket in app.handle) every request shares the "unknown" key.
    expect((await request(app, path, {})).status).toBe(200);
    expect((await request(app, path, {})).status).toBe(200);
    expect((await request(app, path, {})).status).toBe(429);
  });
});
