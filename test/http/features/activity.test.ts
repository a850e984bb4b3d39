import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { Value } from "@sinclair/typebox/value";
import { ActivityRecord } from "../../../src/http/features/activity/model";
import { FAILURE_REASONS } from "../../../src/domain/failure-reasons";
import { createApiKey } from "../../../src/auth/api-keys";
import {
  BIG_AMOUNT,
  BIG_SUB_ID,
  CHAIN_A,
  CHAIN_B,
  INDEXED_BLOCK_A,
  INDEXED_BLOCK_B,
  M1,
  M2,
  M_NONE,
  MOD,
  NOW_A,
  TOKEN_META,
  W,
  type Fixture,
} from "../../../testkit/seed";
import { startSeededApp, type Res, type SeededApp } from "../../../testkit/app";

let s: SeededApp;
beforeAll(async () => {
  s = await startSeededApp();
}, 60_000);
afterAll(async () => {
  await s?.close();
});

type Filter = {
  merchant?: string;
  chain?: number;
  type?: "CHARGE" | "FAIL" | "REFILL";
  since?: Date;
  token?: string;
  order?: "asc" | "desc";
};

/** The records the API must return, computed from the fixture independently of the service code. */
function expected(f: Fixture, q: Filter = {}): ActivityRecord[] {
  const merchant = q.merchant ?? M1;
  const chain = q.chain ?? CHAIN_A;
  const planToken = (chainId: number, subId: string) => {
    const sub = f.subscriptions.find((x) => x.chain_id === chainId && x.subscription_id === subId)!;
    return f.plans.find((p) => p.chain_id === chainId && p.module === sub.module && p.plan_id === sub.plan_id)!.token;
  };
  const rows = f.activity
    .filter((a) => a.merchant === merchant && a.chain_id === chain)
    .filter((a) => !q.type || a.type === q.type)
    .filter((a) => !q.since || a.block_time.getTime() >= q.since.getTime())
    .map((a) => {
      const meta = TOKEN_META[`${a.chain_id}:${a.token ?? planToken(a.chain_id, a.subscription_id)}`];
      return {
        event_id: `${a.chain_id}:${a.tx_hash}:${a.log_index}`,
        allocation_id: `${a.chain_id}:${a.module}:${a.subscription_id}`,
        module_address: a.module,
        tx_hash: a.tx_hash,
        block_number: String(a.block_number),
        type: a.type,
        amount_charged: a.type === "FAIL" ? "0" : a.amount,
        token_decimals: meta.decimals,
        currency: meta.symbol,
        reason: a.type === "FAIL" ? a.reason : null,
        keeper_address: a.type === "REFILL" ? null : a.keeper,
        fee_paid: a.type === "CHARGE" ? a.fee : null,
        timestamp: a.block_time.toISOString(),
        source: "subscription_module",
      } as ActivityRecord;
    })
    .filter((r) => !q.token || r.currency?.toLowerCase() === q.token.toLowerCase());
  return q.order === "desc" ? rows.reverse() : rows;
}

/** Follows `Link: rel="next"` from `path` to the end; returns every record and the number of pages. */
async function walk(path: string): Promise<{ records: ActivityRecord[]; pages: Res[] }> {
  const records: ActivityRecord[] = [];
  const pages: Res[] = [];
  let next: string | undefined = path;
  while (next) {
    const res = await s.get(next);
    expect(res.status).toBe(200);
    pages.push(res);
    records.push(...res.body);
    const link = res.headers.get("link");
    if (link) {
      const m = /^<([^>]+)>; rel="next"$/.exec(link);
      expect(m).not.toBeNull();
      const url = new URL(m![1]);
      next = url.pathname + url.search;
    } else next = undefined;
    expect(pages.length).toBeLessThan(500);
  }
  return { records, pages };
}

describe("GET /v0/activity/:merchant", () => {
  test("returns every record of the merchant on the default chain, oldest first, each field exact", async () => {
    const res = await s.get(`/v0/activity/${M1}`);
    expect(res.status).toBe(200);
    expect(res.headers.get("content-type")).toContain("application/json");
    expect(res.headers.get("link")).toBeNull();
    const want = expected(s.fixture);
    expect(want.length).toBeGreaterThan(100);
    expect(res.body).toEqual(want);
    for (const r of res.body) expect(Value.Check(ActivityRecord, r)).toBe(true);
  });

  test("a charge record carries every field with its type", async () => {
    const res = await s.get(`/v0/activity/${M1}?limit=1`);
    expect(res.body).toEqual([
      {
        event_id: `${CHAIN_A}:0x000000000000000000000000000003e800000000000000000000000000000001:0`,
        allocation_id: `${CHAIN_A}:${MOD.a1}:1`,
        module_address: MOD.a1,
        tx_hash: "0x000000000000000000000000000003e800000000000000000000000000000001",
        block_number: "1000",
        type: "CHARGE",
        amount_charged: "1000000",
        token_decimals: 6,
        currency: "USDC",
        reason: null,
        keeper_address: W.keeper,
        fee_paid: "25000",
        timestamp: "2026-01-01T03:20:00.000Z",
        source: "subscription_module",
      },
    ]);
  });

  test("amounts above 2^64 stay exact, 18-decimal and metadata-less tokens are reported as such", async () => {
    const { body } = await s.get(`/v0/activity/${M1}`);
    const weth = body.find((r: ActivityRecord) => r.type === "CHARGE" && r.currency === "WETH");
    expect(weth.amount_charged).toBe(BIG_AMOUNT);
    expect(weth.fee_paid).toBe("3086419725308641972530864197");
    expect(weth.token_decimals).toBe(18);
    const nometa = body.find((r: ActivityRecord) => r.allocation_id.endsWith(`:${BIG_SUB_ID}`));
    expect(nometa.currency).toBeNull();
    expect(nometa.token_decimals).toBeNull();
    expect(nometa.allocation_id).toBe(`${CHAIN_A}:${MOD.a1}:${BIG_SUB_ID}`);
  });

  test("per-type nulls: FAIL has amount 0, a reason and no fee; REFILL has no keeper, fee or reason", async () => {
    const { body } = await s.get(`/v0/activity/${M1}`);
    const byType = (t: string) => body.filter((r: ActivityRecord) => r.type === t);
    for (const r of byType("FAIL")) {
      expect(r.amount_charged).toBe("0");
      expect(r.fee_paid).toBeNull();
      expect(FAILURE_REASONS).toContain(r.reason);
      expect(r.keeper_address).not.toBeNull();
    }
    for (const r of byType("REFILL")) {
      expect(r.fee_paid).toBeNull();
      expect(r.reason).toBeNull();
      expect(r.keeper_address).toBeNull();
      expect(BigInt(r.amount_charged)).toBeGreaterThan(0n);
    }
    for (const r of byType("CHARGE")) {
      expect(r.reason).toBeNull();
      expect(r.fee_paid).not.toBeNull();
    }
    // Every failure reason occurs, and a failure stored without a token takes its plan's token.
    expect(new Set(byType("FAIL").map((r: ActivityRecord) => r.reason))).toEqual(new Set(FAILURE_REASONS));
    const tokenless = s.fixture.activity.find((a) => a.type === "FAIL" && a.token === null)!;
    const rec = body.find(
      (r: ActivityRecord) => r.event_id === `${CHAIN_A}:${tokenless.tx_hash}:${tokenless.log_index}`,
    );
    expect(rec.currency).not.toBeNull();
  });

  test("type filter", async () => {
    for (const type of ["CHARGE", "FAIL", "REFILL"] as const) {
      const res = await s.get(`/v0/activity/${M1}?type=${type}`);
      expect(res.status).toBe(200);
      expect(res.body.length).toBeGreaterThan(0);
      expect(res.body).toEqual(expected(s.fixture, { type }));
    }
  });

  test("chain_id selects the chain; freshness headers follow it", async () => {
    const a = await s.get(`/v0/activity/${M1}?chain_id=${CHAIN_A}`);
    expect(a.headers.get("x-indexed-block")).toBe(String(INDEXED_BLOCK_A));
    expect(a.headers.get("x-indexed-at")).toBe(new Date(NOW_A * 1000).toISOString());
    const b = await s.get(`/v0/activity/${M1}?chain_id=${CHAIN_B}`);
    expect(b.status).toBe(200);
    expect(b.body).toEqual(expected(s.fixture, { chain: CHAIN_B }));
    expect(b.body.length).toBe(5);
    expect(b.headers.get("x-indexed-block")).toBe(String(INDEXED_BLOCK_B));
    expect(b.headers.get("x-indexed-at")).toBe("2020-01-01T00:00:00.000Z");
  });

  test("a chain that is neither indexed nor configured is a 400 on chain_id", async () => {
    const res = await s.get(`/v0/activity/${M1}?chain_id=999`);
    expect(res.status).toBe(400);
    expect(res.body.error.param).toBe("chain_id");
  });

  test("since accepts ISO 8601 with or without ms, Z or an offset, and is inclusive", async () => {
    const pivot = s.fixture.activity.filter((a) => a.merchant === M1 && a.chain_id === CHAIN_A)[40].block_time;
    const iso = pivot.toISOString(); // 2026-01-01T...:..:..000Z
    const plus2 = new Date(pivot.getTime() + 2 * 3600_000).toISOString().replace("Z", "+02:00");
    const minus0530 = new Date(pivot.getTime() - 5.5 * 3600_000).toISOString().replace(/\.\d{3}Z$/, "-05:30");
    const want = expected(s.fixture, { since: pivot });
    expect(want[0].timestamp).toBe(iso);
    for (const since of [
      iso,
      iso.replace(".000Z", "Z"),
      encodeURIComponent(plus2),
      minus0530,
      plus2.replace("+", "%20"),
    ]) {
      const res = await s.get(`/v0/activity/${M1}?since=${since}`);
      expect(res.status).toBe(200);
      expect(res.body).toEqual(want);
    }
    // One millisecond later excludes the records of that block.
    const later = await s.get(`/v0/activity/${M1}?since=${new Date(pivot.getTime() + 1).toISOString()}`);
    expect(later.body).toEqual(expected(s.fixture, { since: new Date(pivot.getTime() + 1) }));
    expect(later.body.length).toBeLessThan(want.length);
    // Before everything and after everything.
    expect((await s.get(`/v0/activity/${M1}?since=2000-01-01T00:00:00Z`)).body).toEqual(expected(s.fixture));
    expect((await s.get(`/v0/activity/${M1}?since=2099-01-01T00:00:00Z`)).body).toEqual([]);
  });

  test("token is an exact, case-insensitive symbol match over every type", async () => {
    for (const token of ["USDC", "usdc", "UsDc", "WETH", "weth"]) {
      const res = await s.get(`/v0/activity/${M1}?token=${token}`);
      expect(res.status).toBe(200);
      expect(res.body.length).toBeGreaterThan(0);
      expect(res.body).toEqual(expected(s.fixture, { token }));
      expect(new Set(res.body.map((r: ActivityRecord) => r.type))).toEqual(new Set(["CHARGE", "FAIL", "REFILL"]));
    }
    for (const token of ["US", "USDC%25", "%25", "ETH", "DAI"]) {
      expect((await s.get(`/v0/activity/${M1}?token=${token}`)).body).toEqual([]);
    }
  });

  test("order=desc reverses chain order", async () => {
    const res = await s.get(`/v0/activity/${M1}?order=desc`);
    expect(res.body).toEqual(expected(s.fixture, { order: "desc" }));
    const asc = await s.get(`/v0/activity/${M1}?order=asc`);
    expect(asc.body).toEqual(expected(s.fixture));
  });

  test("filters combine", async () => {
    const pivot = s.fixture.activity.filter((a) => a.merchant === M1)[25].block_time;
    const combos: Filter[] = [
      { type: "CHARGE", token: "usdc" },
      { type: "FAIL", token: "WETH", order: "desc" },
      { type: "REFILL", since: pivot, order: "desc" },
      { type: "CHARGE", since: pivot, token: "weth" },
      { since: pivot, token: "usdc", order: "desc" },
      { chain: CHAIN_B, type: "FAIL", token: "USDC" },
    ];
    for (const c of combos) {
      const qs = new URLSearchParams();
      if (c.chain) qs.set("chain_id", String(c.chain));
      if (c.type) qs.set("type", c.type);
      if (c.since) qs.set("since", c.since.toISOString());
      if (c.token) qs.set("token", c.token);
      if (c.order) qs.set("order", c.order);
      const res = await s.get(`/v0/activity/${M1}?${qs}`);
      expect(res.status).toBe(200);
      expect(res.body).toEqual(expected(s.fixture, c));
      expect(res.body.length).toBeGreaterThan(0);
    }
  });

  test("limit cuts the page and announces the next one; walking Link pages gives the unpaged list", async () => {
    for (const order of ["asc", "desc"] as const) {
      for (const limit of [1, 7, 50, 1000]) {
        const { records, pages } = await walk(`/v0/activity/${M1}?limit=${limit}&order=${order}`);
        const want = expected(s.fixture, { order });
        expect(records).toEqual(want);
        expect(pages.length).toBe(Math.max(1, Math.ceil(want.length / limit)));
        for (const p of pages.slice(0, -1)) expect(p.body.length).toBe(limit);
        expect(pages.at(-1)!.headers.get("link")).toBeNull();
      }
    }
  });

  test("paging keeps the filters", async () => {
    const pivot = s.fixture.activity.filter((a) => a.merchant === M1)[10].block_time;
    const since = encodeURIComponent(pivot.toISOString());
    for (const order of ["asc", "desc"] as const) {
      const { records } = await walk(`/v0/activity/${M1}?limit=4&type=FAIL&token=usdc&since=${since}&order=${order}`);
      expect(records).toEqual(expected(s.fixture, { type: "FAIL", token: "usdc", since: pivot, order }));
    }
  });

  test("a page exactly filled by limit has no Link", async () => {
    const all = expected(s.fixture, { chain: CHAIN_B });
    const res = await s.get(`/v0/activity/${M1}?chain_id=${CHAIN_B}&limit=${all.length}`);
    expect(res.body).toEqual(all);
    expect(res.headers.get("link")).toBeNull();
  });

  test("starting_after starts strictly after the event in the chosen order", async () => {
    const all = expected(s.fixture);
    const res = await s.get(`/v0/activity/${M1}?starting_after=${all[9].event_id}&limit=3`);
    expect(res.body).toEqual(all.slice(10, 13));
    const desc = expected(s.fixture, { order: "desc" });
    const d = await s.get(`/v0/activity/${M1}?order=desc&starting_after=${desc[4].event_id}`);
    expect(d.body).toEqual(desc.slice(5));
    // After the last one: an empty page.
    const end = await s.get(`/v0/activity/${M1}?starting_after=${all.at(-1)!.event_id}`);
    expect(end.body).toEqual([]);
    // The cursor may be of another type than the filter: its position is what counts.
    const refill = all.find((r) => r.type === "REFILL")!;
    const charges = await s.get(`/v0/activity/${M1}?type=CHARGE&starting_after=${refill.event_id}`);
    const idx = all.indexOf(refill);
    expect(charges.body).toEqual(all.slice(idx + 1).filter((r) => r.type === "CHARGE"));
  });

  test("starting_after must name an activity record of this merchant on this chain", async () => {
    const m2Event = expected(s.fixture, { merchant: M2 })[0].event_id;
    const bEvent = expected(s.fixture, { chain: CHAIN_B })[0].event_id;
    const unknown = `${CHAIN_A}:0x${"12".repeat(32)}:0`;
    for (const cursor of [
      m2Event,
      bEvent,
      unknown,
      "abc",
      `${CHAIN_A}:0x12:0`,
      `${CHAIN_A}:${"0x" + "1".repeat(64)}:-1`,
    ]) {
      const res = await s.get(`/v0/activity/${M1}?starting_after=${encodeURIComponent(cursor)}`);
      expect(res.status).toBe(400);
      expect(res.body.error.code).toBe("invalid_parameter");
      expect(res.body.error.param).toBe("starting_after");
    }
  });

  test("merchant address in any case; a merchant without modules gets []", async () => {
    const upper = "0x" + M1.slice(2).toUpperCase();
    expect((await s.get(`/v0/activity/${upper}`)).body).toEqual(expected(s.fixture));
    const none = await s.get(`/v0/activity/${M_NONE}`);
    expect(none.status).toBe(200);
    expect(none.body).toEqual([]);
    expect(none.headers.get("x-indexed-block")).toBe(String(INDEXED_BLOCK_A));
  });

  test("other merchants' records never appear", async () => {
    const m2 = await s.get(`/v0/activity/${M2}`);
    expect(m2.body).toEqual(expected(s.fixture, { merchant: M2 }));
    expect(m2.body.length).toBe(5);
    for (const r of m2.body) expect(r.module_address).toBe(MOD.a3);
  });

  test("unknown query parameters are ignored", async () => {
    const res = await s.get(`/v0/activity/${M1}?foo=bar&limit=2&type[]=x&__proto__=1`);
    expect(res.status).toBe(200);
    expect(res.body).toEqual(expected(s.fixture).slice(0, 2));
  });
});

describe("GET /v0/payments/:merchant and /v0/failures/:merchant", () => {
  test("payments are the CHARGE records, failures the FAIL records", async () => {
    const p = await s.get(`/v0/payments/${M1}`);
    expect(p.status).toBe(200);
    expect(p.body).toEqual(expected(s.fixture, { type: "CHARGE" }));
    const f = await s.get(`/v0/failures/${M1}`);
    expect(f.body).toEqual(expected(s.fixture, { type: "FAIL" }));
    expect(f.headers.get("x-indexed-block")).toBe(String(INDEXED_BLOCK_A));
  });

  test("a type parameter cannot widen them", async () => {
    expect((await s.get(`/v0/payments/${M1}?type=FAIL`)).body).toEqual(expected(s.fixture, { type: "CHARGE" }));
    expect((await s.get(`/v0/failures/${M1}?type=REFILL`)).body).toEqual(expected(s.fixture, { type: "FAIL" }));
  });

  test("they take chain_id, limit, since, token, order and starting_after", async () => {
    const pivot = s.fixture.activity.filter((a) => a.merchant === M1)[30].block_time;
    for (const [route, type] of [
      ["payments", "CHARGE"],
      ["failures", "FAIL"],
    ] as const) {
      for (const order of ["asc", "desc"] as const) {
        const { records } = await walk(
          `/v0/${route}/${M1}?limit=3&token=USDC&order=${order}&since=${encodeURIComponent(pivot.toISOString())}`,
        );
        expect(records).toEqual(expected(s.fixture, { type, token: "USDC", since: pivot, order }));
        expect(records.length).toBeGreaterThan(3);
      }
      const b = await s.get(`/v0/${route}/${M1}?chain_id=${CHAIN_B}`);
      expect(b.body).toEqual(expected(s.fixture, { chain: CHAIN_B, type }));
    }
  });
});

describe("authentication", () => {
  test("no credential or an unknown key is a 401 with WWW-Authenticate", async () => {
    for (const route of ["activity", "payments", "failures"]) {
      const none = await s.get(`/v0/${route}/${M1}`, {});
      expect(none.status).toBe(401);
      expect(none.body.error.code).toBe("unauthenticated");
      expect(none.body.error.type).toBe("authentication_error");
      expect(none.headers.get("www-authenticate")).toContain("Bearer");
      const bad = await s.get(`/v0/${route}/${M1}`, { authorization: "Bearer sk_live_notakey" });
      expect(bad.status).toBe(401);
    }
  });

  test("a merchant's key reads its own activity and gets 403 for another merchant", async () => {
    const key = await createApiKey(s.db.sql, { merchant: M1 });
    const auth = { authorization: `Bearer ${key.key}` };
    const own = await s.get(`/v0/activity/${M1}?limit=5`, auth);
    expect(own.status).toBe(200);
    expect(own.body).toEqual(expected(s.fixture).slice(0, 5));
    for (const route of ["activity", "payments", "failures"]) {
      const other = await s.get(`/v0/${route}/${M2}`, auth);
      expect(other.status).toBe(403);
      expect(other.body.error.code).toBe("forbidden");
      expect(other.body.error.type).toBe("permission_error");
    }
  });

  test("a malformed merchant is a 400 before authentication", async () => {
    const res = await s.get(`/v0/activity/0x1234`, {});
    expect(res.status).toBe(400);
    expect(res.body.error.param).toBe("merchant");
  });

  test("every response carries a request id, also errors", async () => {
    const ok = await s.get(`/v0/activity/${M1}?limit=1`);
    const err = await s.get(`/v0/activity/${M1}`, {});
    expect(ok.headers.get("x-request-id")).toMatch(/^req_[0-9a-f]{32}$/);
    expect(err.headers.get("x-request-id")).toBe(err.body.error.request_id);
  });
});
