import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { Value } from "@sinclair/typebox/value";
import { SubscriptionRecord, SUBSCRIPTION_STATUSES } from "../../../src/http/features/subscriptions/model";
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
  MAX_UINT64,
  MOD,
  NOW_A,
  W,
  type Fixture,
  type SubscriptionSeed,
} from "../../../testkit/seed";
import { startSeededApp, type Res, type SeededApp } from "../../../testkit/app";

let s: SeededApp;
beforeAll(async () => {
  s = await startSeededApp();
}, 60_000);
afterAll(async () => {
  await s?.close();
});

const iso = (sec: number) => new Date(sec * 1000).toISOString();

/** The record the API must return for a seeded subscription, computed independently of the service code. */
function record(x: SubscriptionSeed): SubscriptionRecord {
  const blocked = x.chain_id === CHAIN_A && x.module === MOD.a1 && x.subscriber === W.erin;
  const max = x.max_executions ?? 0;
  const times = x.times_executed ?? 0;
  const queued = !blocked && !x.cancelled && !x.paused && !(max > 0 && times >= max);
  return {
    allocation_id: `${x.chain_id}:${x.module}:${x.subscription_id}`,
    on_chain_id: x.subscription_id,
    module_address: x.module,
    user_address: x.subscriber,
    plan_id: `${x.chain_id}:${x.module}:${x.plan_id}`,
    status: x.expect,
    total_spent: x.total_spent ?? "0",
    times_executed: times,
    next_charge_date: queued ? iso(x.next_charge_at) : null,
    expires_at: x.allowance_expiry ? String(x.allowance_expiry) : null,
    remaining_executions: max === 0 ? null : max - times,
    created_at: iso(x.created_at),
    is_blocked: blocked,
    renewal: null, // the seed stores no outlooks
    source: "subscription_module",
    spend_permission: null,
  };
}

function expected(f: Fixture, q: { merchant?: string; chain?: number; status?: string } = {}): SubscriptionRecord[] {
  return f.subscriptions
    .filter((x) => x.merchant === (q.merchant ?? M1) && x.chain_id === (q.chain ?? CHAIN_A))
    .sort((a, b) => a.block_number - b.block_number || a.log_index - b.log_index)
    .map(record)
    .filter((r) => !q.status || r.status === q.status);
}

async function walk(path: string): Promise<{ records: SubscriptionRecord[]; pages: Res[] }> {
  const records: SubscriptionRecord[] = [];
  const pages: Res[] = [];
  let next: string | undefined = path;
  while (next) {
    const res = await s.get(next);
    expect(res.status).toBe(200);
    pages.push(res);
    records.push(...res.body);
    const link = res.headers.get("link");
    next = link
      ? new URL(/^<([^>]+)>; rel="next"$/.exec(link)![1]).pathname + new URL(/^<([^>]+)>/.exec(link)![1]).search
      : undefined;
    expect(pages.length).toBeLessThan(100);
  }
  return { records, pages };
}

describe("GET /v0/subscriptions/:merchant", () => {
  test("lists every allocation on the merchant's modules in creation order, each field exact", async () => {
    const res = await s.get(`/v0/subscriptions/${M1}`);
    expect(res.status).toBe(200);
    expect(res.body).toEqual(expected(s.fixture));
    expect(res.body.length).toBe(15);
    for (const r of res.body) expect(Value.Check(SubscriptionRecord, r)).toBe(true);
    expect(res.headers.get("x-indexed-block")).toBe(String(INDEXED_BLOCK_A));
    expect(res.headers.get("x-indexed-at")).toBe(iso(NOW_A));
    expect(res.headers.get("link")).toBeNull();
  });

  test("status precedence: BLOCKED > CANCELLED > PAUSED > PENDING > EXPIRED > ACTIVE", async () => {
    const { body } = await s.get(`/v0/subscriptions/${M1}`);
    const status = (id: string) => body.find((r: SubscriptionRecord) => r.on_chain_id === id).status;
    expect(status("1")).toBe("ACTIVE");
    expect(status("2")).toBe("PENDING");
    expect(status("3")).toBe("PAUSED"); // paused and lapsed
    expect(status("4")).toBe("CANCELLED"); // cancelled and paused
    expect(status("5")).toBe("BLOCKED"); // blocked and cancelled
    expect(status("6")).toBe("BLOCKED"); // blocked, otherwise active
    expect(status("11")).toBe("PAUSED"); // paused before the first payment
    expect(status("10")).toBe("ACTIVE"); // unblocked again
    expect(new Set(body.map((r: SubscriptionRecord) => r.status))).toEqual(new Set(SUBSCRIPTION_STATUSES));
  });

  test("grace boundary: active exactly at last_paid + interval + grace, expired one second later", async () => {
    const { body } = await s.get(`/v0/subscriptions/${M1}`);
    expect(body.find((r: SubscriptionRecord) => r.user_address === W.grace).status).toBe("ACTIVE");
    expect(body.find((r: SubscriptionRecord) => r.user_address === W.frank).status).toBe("EXPIRED");
  });

  test("'now' is the later of the wall clock and the newest indexed block time", async () => {
    await s.db.sql`update chains set indexed_time = indexed_time + interval '1 second' where chain_id = ${CHAIN_A}`;
    try {
      const res = await s.get(`/v0/subscriptions/${M1}/8`);
      expect(res.body.status).toBe("EXPIRED");
    } finally {
      await s.db.sql`update chains set indexed_time = indexed_time - interval '1 second' where chain_id = ${CHAIN_A}`;
    }
    expect((await s.get(`/v0/subscriptions/${M1}/8`)).body.status).toBe("ACTIVE");
    // Chain B's newest block is from 2020: the wall clock decides there.
    const b = await s.get(`/v0/subscriptions/${M1}?chain_id=${CHAIN_B}`);
    expect(b.body.map((r: SubscriptionRecord) => r.status)).toEqual(["ACTIVE", "EXPIRED"]);
    expect(b.body).toEqual(expected(s.fixture, { chain: CHAIN_B }));
    expect(b.headers.get("x-indexed-block")).toBe(String(INDEXED_BLOCK_B));
  });

  test("next_charge_date, remaining_executions and expires_at follow the data rules", async () => {
    const { body } = await s.get(`/v0/subscriptions/${M1}`);
    const by = (id: string): SubscriptionRecord => body.find((r: SubscriptionRecord) => r.on_chain_id === id);
    expect(by("1")).toMatchObject({ remaining_executions: 9, expires_at: String(NOW_A + 100 * 86_400) });
    expect(by("1").next_charge_date).toBe(iso(NOW_A + 20 * 86_400));
    expect(by("2").next_charge_date).toBe(iso(NOW_A - 60)); // PENDING: in the past, still reported
    expect(by("7").next_charge_date).not.toBeNull(); // EXPIRED: still reported
    for (const id of ["3", "4", "5", "6", "11"]) expect(by(id).next_charge_date).toBeNull(); // paused/cancelled/blocked
    expect(by("9")).toMatchObject({ status: "ACTIVE", next_charge_date: null, remaining_executions: 0 }); // all used
    expect(by("2")).toMatchObject({
      remaining_executions: null,
      expires_at: null,
      times_executed: 0,
      total_spent: "0",
    });
    expect(by("10").total_spent).toBe(BIG_AMOUNT);
    expect(by("10").expires_at).toBe(MAX_UINT64);
    expect(by(BIG_SUB_ID).allocation_id).toBe(`${CHAIN_A}:${MOD.a1}:${BIG_SUB_ID}`);
  });

  test("status filter", async () => {
    for (const status of SUBSCRIPTION_STATUSES) {
      const res = await s.get(`/v0/subscriptions/${M1}?status=${status}`);
      expect(res.status).toBe(200);
      expect(res.body).toEqual(expected(s.fixture, { status }));
      expect(res.body.length).toBeGreaterThan(0);
    }
  });

  test("limit + Link paging gives the unpaged list, also with a status filter", async () => {
    for (const limit of [1, 2, 4, 15, 1000]) {
      const { records, pages } = await walk(`/v0/subscriptions/${M1}?limit=${limit}`);
      expect(records).toEqual(expected(s.fixture));
      expect(pages.length).toBe(Math.ceil(15 / limit));
      expect(pages.at(-1)!.headers.get("link")).toBeNull();
    }
    const active = await walk(`/v0/subscriptions/${M1}?limit=2&status=ACTIVE`);
    expect(active.records).toEqual(expected(s.fixture, { status: "ACTIVE" }));
  });

  test("starting_after is an allocation_id of this merchant on this chain", async () => {
    const all = expected(s.fixture);
    const res = await s.get(`/v0/subscriptions/${M1}?starting_after=${all[3].allocation_id}&limit=2`);
    expect(res.body).toEqual(all.slice(4, 6));
    const m2 = expected(s.fixture, { merchant: M2 })[0].allocation_id;
    const b = expected(s.fixture, { chain: CHAIN_B })[0].allocation_id;
    const wrongModule = `${CHAIN_A}:${MOD.a2}:1`;
    for (const cursor of [
      m2,
      b,
      wrongModule,
      `${CHAIN_A}:${MOD.a1}:999`,
      "1",
      `${CHAIN_A}:0x12:1`,
      `${CHAIN_A}:${MOD.a1}:x`,
    ]) {
      const r = await s.get(`/v0/subscriptions/${M1}?starting_after=${encodeURIComponent(cursor)}`);
      expect(r.status).toBe(400);
      expect(r.body.error.param).toBe("starting_after");
    }
  });

  test("another merchant's list, a merchant without modules, and an upper-case address", async () => {
    expect((await s.get(`/v0/subscriptions/${M2}`)).body).toEqual(expected(s.fixture, { merchant: M2 }));
    const none = await s.get(`/v0/subscriptions/${M_NONE}`);
    expect(none.status).toBe(200);
    expect(none.body).toEqual([]);
    expect((await s.get(`/v0/subscriptions/0x${M1.slice(2).toUpperCase()}`)).body).toEqual(expected(s.fixture));
  });
});

describe("GET /v0/subscriptions/:merchant/:id", () => {
  test("returns the same record as the list, for every allocation", async () => {
    for (const x of s.fixture.subscriptions.filter((x) => x.merchant === M1)) {
      const res = await s.get(`/v0/subscriptions/${M1}/${x.subscription_id}?chain_id=${x.chain_id}`);
      expect(res.status).toBe(200);
      expect(res.body).toEqual(record(x));
      expect(res.headers.get("x-indexed-block")).toBe(
        String(x.chain_id === CHAIN_A ? INDEXED_BLOCK_A : INDEXED_BLOCK_B),
      );
    }
  });

  test("default chain, leading zeros, ids above 2^64", async () => {
    expect((await s.get(`/v0/subscriptions/${M1}/1`)).body.allocation_id).toBe(`${CHAIN_A}:${MOD.a1}:1`);
    expect((await s.get(`/v0/subscriptions/${M1}/0001`)).body.on_chain_id).toBe("1");
    expect((await s.get(`/v0/subscriptions/${M1}/${BIG_SUB_ID}`)).body.on_chain_id).toBe(BIG_SUB_ID);
    expect((await s.get(`/v0/subscriptions/${M1}/1?chain_id=${CHAIN_B}`)).body.module_address).toBe(MOD.b1);
  });

  test("404 for an unknown id or another merchant's subscription", async () => {
    for (const path of [
      `/v0/subscriptions/${M1}/16`,
      `/v0/subscriptions/${M1}/999`,
      `/v0/subscriptions/${M2}/1`,
      `/v0/subscriptions/${M1}/3?chain_id=${CHAIN_B}`,
      `/v0/subscriptions/${M_NONE}/1`,
      `/v0/subscriptions/${M1}/0`,
    ]) {
      const res = await s.get(path);
      expect(res.status).toBe(404);
      expect(res.body.error.code).toBe("not_found");
      expect(res.body.error.type).toBe("invalid_request_error");
      expect(res.body.error.param).toBe("id");
      expect(res.headers.get("x-indexed-block")).not.toBeNull(); // the index was read
    }
  });

  test("a non-uint256 id is a 400 on id", async () => {
    for (const id of ["abc", "-1", "1.5", "0x10", (1n << 256n).toString(), "1e3"]) {
      const res = await s.get(`/v0/subscriptions/${M1}/${id}`);
      expect(res.status).toBe(400);
      expect(res.body.error.param).toBe("id");
    }
  });
});

describe("authentication", () => {
  test("401 without a credential, 403 with another merchant's key, 200 with the merchant's own", async () => {
    for (const path of [`/v0/subscriptions/${M1}`, `/v0/subscriptions/${M1}/1`]) {
      const none = await s.get(path, {});
      expect(none.status).toBe(401);
      expect(none.headers.get("www-authenticate")).toContain("Bearer");
    }
    const key = await createApiKey(s.db.sql, { merchant: M2 });
    const auth = { authorization: `Bearer ${key.key}` };
    expect((await s.get(`/v0/subscriptions/${M1}`, auth)).status).toBe(403);
    const forbidden = await s.get(`/v0/subscriptions/${M1}/1`, auth);
    expect(forbidden.status).toBe(403);
    expect(forbidden.body.error.code).toBe("forbidden");
    const own = await s.get(`/v0/subscriptions/${M2}`, auth);
    expect(own.status).toBe(200);
    expect(own.body).toEqual(expected(s.fixture, { merchant: M2 }));
    // 403 even for an id that does not exist: no existence oracle across merchants.
    expect((await s.get(`/v0/subscriptions/${M1}/999`, auth)).status).toBe(403);
  });
});
