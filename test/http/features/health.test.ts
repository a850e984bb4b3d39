import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { Value } from "@sinclair/typebox/value";
import { ActivityRecord } from "../../../src/http/features/activity/model";
import { SubscriptionRecord } from "../../../src/http/features/subscriptions/model";
import { CheckResult } from "../../../src/http/features/check/model";
import { ErrorEnvelope } from "../../../src/http/features/docs";
import { CHAIN_A, INDEXED_BLOCK_A } from "../../../testkit/seed";
import { startSeededApp, type SeededApp } from "../../../testkit/app";

let s: SeededApp;
beforeAll(async () => {
  s = await startSeededApp({ READY_MAX_LAG_BLOCKS: "5" });
}, 60_000);
afterAll(async () => {
  await s?.close();
});

describe("/healthz and /readyz", () => {
  test("healthz is 200 {status: ok} without reading anything", async () => {
    const res = await s.get("/healthz", {});
    expect(res.status).toBe(200);
    expect(res.body).toEqual({ status: "ok" });
  });

  test("readyz is 200 while the index is within READY_MAX_LAG_BLOCKS of a recently seen head", async () => {
    const res = await s.get("/readyz", {});
    expect(res.status).toBe(200);
    expect(res.body.status).toBe("ready");
    expect(res.body.chains.find((c: { chain_id: number }) => c.chain_id === CHAIN_A)).toMatchObject({
      indexed_block: String(INDEXED_BLOCK_A),
      head_block: String(INDEXED_BLOCK_A + 2),
      lag_blocks: "2",
    });
  });

  test("readyz is 503 with reasons when the index lags, the head is stale, or nothing is indexed", async () => {
    const sql = s.db.sql;
    const expectNotReady = async (reason: RegExp) => {
      const res = await s.get("/readyz", {});
      expect(res.status).toBe(503);
      expect(res.body.error.code).toBe("unavailable");
      expect(res.body.error.reasons.some((r: string) => reason.test(r))).toBe(true);
    };
    await sql`update chains set head_block = indexed_block + 6 where chain_id = ${CHAIN_A}`;
    await expectNotReady(/6 blocks behind/);
    await sql`update chains set head_block = indexed_block + 5 where chain_id = ${CHAIN_A}`;
    expect((await s.get("/readyz", {})).status).toBe(200);
    await sql`update chains set head_seen_at = now() - interval '10 minutes' where chain_id = ${CHAIN_A}`;
    await expectNotReady(/has not observed the head/);
    await sql`update chains set head_seen_at = now() where chain_id = ${CHAIN_A}`;
    const saved = await sql`select * from chains where chain_id = ${CHAIN_A}`;
    await sql`delete from chains where chain_id = ${CHAIN_A}`;
    await expectNotReady(/not been indexed/);
    await sql`insert into chains ${sql(saved[0])}`;
    expect((await s.get("/readyz", {})).status).toBe(200);
  });
});

describe("/readyz progress and eta_s", () => {
  test("a backfilling chain: the share of [START_BLOCK, head] indexed and the seconds left at the stored rate", async () => {
    const sql = s.db.sql;
    const [saved] = await sql`select * from chains where chain_id = ${CHAIN_A}`;
    const chainOf = (body: { chains?: unknown[]; error?: { chains?: unknown[] } }) =>
      (body.chains ?? body.error?.chains ?? []).find((c) => (c as { chain_id: number }).chain_id === CHAIN_A) as
        { progress: number | null; eta_s: number | null } | undefined;
    try {
      // 4,200 of 10,000 blocks indexed, 100 blocks/s: 5,800 s left.
      await sql`update chains set start_block = 1000, indexed_block = 5199, head_block = 10999, head_seen_at = now(),
        sync_blocks_per_s = 100, updated_at = now() where chain_id = ${CHAIN_A}`;
      let res = await s.get("/readyz", {});
      expect(res.status).toBe(503);
      expect(chainOf(res.body)).toMatchObject({ progress: 0.42, eta_s: 58 });
      // The indexer stopped committing: the stored rate no longer says anything.
      await sql`update chains set updated_at = now() - interval '10 minutes' where chain_id = ${CHAIN_A}`;
      expect(chainOf((await s.get("/readyz", {})).body)).toMatchObject({ progress: 0.42, eta_s: null });
      // Nothing indexed yet.
      await sql`update chains set indexed_block = null, updated_at = now() where chain_id = ${CHAIN_A}`;
      expect(chainOf((await s.get("/readyz", {})).body)).toMatchObject({ progress: 0, eta_s: 100 });
      // Within a few blocks of the head: caught up.
      await sql`update chains set indexed_block = 10990, sync_blocks_per_s = null where chain_id = ${CHAIN_A}`;
      res = await s.get("/readyz", {});
      expect(chainOf(res.body)).toMatchObject({ progress: 1, eta_s: 0 });
    } finally {
      await sql`delete from chains where chain_id = ${CHAIN_A}`;
      await sql`insert into chains ${sql(saved!)}`;
    }
    expect((await s.get("/readyz", {})).status).toBe(200);
  });
});

describe("/docs", () => {
  test("the Swagger UI page loads its viewer from this server, not a CDN", async () => {
    const res = await s.get("/docs", {});
    expect(res.status).toBe(200);
    expect(res.headers.get("content-type")).toContain("text/html");
    expect(res.body).toContain('src="/docs/assets/swagger-ui-bundle.js"');
    expect(res.body).toContain('href="/docs/assets/swagger-ui.css"');
    expect(res.body).not.toMatch(/unpkg|jsdelivr|cdn\./);
    const js = await s.app.handle(new Request("http://localhost/docs/assets/swagger-ui-bundle.js"));
    expect(js.status).toBe(200);
    expect(js.headers.get("content-type")).toContain("javascript");
    expect((await js.text()).length).toBeGreaterThan(100_000);
    const css = await s.app.handle(new Request("http://localhost/docs/assets/swagger-ui.css"));
    expect(css.status).toBe(200);
    expect(css.headers.get("content-type")).toContain("text/css");
  });

  test("the OpenAPI document describes every route with parameters, responses and examples", async () => {
    const res = await s.get("/docs/json", {});
    expect(res.status).toBe(200);
    const doc = res.body;
    expect(doc.openapi).toMatch(/^3\./);
    const routes: Record<string, { path: string[]; query: string[]; required?: string[]; errors: string[] }> = {
      "/v0/activity/{merchant}": {
        path: ["merchant"],
        query: ["chain_id", "limit", "since", "token", "order", "starting_after", "type", "format"],
        errors: ["400", "401", "403", "503"],
      },
      "/v0/payments/{merchant}": {
        path: ["merchant"],
        query: ["chain_id", "limit", "since", "token", "order", "starting_after", "format"],
        errors: ["400", "401", "403", "503"],
      },
      "/v0/failures/{merchant}": {
        path: ["merchant"],
        query: ["chain_id", "limit", "since", "token", "order", "starting_after", "format"],
        errors: ["400", "401", "403", "503"],
      },
      "/v0/subscriptions/{merchant}": {
        path: ["merchant"],
        query: ["chain_id", "status", "limit", "starting_after", "format", "source"],
        errors: ["400", "401", "403", "503"],
      },
      "/v0/subscriptions/{merchant}/{id}": {
        path: ["merchant", "id"],
        query: ["chain_id"],
        errors: ["400", "401", "403", "404", "503"],
      },
      "/v0/auth/check": {
        path: [],
        query: ["module_address", "wallet", "plan_ids", "mode", "chain_id", "min_block", "spender"],
        required: ["module_address", "wallet", "plan_ids"],
        errors: ["400", "401", "429", "502", "503"],
      },
    };
    for (const [path, want] of Object.entries(routes)) {
      const op = doc.paths[path]?.get;
      expect(op).toBeDefined();
      expect(op.summary.length).toBeGreaterThan(3);
      expect(op.description.length).toBeGreaterThan(20);
      const params = op.parameters as {
        name: string;
        in: string;
        required: boolean;
        schema: { description?: string };
      }[];
      expect(params.filter((p) => p.in === "path").map((p) => p.name)).toEqual(want.path);
      expect(
        params
          .filter((p) => p.in === "query")
          .map((p) => p.name)
          .sort(),
      ).toEqual([...want.query].sort());
      for (const p of params) {
        expect(p.schema.description?.length ?? 0).toBeGreaterThan(3);
        expect(p.required).toBe(p.in === "path" || (want.required ?? []).includes(p.name));
      }
      expect(Object.keys(op.responses).sort()).toEqual(["200", ...want.errors].sort());
      for (const [status, r] of Object.entries(op.responses) as [string, any][]) {
        const example = r.content["application/json"].example;
        expect(example).toBeDefined();
        if (status !== "200") expect(Value.Check(ErrorEnvelope, example)).toBe(true);
      }
      if (path !== "/v0/auth/check") expect(op.security).toEqual([{ bearer: [] }]);
    }
    // The 200 examples are valid records.
    const ok = (path: string) => doc.paths[path].get.responses["200"].content["application/json"].example;
    for (const r of ok("/v0/activity/{merchant}")) expect(Value.Check(ActivityRecord, r)).toBe(true);
    for (const r of ok("/v0/subscriptions/{merchant}")) expect(Value.Check(SubscriptionRecord, r)).toBe(true);
    expect(Value.Check(SubscriptionRecord, ok("/v0/subscriptions/{merchant}/{id}"))).toBe(true);
    expect(Value.Check(CheckResult, ok("/v0/auth/check"))).toBe(true);
    expect(doc.paths["/healthz"].get.summary).toBeDefined();
    expect(doc.paths["/readyz"].get.responses["503"]).toBeDefined();
    expect(doc.paths["/docs/assets/swagger-ui-bundle.js"]).toBeUndefined();
    expect(doc.components.securitySchemes.bearer.scheme).toBe("bearer");
  });
});
