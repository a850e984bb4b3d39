/**
 * What every route's OpenAPI `detail` must carry, so the document stays lint-clean under Redocly's rules
 * (`bun run openapi:lint`, in CI) as routes are added: a summary, a description, declared tags, an explicit
 * `security` (`[]` on a public route, `[{ bearer: [] }]` otherwise), a 4xx response, and on a POST with a credential
 * the `Idempotency-Key` header and its 409. The `webhooks` section documents every event type with a payload schema
 * its example satisfies.
 */
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { Value } from "@sinclair/typebox/value";
import { startSeededApp, type SeededApp } from "../../../testkit/app";
import { EVENT_TYPES } from "../../../src/events/envelope";
import {
  CUSTOMER_EVENT_TYPES,
  eventExample,
  eventSchema,
  WEBHOOK_EVENT_TYPES,
} from "../../../src/http/features/docs/webhooks";

type Op = {
  operationId?: string;
  summary?: string;
  description?: string;
  tags?: string[];
  security?: Record<string, string[]>[];
  parameters?: { name: string; in: string }[];
  responses: Record<string, { description?: string }>;
  requestBody?: { required?: boolean; content: Record<string, { schema: unknown; example?: unknown }> };
};
type Doc = {
  openapi: string;
  servers?: { url: string }[];
  info: { license?: { name: string } };
  tags: { name: string }[];
  paths: Record<string, Record<string, Op>>;
  webhooks?: Record<string, { post: Op }>;
};

/** Operations without a 4xx: the probes take no input (listed in .redocly.lint-ignore.yaml too). */
const NO_4XX = new Set(["get /healthz", "get /readyz"]);

let s: SeededApp;
let doc: Doc;

beforeAll(async () => {
  s = await startSeededApp();
  doc = (await s.get("/docs/json")).body as Doc;
}, 60_000);

afterAll(async () => {
  await s?.close();
});

const operations = () =>
  Object.entries(doc.paths).flatMap(([path, item]) =>
    Object.entries(item).map(([method, op]) => ({ where: `${method} ${path}`, method, op })),
  );

describe("every route", () => {
  test("the document is OpenAPI 3.1 with servers and a license", () => {
    expect(doc.openapi).toStartWith("3.1");
    expect(doc.servers?.length).toBeGreaterThan(0);
    expect(doc.info.license?.name).toBe("MIT");
  });

  test("has a unique operationId, a summary, a description and declared tags", () => {
    const declared = new Set(doc.tags.map((t) => t.name));
    const ids = new Set<string>();
    for (const { where, op } of operations()) {
      expect(op.operationId, where).toBeString();
      expect(ids.has(op.operationId!), `${where}: duplicate operationId`).toBe(false);
      ids.add(op.operationId!);
      expect(op.summary?.length ?? 0, `${where}: summary`).toBeGreaterThan(3);
      expect(op.description?.length ?? 0, `${where}: description`).toBeGreaterThan(20);
      expect(op.tags?.length ?? 0, `${where}: tags`).toBeGreaterThan(0);
      for (const tag of op.tags ?? []) expect(declared.has(tag), `${where}: tag ${tag} is not declared`).toBe(true);
    }
  });

  test("says which credential it needs: security [] when public, the bearer scheme otherwise", () => {
    for (const { where, op } of operations()) {
      expect(Array.isArray(op.security), `${where}: detail.security is missing`).toBe(true);
      for (const requirement of op.security!) expect(Object.keys(requirement), where).toEqual(["bearer"]);
    }
  });

  test("documents a 4xx answer, and a description for every answer", () => {
    for (const { where, op } of operations()) {
      const statuses = Object.keys(op.responses);
      if (!NO_4XX.has(where))
        expect(
          statuses.some((st) => /^4/.test(st)),
          `${where}: no 4xx`,
        ).toBe(true);
      for (const st of statuses)
        expect(op.responses[st]!.description?.length ?? 0, `${where} ${st}`).toBeGreaterThan(0);
    }
  });

  test("a POST with a credential takes an Idempotency-Key and documents its 409", () => {
    const posts = operations().filter(({ method, op }) => method === "post" && op.security?.length);
    expect(posts.length).toBeGreaterThan(5);
    for (const { where, op } of posts) {
      expect(
        op.parameters?.some((p) => p.in === "header" && p.name === "Idempotency-Key"),
        where,
      ).toBe(true);
      expect(op.responses["409"], where).toBeDefined();
    }
  });
});

describe("the webhooks section", () => {
  test("has every event type, the customer movements included", () => {
    expect(Object.keys(doc.webhooks ?? {}).sort()).toEqual([...WEBHOOK_EVENT_TYPES].sort());
    for (const type of [...EVENT_TYPES, ...CUSTOMER_EVENT_TYPES]) expect(doc.webhooks?.[type], type).toBeDefined();
  });

  test("each is a public signed POST whose example satisfies its payload schema", () => {
    for (const [type, item] of Object.entries(doc.webhooks!)) {
      const op = item.post;
      expect(op.security, type).toEqual([]);
      expect(op.operationId, type).toBe(`webhook_${type.replaceAll(".", "_")}`);
      expect(
        op.parameters?.map((p) => p.name),
        type,
      ).toEqual(["webhook-id", "webhook-timestamp", "webhook-signature"]);
      const body = op.requestBody!.content["application/json"]!;
      expect(op.requestBody!.required, type).toBe(true);
      expect(body.example, type).toEqual(eventExample(type));
      expect(
        [...Value.Errors(eventSchema(type), body.example)].map((e) => `${e.path}: ${e.message}`),
        type,
      ).toEqual([]);
      expect((body.schema as { properties: { type: { const: string } } }).properties.type.const).toBe(type);
    }
  });

  test("event.reverted names the withdrawn event's block, chain, allocation and subscriber", () => {
    const schema = doc.webhooks!["event.reverted"]!.post.requestBody!.content["application/json"]!.schema as {
      properties: { data: { properties: { object: { required: string[] } } } };
    };
    expect(schema.properties.data.properties.object.required.sort()).toEqual(
      ["allocation_id", "block_number", "chain_id", "id", "type", "user_address"].sort(),
    );
  });

  test("a payload of another shape fails its schema (the check above can fail)", () => {
    const bad = { ...eventExample("charge.succeeded"), chain_id: "31337" };
    expect(Value.Check(eventSchema("charge.succeeded"), bad)).toBe(false);
    const wrongType = { ...eventExample("charge.succeeded"), type: "charge.failed" };
    expect(Value.Check(eventSchema("charge.succeeded"), wrongType)).toBe(false);
  });
});
