/**
 * The MRR routes over movements placed by hand (the indexer's part is tested in test/analytics): the response
 * shapes, the period figures of a small history worked out below, paging, CSV, and the errors of `/v0/stats`.
 */
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { startSeededApp, type SeededApp } from "../../../testkit/app";
import { CHAIN_A } from "../../../testkit/seed";
import { addToRollups } from "../../../src/analytics/queries";

let s: SeededApp;
const M = "0x00000000000000000000000000000000000000aa";
const USDC = "0x5fbdb2315678afecb367f032d93f642f64180aa3";
const W = (n: number) => `0x${n.toString(16).padStart(40, "0")}`;
const t = (iso: string) => Date.parse(iso) / 1000;

/** Inserts one movement. */
async function move(
  n: number,
  customer: string,
  at: number,
  kind: string,
  before: bigint,
  after: bigint,
  reason: string | null = null,
  recovered = false,
) {
  // The customer's first instant and the start of its current stretch, as the indexer carries them.
  const first = (firsts[customer] ??= at);
  if (kind === "new" || kind === "reactivation") stretch[customer] = at;
  await s.db.sql`insert into mrr_movements (chain_id, id, merchant, customer, token, block_number, at, kind,
      mrr_before, mrr_after, reason, recovered, allocation_ids, first_at, active_since)
    values (${CHAIN_A}, ${"mov_" + n.toString(16).padStart(40, "0")}, ${M}, ${customer}, ${USDC}, ${n}, ${at}, ${kind},
      ${before.toString()}, ${after.toString()}, ${reason}, ${recovered}, ${[`${CHAIN_A}:${W(99)}:${n}`]}, ${first},
      ${stretch[customer]!})`;
}
const firsts: Record<string, number> = {};
const stretch: Record<string, number> = {};

beforeAll(async () => {
  s = await startSeededApp();
  await s.db.sql`insert into tokens (chain_id, address, symbol, decimals) values (${CHAIN_A}, ${USDC}, 'USDC', 6)
    on conflict do nothing`;
  // Day 1: two new customers; day 2: one expands, one churns (balance); day 3: the churned one comes back.
  await move(1, W(1), t("2026-01-01T10:00:00Z"), "new", 0n, 100n);
  await move(2, W(2), t("2026-01-01T11:00:00Z"), "new", 0n, 50n);
  await move(3, W(1), t("2026-01-02T10:00:00Z"), "expansion", 100n, 130n);
  await move(4, W(2), t("2026-01-02T12:00:00Z"), "churn", 50n, 0n, "InsufficientBalance");
  await move(5, W(2), t("2026-01-03T00:00:00Z"), "reactivation", 0n, 50n, null, true);
  // The rollups, as the indexer keeps them.
  await addToRollups(s.db.sql, s.db.sql`m.chain_id = ${CHAIN_A}`, 1);
}, 60_000);
afterAll(() => s?.close());

describe("GET /v0/stats/:merchant/mrr", () => {
  test("periods, rates and the figures now", async () => {
    const r = await s.get(`/v0/stats/${M}/mrr?interval=day&since=2026-01-01T00:00:00Z&until=2026-01-04T00:00:00Z`);
    expect(r.status).toBe(200);
    expect(r.body.tokens).toHaveLength(1);
    const tk = r.body.tokens[0];
    expect(tk).toMatchObject({
      token: USDC,
      currency: "USDC",
      token_decimals: 6,
      mrr: "180",
      arr: "2160",
      customers: 2,
      arpa: "90",
    });
    const [d1, d2, d3] = tk.periods;
    expect(d1).toMatchObject({
      mrr_start: "0",
      mrr_end: "150",
      customers_start: 0,
      new_customers: 2,
      subscriber_churn_rate: "0.000000",
      nrr: null,
    });
    expect(d2).toMatchObject({ mrr_start: "150", mrr_end: "180", customers_start: 2, churned_customers: 1 });
    expect(d2.movements.expansion).toEqual({ count: 1, amount: "30" });
    expect(d2.churn_by_reason.InsufficientBalance).toEqual({ count: 1, amount: "-50" });
    expect(d2.subscriber_churn_rate).toBe("0.500000");
    expect(d2.gross_revenue_churn).toBe("0.333333");
    expect(d2.nrr).toBe("0.866667"); // (150 + 30 − 50) / 150
    expect(d2.grr).toBe("0.666667");
    // The reactivation at exactly midnight belongs to day 2's (start, end].
    expect(d2.recovered).toEqual({ count: 1, amount: "50" });
    expect(d3).toMatchObject({ mrr_start: "180", mrr_end: "180" });
  });

  test("the errors of /v0/stats", async () => {
    expect((await s.get(`/v0/stats/${M}/mrr?interval=year`)).status).toBe(400);
    expect((await s.get(`/v0/stats/nope/mrr`)).status).toBe(400);
    expect((await s.get(`/v0/stats/${M}/mrr`, {})).status).toBe(401);
    expect((await s.get(`/v0/stats/${M}/cohorts?interval=day`)).status).toBe(400);
    expect((await s.get(`/v0/stats/${M}/mrr/movements?starting_after=x`)).status).toBe(400);
  });
});

describe("movements and cohorts", () => {
  test("newest first, paged, and as CSV", async () => {
    const p1 = await s.get(`/v0/stats/${M}/mrr/movements?limit=2`);
    expect(p1.status).toBe(200);
    expect(p1.body.map((m: { kind: string }) => m.kind)).toEqual(["reactivation", "churn"]);
    expect(p1.body[1]).toMatchObject({ amount: "-50", reason: "InsufficientBalance", customer: W(2) });
    const next = /starting_after=([^&>]+)/.exec(p1.headers.get("link") ?? "")![1];
    const p2 = await s.get(`/v0/stats/${M}/mrr/movements?limit=10&starting_after=${next}`);
    expect(p2.body.map((m: { kind: string }) => m.kind)).toEqual(["expansion", "new", "new"]);
    expect(p2.headers.get("link")).toBeNull();
    const csv = await s.get(`/v0/stats/${M}/mrr/movements?format=csv`);
    expect(csv.headers.get("content-type")).toContain("text/csv");
    expect(String(csv.body).split("\r\n")[0]).toStartWith("id,at,block_number,customer");
  });

  test("cohorts by month", async () => {
    const r = await s.get(`/v0/stats/${M}/cohorts?since=2026-01-01T00:00:00Z&until=2026-03-01T00:00:00Z`);
    expect(r.status).toBe(200);
    const [c] = r.body.tokens[0].cohorts;
    expect(c).toMatchObject({ cohort_start: "2026-01-01T00:00:00.000Z", size: 2, mrr_start: "180" });
    expect(c.periods[0]).toEqual({
      n: 0,
      customers: 2,
      mrr: "180",
      customer_retention: "1.000000",
      revenue_retention: "1.000000",
    });
  });
});
