/**
 * Property: no request makes a 5xx. Every route (GET and POST) is driven through the real app over the seeded
 * database with generated path and query values (arbitrary strings, unicode, huge numbers, dates at the edges,
 * valid-looking ids) and generated Authorization, Cookie and X-Forwarded-For headers. Every answer is a 2xx, or a
 * 4xx carrying the error envelope.
 */
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import fc from "fast-check";
import { createApiKey } from "../../src/auth/api-keys";
import { ADMIN_KEY, startSeededApp, type SeededApp } from "../../testkit/app";
import { CHAIN_A, CHAIN_B, M1, M2, MOD, W } from "../../testkit/seed";

let s: SeededApp;
let apiKey = "";
let eventId = "";
let allocationId = "";
let subscriptionId = "";

beforeAll(async () => {
  s = await startSeededApp();
  apiKey = (await createApiKey(s.db.sql, { merchant: M1 })).key;
  const a = s.fixture.activity.find((r) => r.chain_id === CHAIN_A)!;
  eventId = `${a.chain_id}:${a.tx_hash}:${a.log_index}`;
  const sub = s.fixture.subscriptions.find((x) => x.chain_id === CHAIN_A && x.merchant === M1)!;
  allocationId = `${sub.chain_id}:${sub.module}:${sub.subscription_id}`;
  subscriptionId = sub.subscription_id;
}, 60_000);

afterAll(async () => {
  await s?.close();
});

/** Runs per route; the whole file stays well under a minute on PGlite. */
const RUNS = 400;

const edgeDates = [
  "0000-01-01T00:00:00Z",
  "0001-01-01T00:00:00Z",
  "0001-01-01T00:00:00+00:01",
  "0001-01-01T00:00:00-23:59",
  "9999-12-31T23:59:59Z",
  "9999-12-31T23:59:59-23:59",
  "9999-12-31T23:59:59.999999999-01:00",
  "2026-02-29T00:00:00Z",
  "2024-02-29T24:00:00Z",
  "1970-01-01T00:00:00Z",
  "+275760-09-13T00:00:00Z",
  "-000001-01-01T00:00:00Z",
];

/** Any date-time between JS's extremes, in the forms the `since` parser accepts and some it does not. */
const anyDate = fc
  .date({ min: new Date(-8.64e15), max: new Date(8.64e15), noInvalidDate: true })
  .chain((d) =>
    fc.constantFrom(
      d.toISOString(),
      d.toISOString().replace(".000Z", "Z"),
      d.toISOString().replace("Z", "+14:00"),
      d.toISOString().replace("Z", "-12:30"),
      String(d.getTime()),
    ),
  );

const hugeNumber = fc.oneof(
  fc.bigInt({ min: -(1n << 300n), max: 1n << 300n }).map(String),
  fc.constantFrom("1e309", "-0", "0x10", "NaN", "Infinity", "9007199254740993", "4294967296", "2147483648"),
  fc.double().map(String),
);

const hex = (n: number) =>
  fc.string({ unit: fc.constantFrom(..."0123456789abcdefABCDEF"), minLength: n, maxLength: n });
const address = fc.oneof(
  hex(40).map((h) => `0x${h}`),
  fc.constantFrom(M1, M2, MOD.a1, W.alice, M1.toUpperCase()),
);

/** Event ids and allocation ids, valid-looking or not. */
const cursor = fc.oneof(
  fc
    .constantFrom(
      () => eventId,
      () => allocationId,
    )
    .map((f) => f()),
  fc.tuple(hugeNumber, hex(64), hugeNumber).map(([c, h, i]) => `${c}:0x${h}:${i}`),
  fc.tuple(hugeNumber, address, hugeNumber).map(([c, m, i]) => `${c}:${m}:${i}`),
  fc.tuple(fc.constantFrom(CHAIN_A, CHAIN_B), anyDate).map(([c, d]) => `${c}:${d}`),
);

/** A value for any parameter: arbitrary text, unicode, numbers, dates, addresses, ids. */
const value = fc.oneof(
  fc.string({ maxLength: 80 }),
  fc.string({ unit: "grapheme", maxLength: 40 }),
  fc.string({ unit: "binary", maxLength: 40 }),
  fc.constantFrom("", "%", "%zz", "%00", "%F0%9F", "CHARGE", "FAIL", "asc", "desc", "both", "onchain", "ACTIVE"),
  hugeNumber,
  fc.constantFrom(...edgeDates),
  anyDate,
  address,
  cursor,
  fc.constantFrom(String(CHAIN_A), String(CHAIN_B), "1,2,3", "1,".repeat(150)),
);

/** A query or path component: percent-encoded, or raw (possibly broken) escapes. */
const encoded: fc.Arbitrary<string> = fc.oneof(
  { weight: 4, arbitrary: value.map(encodeURIComponent) },
  { weight: 1, arbitrary: fc.constantFrom("%", "%zz", "%E0%A4%A", "a%2Fb", "..", "%2e%2e") },
);

/** Values each query parameter takes in a valid request: most requests get past validation and reach the SQL. */
const typical: Record<string, fc.Arbitrary<string>> = {
  chain_id: fc.constantFrom(String(CHAIN_A), String(CHAIN_B)),
  type: fc.constantFrom("CHARGE", "FAIL", "REFILL"),
  limit: fc.integer({ min: 1, max: 1000 }).map(String),
  since: fc.oneof(fc.constantFrom(...edgeDates), anyDate),
  token: fc.constantFrom("USDC", "weth", "DAI"),
  order: fc.constantFrom("asc", "desc"),
  starting_after: cursor,
  status: fc.constantFrom("ACTIVE", "PENDING", "EXPIRED"),
  module_address: fc.constantFrom(MOD.a1, MOD.a2),
  wallet: fc.constantFrom(W.alice, W.bob),
  plan_ids: fc.constantFrom("1", "1,2,3", "4294967295"),
  mode: fc.constantFrom("indexed", "both"),
};

/** Each known parameter absent, typical or arbitrary, plus a few unknown or repeated ones. */
const query = fc
  .tuple(
    fc.record(
      Object.fromEntries(
        Object.entries(typical).map(([k, arb]) => [
          k,
          fc.oneof(
            { weight: 3, arbitrary: fc.constant(undefined) },
            { weight: 3, arbitrary: arb.map(encodeURIComponent) },
            { weight: 1, arbitrary: encoded },
          ),
        ]),
      ),
    ),
    fc.array(fc.tuple(fc.string({ maxLength: 10 }), encoded), { maxLength: 2 }),
  )
  .map(([known, extra]) =>
    [...Object.entries(known).filter(([, v]) => v !== undefined), ...extra.map(([k, v]) => [encodeURIComponent(k), v])]
      .map(([k, v]) => `${k}=${v}`)
      .join("&"),
  );

const credential = fc.oneof(
  { weight: 4, arbitrary: fc.constant(`Bearer ${ADMIN_KEY}`) },
  fc.constant(undefined),
  fc.constantFrom(`Bearer ${ADMIN_KEY}`, "Bearer sk_live_x", "Bearer sess_x", "Basic abc", "Bearer", "bearer  a b"),
  { weight: 2, arbitrary: fc.constant("apikey").map(() => `Bearer ${apiKey}`) },
  fc.string({ unit: "binary-ascii", maxLength: 300 }).map((t) => `Bearer ${t}`),
  fc.string({ unit: "binary-ascii", maxLength: 100 }),
) as fc.Arbitrary<string | undefined>;

const headers = fc.record(
  {
    authorization: credential,
    cookie: fc.oneof(
      fc.string({ unit: "binary-ascii", maxLength: 200 }),
      fc.string({ maxLength: 60 }).map((t) => `siwe_session=${t}`),
      fc.constant("siwe_session=%zz; a=b"),
    ),
    "x-forwarded-for": fc.oneof(
      fc.string({ unit: "binary-ascii", maxLength: 200 }),
      fc.array(fc.ipV4(), { maxLength: 4 }).map((a) => a.join(", ")),
      fc.array(fc.ipV6(), { maxLength: 3 }).map((a) => a.join(",")),
    ),
  },
  { requiredKeys: [] },
);

/** Routes: method, path built from one generated path value, and whether a body is sent. */
const ROUTES: { name: string; method: "GET" | "POST"; path: (v: string) => string }[] = [
  { name: "activity", method: "GET", path: (m) => `/v0/activity/${m}` },
  { name: "payments", method: "GET", path: (m) => `/v0/payments/${m}` },
  { name: "failures", method: "GET", path: (m) => `/v0/failures/${m}` },
  { name: "subscriptions", method: "GET", path: (m) => `/v0/subscriptions/${m}` },
  { name: "subscription by id (merchant)", method: "GET", path: (m) => `/v0/subscriptions/${m}/${subscriptionId}` },
  { name: "subscription by id (id)", method: "GET", path: (id) => `/v0/subscriptions/${M1}/${id}` },
  { name: "auth check", method: "GET", path: () => "/v0/auth/check" },
  { name: "siwe nonce", method: "GET", path: () => "/v0/siwe/nonce" },
  { name: "siwe me", method: "GET", path: () => "/v0/siwe/me" },
  { name: "siwe verify", method: "POST", path: () => "/v0/siwe/verify" },
  { name: "siwe logout", method: "POST", path: () => "/v0/siwe/logout" },
  { name: "healthz", method: "GET", path: () => "/healthz" },
  { name: "readyz", method: "GET", path: () => "/readyz" },
  { name: "docs json", method: "GET", path: () => "/docs/json" },
  { name: "unknown", method: "GET", path: (v) => `/v0/${v}` },
];

/** POST bodies: valid-looking SIWE bodies with generated fields, arbitrary JSON, and non-JSON text. */
const body = fc.oneof(
  fc.record({ message: fc.oneof(fc.string({ maxLength: 400 }), value), signature: fc.oneof(value, hex(130)) }),
  fc.jsonValue({ maxDepth: 3 }).map((v) => JSON.stringify(v)),
  fc.string({ maxLength: 200 }),
);

/** Sends one generated request; returns what is wrong with the answer, or null. */
async function probe(
  method: string,
  path: string,
  qs: string,
  h: Record<string, string | undefined>,
  b: unknown,
): Promise<string | null> {
  const hdrs = new Headers();
  for (const [k, v] of Object.entries(h)) {
    if (v === undefined) continue;
    try {
      hdrs.set(k, v);
    } catch {
      // not a valid header value: a real client could not send it either
    }
  }
  let init: RequestInit = { method, headers: hdrs };
  if (method === "POST") {
    hdrs.set("content-type", "application/json");
    init = { ...init, body: typeof b === "string" ? b : JSON.stringify(b) };
  }
  const url = `http://localhost${path}${qs ? `?${qs}` : ""}`;
  const res = await s.app.handle(new Request(url, init));
  const text = await res.text();
  if (res.status >= 500 || res.status < 200) return `${method} ${url} -> ${res.status} ${text.slice(0, 300)}`;
  if (res.status >= 400) {
    let e: { type?: unknown; code?: unknown; message?: unknown; request_id?: unknown } | undefined;
    try {
      e = JSON.parse(text).error;
    } catch {
      // checked below
    }
    const ok =
      typeof e?.type === "string" &&
      typeof e?.code === "string" &&
      typeof e?.message === "string" &&
      typeof e?.request_id === "string";
    if (!ok) return `${method} ${url} -> ${res.status} without the envelope: ${text.slice(0, 300)}`;
  }
  return null;
}

describe("no generated request gets a 5xx", () => {
  for (const route of ROUTES) {
    test(`${route.method} ${route.name}`, async () => {
      await fc.assert(
        fc.asyncProperty(fc.oneof(address, encoded), query, headers, body, async (pathValue, qs, h, b) => {
          const problem = await probe(route.method, route.path(pathValue), qs, h, b);
          if (problem) throw new Error(problem);
        }),
        { numRuns: RUNS, seed: Number(process.env.FC_SEED ?? Date.now() % 2 ** 31) },
      );
    }, 60_000);
  }

  test("the fixed regressions: dates outside 0001..9999 are a 400 naming the parameter", async () => {
    for (const since of ["0000-01-01T00:00:00Z", "0001-01-01T00:00:00+00:01", "9999-12-31T23:59:59-05:00"]) {
      const res = await s.get(`/v0/activity/${M1}?since=${encodeURIComponent(since)}`);
      expect(res.status).toBe(400);
      expect(res.body.error).toMatchObject({ code: "invalid_parameter", param: "since" });
    }
    const ok = await s.get(`/v0/activity/${M1}?since=0001-01-01T00:00:00Z&limit=1`);
    expect(ok.status).toBe(200);
  });
});
