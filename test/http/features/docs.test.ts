/**
 * The OpenAPI document at /docs/json and the Swagger UI page at /docs: every route documented (summary, description,
 * described parameters, a 200 schema with an example, the error envelope for each error status, bearer security where
 * a credential is needed), the document agreeing with what the API really answers, and the page working offline.
 */
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { Value } from "@sinclair/typebox/value";
import { ActivityRecord } from "../../../src/http/features/activity/model";
import { SubscriptionRecord } from "../../../src/http/features/subscriptions/model";
import { CheckResult } from "../../../src/http/features/check/model";
import { LogoutResponse, NonceResponse, SessionResponse, VerifyBody } from "../../../src/http/features/siwe/model";
import { ErrorEnvelope } from "../../../src/http/features/docs";
import { parseSignIn } from "../../../src/http/features/siwe/service";
import { createApiKey } from "../../../src/auth/api-keys";
import { CHAIN_A, M1, M2, MOD, W } from "../../../testkit/seed";
import { startSeededApp, type SeededApp } from "../../../testkit/app";

type Schema = Record<string, any>;
type Operation = {
  tags?: string[];
  summary?: string;
  description?: string;
  operationId?: string;
  security?: Record<string, string[]>[];
  parameters?: {
    name: string;
    in: string;
    required: boolean;
    description?: string;
    example?: unknown;
    schema: Schema;
  }[];
  requestBody?: { required?: boolean; content: Record<string, any> };
  responses: Record<string, { description?: string; headers?: Record<string, unknown>; content?: Record<string, any> }>;
};

/** What each route must document. */
type Expected = {
  method: "get" | "post";
  path: string;
  auth: boolean;
  pathParams?: string[];
  query?: string[];
  requiredQuery?: string[];
  errors: number[];
};

const merchantQuery = ["chain_id", "limit", "since", "token", "order", "starting_after", "format"];
const EXPECTED: Expected[] = [
  {
    method: "get",
    path: "/v0/activity/{merchant}",
    auth: true,
    pathParams: ["merchant"],
    query: [...merchantQuery, "type"],
    errors: [400, 401, 403, 503],
  },
  {
    method: "get",
    path: "/v0/payments/{merchant}",
    auth: true,
    pathParams: ["merchant"],
    query: merchantQuery,
    errors: [400, 401, 403, 503],
  },
  {
    method: "get",
    path: "/v0/failures/{merchant}",
    auth: true,
    pathParams: ["merchant"],
    query: merchantQuery,
    errors: [400, 401, 403, 503],
  },
  {
    method: "get",
    path: "/v0/subscriptions/{merchant}",
    auth: true,
    pathParams: ["merchant"],
    query: ["chain_id", "status", "source", "limit", "starting_after", "format"],
    errors: [400, 401, 403, 503],
  },
  {
    method: "get",
    path: "/v0/subscriptions/{merchant}/{id}",
    auth: true,
    pathParams: ["merchant", "id"],
    query: ["chain_id"],
    errors: [400, 401, 403, 404, 503],
  },
  {
    method: "get",
    path: "/v0/auth/check",
    auth: false,
    query: ["module_address", "wallet", "plan_ids", "mode", "chain_id", "min_block", "spender"],
    requiredQuery: ["module_address", "wallet", "plan_ids"],
    errors: [400, 401, 429, 502, 503],
  },
  {
    method: "get",
    path: "/v0/auth/plans",
    auth: false,
    query: ["module_address", "plan_ids", "chain_id"],
    requiredQuery: ["module_address", "plan_ids"],
    errors: [400, 401, 429, 503],
  },
  { method: "get", path: "/v0/siwe/nonce", auth: false, errors: [429, 503] },
  { method: "post", path: "/v0/siwe/verify", auth: false, errors: [400, 401, 429, 502, 503] },
  { method: "get", path: "/v0/siwe/me", auth: true, errors: [401, 503] },
  // Every POST with a merchant credential takes an Idempotency-Key, hence its 409.
  { method: "post", path: "/v0/siwe/logout", auth: true, errors: [401, 409, 503] },
  { method: "get", path: "/healthz", auth: false, errors: [] },
  { method: "get", path: "/readyz", auth: false, errors: [503] },
];

/** `error.code` each documented error status must show in its example. */
const CODES: Record<string, string[]> = {
  400: ["invalid_parameter", "missing_parameter"],
  401: ["unauthenticated"],
  403: ["forbidden"],
  404: ["not_found"],
  409: ["idempotency_key_reused", "idempotency_key_in_use"],
  429: ["rate_limited"],
  502: ["chain_unavailable"],
  503: ["unavailable"],
};

const isObject = (v: unknown): v is Record<string, unknown> => typeof v === "object" && v !== null && !Array.isArray(v);

function hasType(type: string, v: unknown): boolean {
  switch (type) {
    case "null":
      return v === null;
    case "integer":
      return Number.isInteger(v);
    case "number":
      return typeof v === "number" && Number.isFinite(v);
    case "array":
      return Array.isArray(v);
    case "object":
      return isObject(v);
    default:
      return typeof v === type;
  }
}

/**
 * Errors of `value` against the JSON Schema subset the document uses (type, const, enum, anyOf/oneOf/allOf,
 * properties/required/items, string and number bounds, pattern, date-time). `strict` also rejects properties the
 * schema does not name: a real response may only carry documented fields.
 */
function validate(schema: Schema, value: unknown, strict = false, path = "$"): string[] {
  const errs: string[] = [];
  if (schema.anyOf && !schema.anyOf.some((s: Schema) => validate(s, value, strict, path).length === 0)) {
    errs.push(`${path}: matches no anyOf branch (${JSON.stringify(value)?.slice(0, 80)})`);
  }
  if (schema.oneOf && schema.oneOf.filter((s: Schema) => validate(s, value, strict, path).length === 0).length !== 1) {
    errs.push(`${path}: does not match exactly one oneOf branch`);
  }
  for (const s of schema.allOf ?? []) errs.push(...validate(s, value, strict, path));
  if ("const" in schema && value !== schema.const) errs.push(`${path}: is not ${JSON.stringify(schema.const)}`);
  if (schema.enum && !schema.enum.includes(value)) errs.push(`${path}: not one of ${schema.enum.join(", ")}`);
  if (schema.type) {
    const types: string[] = Array.isArray(schema.type) ? schema.type : [schema.type];
    if (!types.some((t) => hasType(t, value))) return [...errs, `${path}: is not ${types.join(" | ")}`];
  }
  if (typeof value === "string") {
    if (schema.pattern && !new RegExp(schema.pattern).test(value)) errs.push(`${path}: does not match the pattern`);
    if (schema.minLength !== undefined && value.length < schema.minLength) errs.push(`${path}: too short`);
    if (schema.maxLength !== undefined && value.length > schema.maxLength) errs.push(`${path}: too long`);
    if (schema.format === "date-time" && Number.isNaN(Date.parse(value))) errs.push(`${path}: not a date-time`);
  }
  if (typeof value === "number") {
    if (schema.minimum !== undefined && value < schema.minimum) errs.push(`${path}: below the minimum`);
    if (schema.maximum !== undefined && value > schema.maximum) errs.push(`${path}: above the maximum`);
  }
  if (Array.isArray(value) && schema.items) {
    value.forEach((v, i) => errs.push(...validate(schema.items, v, strict, `${path}[${i}]`)));
  }
  if (isObject(value) && (schema.properties || schema.type === "object")) {
    for (const name of schema.required ?? []) if (!(name in value)) errs.push(`${path}.${name}: missing`);
    for (const [k, v] of Object.entries(value)) {
      const s = schema.properties?.[k];
      if (s) errs.push(...validate(s, v, strict, `${path}.${k}`));
      else if (strict || schema.additionalProperties === false) errs.push(`${path}.${k}: not documented`);
    }
  }
  return errs;
}

let s: SeededApp;
let doc: {
  openapi: string;
  tags: { name: string }[];
  paths: Record<string, Record<string, Operation>>;
  [k: string]: any;
};
let subscriptionId: string;
let otherMerchantKey: string;

const op = (e: Pick<Expected, "method" | "path">): Operation => doc.paths[e.path]![e.method]!;
const allOperations = () =>
  Object.entries(doc.paths).flatMap(([path, item]) =>
    Object.entries(item).map(([method, o]) => ({ path, method, op: o as Operation })),
  );
const json = (o: Operation, status: number | string) => o.responses[String(status)]?.content?.["application/json"];

beforeAll(async () => {
  s = await startSeededApp();
  const res = await s.get("/docs/json", {});
  expect(res.status).toBe(200);
  doc = res.body;
  subscriptionId = s.fixture.subscriptions.find((x) => x.chain_id === CHAIN_A && x.merchant === M1)!.subscription_id;
  otherMerchantKey = (await createApiKey(s.db.sql, { merchant: M2 })).key;
});
afterAll(async () => {
  await s?.close();
});

describe("the validator used below", () => {
  test("rejects what it should, so the checks below can fail", () => {
    const schema = {
      type: "object",
      required: ["a"],
      properties: { a: { anyOf: [{ type: "integer" }, { type: "null" }] }, b: { type: "string", pattern: "^x" } },
    };
    expect(validate(schema, { a: 1, b: "xy" })).toEqual([]);
    expect(validate(schema, { a: null })).toEqual([]);
    expect(validate(schema, { b: "x" })).toEqual(["$.a: missing"]);
    expect(validate(schema, { a: 1.5 }).length).toBe(1);
    expect(validate(schema, { a: 1, b: "y" }).length).toBe(1);
    expect(validate(schema, { a: 1, c: 1 })).toEqual([]);
    expect(validate(schema, { a: 1, c: 1 }, true)).toEqual(["$.c: not documented"]);
  });
});

describe("/docs/json", () => {
  test("is an OpenAPI 3 JSON document with info and the bearer scheme", async () => {
    const res = await s.app.handle(new Request("http://localhost/docs/json"));
    expect(res.headers.get("content-type")).toContain("application/json");
    expect(doc.openapi).toMatch(/^3\.\d+\.\d+$/);
    expect(doc.info.title).toBe("Subscription Payments Indexer API");
    expect(doc.info.description.length).toBeGreaterThan(100);
    expect(doc.components.securitySchemes.bearer).toMatchObject({ type: "http", scheme: "bearer" });
  });

  test("lists every route of the API, and none of the docs routes", () => {
    for (const e of EXPECTED) expect(doc.paths[e.path]?.[e.method], `${e.method} ${e.path}`).toBeDefined();
    expect(Object.keys(doc.paths).filter((p) => p.startsWith("/docs"))).toEqual([]);
    const ids = allOperations().map((o) => o.op.operationId);
    expect(new Set(ids).size).toBe(ids.length);
  });

  test("every operation has a summary, a description and declared tags", () => {
    const declared = new Set(doc.tags.map((t) => t.name));
    for (const { path, method, op: o } of allOperations()) {
      const where = `${method} ${path}`;
      expect(o.summary?.length ?? 0, where).toBeGreaterThan(3);
      expect(o.description?.length ?? 0, where).toBeGreaterThan(20);
      expect(o.tags?.length ?? 0, where).toBeGreaterThan(0);
      for (const t of o.tags ?? []) expect(declared.has(t), `${where}: tag ${t}`).toBe(true);
    }
  });

  test("every path and query parameter is listed, described (where Swagger UI shows it) and correctly required", () => {
    for (const e of EXPECTED) {
      const params = op(e).parameters ?? [];
      const where = `${e.method} ${e.path}`;
      expect(
        params.filter((p) => p.in === "path").map((p) => p.name),
        where,
      ).toEqual(e.pathParams ?? []);
      expect(
        params
          .filter((p) => p.in === "query")
          .map((p) => p.name)
          .sort(),
        where,
      ).toEqual([...(e.query ?? [])].sort());
      for (const p of params) {
        expect(p.required, `${where} ${p.name}`).toBe(p.in === "path" || (e.requiredQuery ?? []).includes(p.name));
      }
    }
    for (const { path, method, op: o } of allOperations()) {
      for (const p of o.parameters ?? []) {
        const where = `${method} ${path} ${p.name}`;
        // Parameter-level: Swagger UI ignores schema.description.
        expect(p.description?.length ?? 0, where).toBeGreaterThan(10);
        expect(p.schema, where).toBeDefined();
        if (p.example !== undefined) expect(validate(p.schema, p.example), where).toEqual([]);
        if (p.schema.default !== undefined) expect(validate(p.schema, p.schema.default), where).toEqual([]);
      }
    }
  });

  test("every operation has a 200 (or, for a create, 201) JSON schema with an example that conforms to it", () => {
    for (const { path, method, op: o } of allOperations()) {
      const where = `${method} ${path}`;
      const success = method === "post" && o.responses["201"] ? 201 : 200;
      const ok = json(o, success);
      expect(o.responses[String(success)]?.description?.length ?? 0, where).toBeGreaterThan(1);
      expect(ok?.schema, where).toBeDefined();
      expect(ok?.example, where).toBeDefined();
      expect(validate(ok.schema, ok.example, true), where).toEqual([]);
    }
    // And the examples are values of the models the routes really return.
    const example = (path: string, method = "get") => json(doc.paths[path]![method]!, 200).example;
    for (const r of example("/v0/activity/{merchant}")) expect(Value.Check(ActivityRecord, r)).toBe(true);
    for (const p of ["/v0/payments/{merchant}", "/v0/failures/{merchant}"]) {
      for (const r of example(p)) expect(Value.Check(ActivityRecord, r)).toBe(true);
    }
    expect(example("/v0/payments/{merchant}").every((r: ActivityRecord) => r.type === "CHARGE")).toBe(true);
    expect(example("/v0/failures/{merchant}").every((r: ActivityRecord) => r.type === "FAIL")).toBe(true);
    for (const r of example("/v0/subscriptions/{merchant}")) expect(Value.Check(SubscriptionRecord, r)).toBe(true);
    expect(Value.Check(SubscriptionRecord, example("/v0/subscriptions/{merchant}/{id}"))).toBe(true);
    expect(Value.Check(CheckResult, example("/v0/auth/check"))).toBe(true);
    expect(Value.Check(NonceResponse, example("/v0/siwe/nonce"))).toBe(true);
    expect(Value.Check(SessionResponse, example("/v0/siwe/verify", "post"))).toBe(true);
    expect(Value.Check(LogoutResponse, example("/v0/siwe/logout", "post"))).toBe(true);
  });

  test("a request body is documented as JSON with a conforming example", () => {
    const bodies = allOperations().filter((o) => o.op.requestBody);
    expect(bodies.map((o) => `${o.method} ${o.path}`)).toContain("post /v0/siwe/verify");
    for (const { path, method, op: o } of bodies) {
      const body = o.requestBody!.content["application/json"];
      expect(body?.schema, `${method} ${path}`).toBeDefined();
      expect(body?.example, `${method} ${path}`).toBeDefined();
      expect(validate(body.schema, body.example, true), `${method} ${path}`).toEqual([]);
    }
    const verify = op({ method: "post", path: "/v0/siwe/verify" }).requestBody!.content["application/json"];
    expect(verify.schema.required.sort()).toEqual(["message", "signature"]);
    expect(Value.Check(VerifyBody, verify.example)).toBe(true);
    // The example message is one the service parses.
    expect(parseSignIn(verify.example.message)).toMatchObject({ domain: "api.example.com", chainId: 31337 });
  });

  test("each route documents exactly its error statuses, each with the error envelope and a matching example", () => {
    for (const e of EXPECTED) {
      const o = op(e);
      const where = `${e.method} ${e.path}`;
      expect(Object.keys(o.responses).sort(), where).toEqual(["200", ...e.errors.map(String)].sort());
      for (const status of e.errors) {
        const body = json(o, status);
        const at = `${where} ${status}`;
        expect(o.responses[String(status)]!.description?.length ?? 0, at).toBeGreaterThan(10);
        // The envelope: error.{type, code, message, request_id} required, param optional.
        expect(body.schema.required, at).toEqual(["error"]);
        expect(body.schema.properties.error.required.sort(), at).toEqual(["code", "message", "request_id", "type"]);
        expect(Object.keys(body.schema.properties.error.properties), at).toContain("param");
        expect(validate(body.schema, body.example, true), at).toEqual([]);
        expect(Value.Check(ErrorEnvelope, body.example), at).toBe(true);
        expect(CODES[status], at).toContain(body.example.error.code);
        const headers = Object.keys(o.responses[String(status)]!.headers ?? {});
        expect(headers, at).toContain("X-Request-Id");
        if (status === 401) expect(headers, at).toContain("WWW-Authenticate");
        if (status === 429 || status === 503) expect(headers, at).toContain("Retry-After");
      }
    }
    // Mode both's 502 carries the indexed answer: documented and in the example.
    const chainDown = json(op({ method: "get", path: "/v0/auth/check" }), 502);
    expect(chainDown.schema.properties.error.properties.indexed).toBeDefined();
    expect(chainDown.example.error.indexed.authorized).toBe(true);
  });

  test("routes that need a credential require the bearer scheme; public routes require none", () => {
    for (const e of EXPECTED) {
      const security = op(e).security;
      if (e.auth) expect(security, e.path).toEqual([{ bearer: [] }]);
      else expect(security === undefined || security.length === 0, e.path).toBe(true);
    }
  });
});

describe("the document agrees with the API", () => {
  const key = (k: string) => ({ authorization: `Bearer ${k}` });
  const adminKey = () => s.config.ADMIN_API_KEY!;
  const check = `/v0/auth/check?module_address=${MOD.a1}&wallet=${W.alice}&plan_ids=1,2`;
  /** Real requests: [documented path, method, request path, headers, body, expected status]. */
  const cases = (): [string, "get" | "post", string, Record<string, string>, unknown, number][] => [
    ["/v0/activity/{merchant}", "get", `/v0/activity/${M1}`, key("sk_live_unknown"), undefined, 401],
    ["/v0/activity/{merchant}", "get", `/v0/activity/${M1}?limit=2`, {}, undefined, 401],
    ["/v0/activity/{merchant}", "get", `/v0/activity/${M1}?limit=0`, key(adminKey()), undefined, 400],
    ["/v0/activity/{merchant}", "get", `/v0/activity/${M1}`, key(otherMerchantKey), undefined, 403],
    ["/v0/activity/{merchant}", "get", `/v0/activity/${M1}`, key(adminKey()), undefined, 200],
    ["/v0/payments/{merchant}", "get", `/v0/payments/${M1}`, key(adminKey()), undefined, 200],
    ["/v0/failures/{merchant}", "get", `/v0/failures/${M1}`, key(adminKey()), undefined, 200],
    ["/v0/failures/{merchant}", "get", `/v0/failures/0x12`, key(adminKey()), undefined, 400],
    ["/v0/subscriptions/{merchant}", "get", `/v0/subscriptions/${M1}`, key(adminKey()), undefined, 200],
    ["/v0/subscriptions/{merchant}", "get", `/v0/subscriptions/${M1}`, key(otherMerchantKey), undefined, 403],
    [
      "/v0/subscriptions/{merchant}/{id}",
      "get",
      `/v0/subscriptions/${M1}/${subscriptionId}`,
      key(adminKey()),
      undefined,
      200,
    ],
    ["/v0/subscriptions/{merchant}/{id}", "get", `/v0/subscriptions/${M1}/987654321`, key(adminKey()), undefined, 404],
    ["/v0/subscriptions/{merchant}/{id}", "get", `/v0/subscriptions/${M1}/x`, key(adminKey()), undefined, 400],
    ["/v0/auth/check", "get", check, {}, undefined, 200],
    ["/v0/auth/check", "get", `/v0/auth/check?module_address=${MOD.a1}&plan_ids=1`, {}, undefined, 400],
    ["/v0/siwe/nonce", "get", "/v0/siwe/nonce", {}, undefined, 200],
    ["/v0/siwe/verify", "post", "/v0/siwe/verify", {}, {}, 400],
    ["/v0/siwe/verify", "post", "/v0/siwe/verify", {}, { message: "hello", signature: "0x00" }, 400],
    ["/v0/siwe/me", "get", "/v0/siwe/me", {}, undefined, 401],
    ["/v0/siwe/me", "get", "/v0/siwe/me", key(otherMerchantKey), undefined, 401],
    ["/v0/siwe/logout", "post", "/v0/siwe/logout", {}, {}, 401],
    ["/healthz", "get", "/healthz", {}, undefined, 200],
  ];

  test("every real response has a documented status and a body of the documented schema, with no extra field", async () => {
    for (const [path, method, url, headers, body, status] of cases()) {
      const res = await s.app.handle(
        new Request(`http://localhost${url}`, {
          method: method.toUpperCase(),
          headers: body === undefined ? headers : { ...headers, "content-type": "application/json" },
          body: body === undefined ? undefined : JSON.stringify(body),
        }),
      );
      const where = `${method} ${url} -> ${res.status}`;
      expect(res.status, where).toBe(status);
      const documented = json(doc.paths[path]![method]!, res.status);
      expect(documented, where).toBeDefined();
      expect(validate(documented.schema, await res.json(), true), where).toEqual([]);
      expect(res.headers.get("x-request-id"), where).toMatch(/^req_[0-9a-f]{32}$/);
      if (res.status === 401) expect(res.headers.get("www-authenticate"), where).toBe("Bearer");
    }
  });

  test("readyz answers one of its documented statuses with the documented body", async () => {
    const res = await s.app.handle(new Request("http://localhost/readyz"));
    const documented = json(doc.paths["/readyz"]!.get!, res.status);
    expect(documented).toBeDefined();
    expect(validate(documented.schema, await res.json(), true)).toEqual([]);
  });
});

describe("/docs works offline", () => {
  test("the page references only this server's assets and its own document", async () => {
    for (const path of ["/docs", "/docs/"]) {
      const res = await s.app.handle(new Request(`http://localhost${path}`));
      expect(res.status).toBe(200);
      expect(res.headers.get("content-type")).toContain("text/html");
      const html = await res.text();
      const refs = [...html.matchAll(/\b(?:src|href)="([^"]*)"/g)].map((m) => m[1]);
      expect(refs.sort()).toEqual(["/docs/assets/swagger-ui-bundle.js", "/docs/assets/swagger-ui.css"]);
      // No absolute or protocol-relative URL anywhere, so nothing can come from a CDN.
      expect(html).not.toMatch(/https?:|\/\/[a-z0-9.-]+\.[a-z]{2,}/i);
      // The viewer's options: the document by absolute path (the page also works as /docs/), no online validator.
      const options = JSON.parse(/SwaggerUIBundle\((\{.*?\})\)/s.exec(html)![1]);
      expect(options.url).toBe("/docs/json");
      expect(options.validatorUrl).toBe("none");
    }
  });

  test("the assets are served from swagger-ui-dist with their content types", async () => {
    const dir = Bun.resolveSync("swagger-ui-dist/package.json", import.meta.dir).replace(/package\.json$/, "");
    for (const [name, type] of [
      ["swagger-ui-bundle.js", "text/javascript"],
      ["swagger-ui.css", "text/css"],
    ] as const) {
      const res = await s.app.handle(new Request(`http://localhost/docs/assets/${name}`));
      expect(res.status).toBe(200);
      expect(res.headers.get("content-type")).toStartWith(type);
      const text = await res.text();
      expect(text).toBe(await Bun.file(dir + name).text());
      if (type === "text/css") expect(text).not.toMatch(/@import|url\(\s*["']?(?:https?:)?\/\//);
    }
    const missing = await s.app.handle(new Request("http://localhost/docs/assets/nope.js"));
    expect(missing.status).toBe(404);
    expect(((await missing.json()) as { error: { code: string } }).error.code).toBe("not_found");
  });
});
