/**
 * Property: no request makes a 5xx. Every route and method the README lists (reads, the event log, webhook endpoints
 * with their writes, API keys, SIWE, health, docs, dashboard) is driven through the real app over the seeded database
 * with generated path, query and body values (arbitrary strings, unicode, huge numbers, dates at the edges, ids that
 * exist or look like they might) and generated Authorization (admin key, API key, SIWE session, junk), Cookie and
 * X-Forwarded-For headers. Every answer is a 2xx or 3xx, or a 4xx carrying the error envelope.
 *
 * The seed is printed; `PROPERTY_SEED=<n> bun test test/http/properties.test.ts` replays the same requests.
 */
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import fc from "fast-check";
import { createApiKey } from "../../src/auth/api-keys";
import { createSession } from "../../src/auth/sessions";
import { EVENT_TYPES } from "../../src/events/envelope";
import { eventIdOf } from "../../src/events/ids";
import { createEndpoint } from "../../src/webhooks/endpoints";
import { fanOut } from "../../src/webhooks/fanout";
import { accounts } from "../../testkit/accounts";
import { ADMIN_KEY, startSeededApp, type SeededApp } from "../../testkit/app";
import { CHAIN_A, CHAIN_B, M1, M2, MOD, W } from "../../testkit/seed";
import { fetchNonce, siweMessage } from "../../testkit/siwe";
import { startReceiver, type Receiver } from "../../testkit/webhooks";

/** The seed of every property of this file. */
const SEED = Number(process.env.PROPERTY_SEED ?? Date.now() % 2 ** 31);
console.log(`properties.test.ts: seed ${SEED} (replay with PROPERTY_SEED=${SEED})`);

let s: SeededApp;
let receiver: Receiver;
let apiKey = "";
let session = "";
let eventId = "";
let allocationId = "";
let subscriptionId = "";
/** Ids that exist: webhook endpoints (M1's and M2's), events, deliveries, API keys, and those the requests create. */
const known: string[] = [];

/** A fresh SIWE session of M1 (a generated logout may have ended the previous one). */
const newSession = () =>
  s.db.sql.begin(async (tx) => (await createSession(tx, { address: M1, chainId: CHAIN_A, ttlSeconds: 3600 })).token);

/**
 * Endpoints of M1 and M2, events of both merchants in the log (fanned out to the endpoints as the indexer's
 * transaction does) and an API key: the ids the write routes act on.
 */
async function seedIds(): Promise<void> {
  const sql = s.db.sql;
  for (const merchant of [M1, M1, M2]) {
    const ep = await createEndpoint(
      sql,
      { merchant, url: receiver.url, eventTypes: ["*"], description: null },
      undefined,
    );
    known.push(ep.id);
  }
  await sql.begin(async (tx) => {
    const ids = [M1, M1, M1, M1, M2, M2].map((merchant, i) => ({ merchant, id: eventIdOf("properties", i) }));
    for (const [i, e] of ids.entries()) {
      await tx`insert into merchant_events (id, chain_id, merchant, type, block_number, log_index, ts, data)
        values (${e.id}, ${CHAIN_A}, ${e.merchant}, 'charge.succeeded', ${i + 1}, 0, now(), ${tx.json({ object: {} })})`;
    }
    const [r] = await tx<{ lo: string; hi: string }[]>`
      select min(seq)::text as lo, max(seq)::text as hi from merchant_events where id = any(${ids.map((e) => e.id)})`;
    await fanOut(tx, { chainId: CHAIN_A, fromSeq: BigInt(r!.lo), toSeq: BigInt(r!.hi), withdrawals: false });
    known.push(...ids.map((e) => e.id));
  });
  // In an order that does not depend on the random ids, so that a replay picks the same deliveries.
  const deliveries = await sql<{ id: string }[]>`
    select id from webhook_deliveries order by array_position(${known}::text[], endpoint_id), event_seq`;
  known.push(...deliveries.map((d) => d.id));
  known.push((await createApiKey(sql, { merchant: M1 })).id);
}

/**
 * Signed sign-in messages, each over its own real nonce: M1's own (each signs in once), signed by another wallet, for
 * another domain or chain, expired. The first attempt with a nonce spends it, whatever its outcome (siwe/service.ts).
 */
const signIns: { message: string; signature: string }[] = [];

async function seedSignIns(): Promise<void> {
  const address = accounts.merchant.address;
  const variants = [
    { signer: accounts.merchant, opts: {} },
    { signer: accounts.alice, opts: {} },
    { signer: accounts.merchant, opts: { domain: "evil.example" } },
    { signer: accounts.merchant, opts: { chainId: 1 } },
    { signer: accounts.merchant, opts: { expirationTime: new Date(Date.now() - 1000) } },
  ];
  for (let i = 0; i < 30; i++) {
    const v = variants[i % variants.length]!;
    const message = siweMessage({ nonce: await fetchNonce(s.app), address, ...v.opts });
    signIns.push({ message, signature: await v.signer.signMessage({ message }) });
  }
}

beforeAll(async () => {
  receiver = startReceiver();
  // Limits high enough for the requests to get past the rate limiters; `test` deliveries go to the receiver.
  s = await startSeededApp({
    RATE_LIMIT_PER_KEY_PER_MINUTE: "1000000",
    WEBHOOK_TIMEOUT_MS: "1000",
    WEBHOOK_ALLOW_PRIVATE_URLS: "1",
  });
  apiKey = (await createApiKey(s.db.sql, { merchant: M1 })).key;
  await seedIds();
  await seedSignIns();
  const a = s.fixture.activity.find((r) => r.chain_id === CHAIN_A)!;
  eventId = `${a.chain_id}:${a.tx_hash}:${a.log_index}`;
  const sub = s.fixture.subscriptions.find((x) => x.chain_id === CHAIN_A && x.merchant === M1)!;
  allocationId = `${sub.chain_id}:${sub.module}:${sub.subscription_id}`;
  subscriptionId = sub.subscription_id;
}, 60_000);

afterAll(async () => {
  await s?.close();
  await receiver?.stop();
});

/** Runs per route (`PROPERTY_RUNS=<n>` for a longer hunt); the whole file stays well under a minute on PGlite. */
const RUNS = Number(process.env.PROPERTY_RUNS ?? 400);

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

/**
 * Raw escapes a hostile caller writes by hand: broken ones, NUL, encoded slashes and dots, overlong and surrogate
 * UTF-8, double encoding, and the same around a real id.
 */
const trickyEscape = fc.oneof(
  fc.constantFrom(
    "%",
    "%zz",
    "%E0%A4%A",
    "a%2Fb",
    "..",
    "%2e%2e",
    "%2E%2E%2F",
    "%00",
    "a%00b",
    "%2F",
    "%2f..%2f",
    "%5C",
    "%C0%AF",
    "%C0%80",
    "%E0%80%AF",
    "%F0%80%80%AF",
    "%ED%A0%80",
    "%ED%BF%BF",
    "%EF%BF%BF",
    "%FF%FE",
    "%252F",
    "%25",
    "%u0041",
    "+",
    "%20",
    "%0D%0Aset-cookie:%20x=y",
  ),
  fc
    .tuple(
      fc.constantFrom(M1, "we_", "evt_", "wd_", "key_"),
      fc.constantFrom("%00", "%2F", "%C0%AF", "%20", "%ED%A0%80"),
    )
    .map(([a, b]) => `${a}${b}`),
);

/** A query or path component: percent-encoded, or raw (possibly broken) escapes. */
const encoded: fc.Arbitrary<string> = fc.oneof({ weight: 4, arbitrary: value.map(encodeURIComponent) }, trickyEscape);

/** One of the known ids (the list grows as requests create endpoints and keys). */
const knownId = fc.nat().map((i) => known[i % known.length]!);

/** One of the known ids starting with `prefix` (`we_`, `evt_`, `wd_`, `key_`). */
const knownOf = (prefix: string) =>
  fc.nat().map((i) => {
    const ids = known.filter((k) => k.startsWith(prefix));
    return ids[i % ids.length]!;
  });

/** Ids of every prefix and length: a known prefix with any tail, or a known id cut, grown or changed in case. */
const anyId = fc.oneof(
  fc
    .tuple(
      fc.constantFrom("we_", "evt_", "wd_", "key_", "sess_", "sk_live_", "whsec_", "req_", "", "WE_", "evt"),
      fc.oneof(
        fc.string({ unit: fc.constantFrom(..."0123456789abcdef"), maxLength: 80 }),
        fc.string({ maxLength: 300 }),
      ),
    )
    .map(([p, t]) => encodeURIComponent(`${p}${t}`)),
  fc
    .tuple(knownId, fc.nat(), fc.constantFrom("cut", "grow", "upper", "space"))
    .map(([k, n, how]) =>
      encodeURIComponent(
        how === "cut"
          ? k.slice(0, n % (k.length + 1))
          : how === "grow"
            ? `${k}${"0".repeat(1 + (n % 500))}`
            : how === "upper"
              ? k.toUpperCase()
              : ` ${k} `,
      ),
    ),
);

/** A path's id: mostly an existing one of its kind, else any known id or anything. */
const idOf = (prefix: string) => fc.oneof({ weight: 4, arbitrary: knownOf(prefix) }, knownId, address, encoded, anyId);

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
  interval: fc.constantFrom("day", "week", "month"),
  until: fc.oneof(fc.constantFrom(...edgeDates), anyDate),
  format: fc.constantFrom("json", "csv", "ndjson"),
};

/**
 * A query of the parameters `params` (typical values from `typical` unless given): each absent, typical or arbitrary,
 * and sometimes unknown or repeated ones.
 */
const queryOf = (params: Record<string, fc.Arbitrary<string>>) =>
  fc
    .tuple(
      fc.record(
        Object.fromEntries(
          Object.entries(params).map(([k, arb]) => [
            k,
            fc.oneof(
              { weight: 3, arbitrary: fc.constant(undefined) },
              { weight: 3, arbitrary: arb.map(encodeURIComponent) },
              { weight: 1, arbitrary: encoded },
            ),
          ]),
        ),
      ),
      fc.oneof(
        { weight: 3, arbitrary: fc.constant([]) },
        fc.array(fc.tuple(fc.oneof(fc.string({ maxLength: 10 }), fc.constantFrom(...Object.keys(typical))), encoded), {
          minLength: 1,
          maxLength: 2,
        }),
        // A parameter of the route repeated (?a=1&a=2), with typical values or anything.
        ...(Object.keys(params).length === 0
          ? []
          : [
              fc.constantFrom(...Object.keys(params)).chain((k) =>
                fc.array(
                  fc.oneof(params[k]!.map(encodeURIComponent), encoded).map((v) => [k, v] as [string, string]),
                  { minLength: 1, maxLength: 3 },
                ),
              ),
            ]),
      ),
    )
    .map(([known, extra]) =>
      [
        ...Object.entries(known).filter(([, v]) => v !== undefined),
        ...extra.map(([k, v]) => [encodeURIComponent(k), v]),
      ]
        .map(([k, v]) => `${k}=${v}`)
        .join("&"),
    );

/** The typical values of `names`. */
const params = (...names: string[]) => Object.fromEntries(names.map((n) => [n, typical[n]!]));

/** The queries each route takes. */
const Q = {
  none: queryOf({}),
  activity: queryOf(params("format", "chain_id", "limit", "since", "token", "order", "starting_after", "type")),
  subscriptions: queryOf(params("format", "chain_id", "status", "limit", "starting_after")),
  subscription: queryOf(params("chain_id")),
  check: queryOf(params("module_address", "wallet", "plan_ids", "mode", "chain_id")),
  stats: queryOf(params("chain_id", "interval", "since", "until", "token")),
  renewals: queryOf({
    ...params("format", "chain_id", "limit", "token"),
    outlook: fc.constantFrom("will_renew", "at_risk", "maybe", ""),
    reason: fc.constantFrom("InsufficientBalance", "InsufficientAllowance", "AllowanceExpired", "TransferFailed", "x"),
    due_before: typical.since!,
    starting_after: typical.starting_after!,
  }),
  events: queryOf({
    ...params("since", "limit", "order", "chain_id", "format"),
    type: fc.constantFrom(...EVENT_TYPES),
    starting_after: knownOf("evt_"),
  }),
  deliveries: queryOf({
    ...params("limit"),
    status: fc.constantFrom("pending", "succeeded", "failed"),
    starting_after: knownOf("wd_"),
  }),
};

const credential = fc.oneof(
  { weight: 4, arbitrary: fc.constant(`Bearer ${ADMIN_KEY}`) },
  fc.constant(undefined),
  fc.constantFrom(`Bearer ${ADMIN_KEY}`, "Bearer sk_live_x", "Bearer sess_x", "Basic abc", "Bearer", "bearer  a b"),
  { weight: 2, arbitrary: fc.constant("apikey").map(() => `Bearer ${apiKey}`) },
  { weight: 3, arbitrary: fc.constant("session").map(() => `Bearer ${session}`) },
  fc.string({ unit: "binary-ascii", maxLength: 300 }).map((t) => `Bearer ${t}`),
  fc.string({ unit: "binary-ascii", maxLength: 100 }),
) as fc.Arbitrary<string | undefined>;

/** Latin-1 text (what a header value can carry past ASCII): `é`, `ÿ`, control characters. */
const latin1 = fc.string({ unit: fc.integer({ min: 1, max: 255 }).map((c) => String.fromCharCode(c)), maxLength: 80 });

/** Authorization values no client should send: huge, non-ASCII, a valid one with junk around it. */
const hostileCredential = fc.oneof(
  fc.nat({ max: 64 * 1024 }).map((n) => `Bearer ${"a".repeat(n)}`),
  fc.constant(null).map(() => `Bearer ${apiKey}${"x".repeat(8000)}`),
  latin1.map((t) => `Bearer ${t}`),
  fc
    .tuple(latin1, fc.constantFrom("apikey", "session", "admin"))
    .map(([t, k]) => `Bearer ${k === "apikey" ? apiKey : k === "session" ? session : ADMIN_KEY}${t}`),
  fc.constantFrom("Bearer\t", "Bearer ,", "Bearer%20x", "BEARER x", "Bearer sk_live_\u00e9", "Bearer \u00ff\u00fe"),
);

/** One Authorization header, or several (a proxy or a hostile client repeating it; fetch joins them with ", "). */
const authorization = fc.oneof(
  { weight: 8, arbitrary: credential },
  { weight: 2, arbitrary: hostileCredential },
  fc.array(fc.oneof(credential, hostileCredential), { minLength: 2, maxLength: 3 }),
) as fc.Arbitrary<string | undefined | (string | undefined)[]>;

const headers = fc.record(
  {
    authorization,
    cookie: fc.oneof(
      fc.string({ unit: "binary-ascii", maxLength: 200 }),
      fc.string({ maxLength: 60 }).map((t) => `siwe_session=${t}`),
      fc.constant("siwe_session=%zz; a=b"),
      fc.constant(null).map(() => `siwe_session=${session}; siwe_session=junk`),
      fc.constant(null).map(() => `siwe_session=junk; siwe_session=${session}`),
      latin1.map((t) => `siwe_session=${t}`),
      fc.nat({ max: 16 * 1024 }).map((n) => `siwe_session=${"s".repeat(n)}`),
    ),
    "x-forwarded-for": fc.oneof(
      fc.string({ unit: "binary-ascii", maxLength: 200 }),
      fc.array(fc.ipV4(), { maxLength: 4 }).map((a) => a.join(", ")),
      fc.array(fc.ipV6(), { maxLength: 3 }).map((a) => a.join(",")),
    ),
    "x-forwarded-proto": fc.constantFrom("https", "http", "HTTPS, http", "", ",", "gopher"),
    host: fc.oneof(
      fc.constantFrom("localhost", "localhost:3000", "", "[::1]", "a".repeat(300), "evil.example"),
      latin1,
    ),
    "if-none-match": fc.oneof(fc.constantFrom("*", '""', 'W/"x"', "null"), latin1),
    accept: fc.constantFrom("text/csv", "application/x-ndjson", "*/*", "text/html", "application/json;q=0", ""),
    // Of a request with a body: JSON mostly (absent means JSON), else another or a broken type.
    "content-type": fc.oneof(
      fc.constantFrom(
        "application/json; charset=utf-8",
        "application/json; charset=latin1",
        "application/json; charset=utf-16",
        "APPLICATION/JSON",
        "application/json;;;",
        "application/vnd.api+json",
        "application/problem+json; q=0.5",
        "application/xml",
        "text/plain",
        "text/plain; charset=utf-8",
        "application/x-www-form-urlencoded",
        "multipart/form-data",
        "multipart/form-data; boundary=x",
        "multipart/form-data; boundary=",
        "application/octet-stream",
        "*/*",
        ";",
        "",
      ),
      latin1,
    ),
  },
  { requiredKeys: [] },
);

/** Event types as the webhook bodies take them: known ones, wildcards, and anything. */
const eventTypes = fc.oneof(
  { weight: 3, arbitrary: fc.subarray(["*", ...EVENT_TYPES], { minLength: 1 }) },
  fc.array(fc.constantFrom("*", ...EVENT_TYPES, "charge.*", "", "CHARGE.SUCCEEDED"), { maxLength: 4 }),
  fc.array(value, { maxLength: 3 }),
  value,
);

/**
 * Destination URLs: the test receiver, names that do not resolve, loopback addresses with nothing listening, odd
 * ports and schemes, and anything. (Private URLs are allowed here so that `test` deliveries stay on this machine.)
 */
const hookUrl = fc.oneof(
  { weight: 3, arbitrary: fc.constant(null).map(() => receiver.url) },
  fc.constantFrom(
    "https://hooks.example.com/in",
    "http://hooks.example.com/in",
    "https://127.0.0.1:1/x",
    "https://localhost:1/x",
    "https://[::1]:1/x",
    "https://hooks.example.com:99999/",
    "https://user:pass@hooks.example.com/",
    "ftp://hooks.example.com/",
    "https://xn--/",
    `https://${"a".repeat(300)}.com/`,
  ),
  fc.webUrl(),
  value,
);

/** A date-time of these years, as the routes take it. */
const recentDate = fc
  .date({ min: new Date("2020-01-01T00:00:00Z"), max: new Date("2030-01-01T00:00:00Z"), noInvalidDate: true })
  .map((d) => d.toISOString());

/** Fields of the write bodies, typical or arbitrary. */
const fields = {
  url: hookUrl,
  event_types: eventTypes,
  description: fc.oneof(fc.string({ maxLength: 600 }), fc.constant(null), value),
  enabled: fc.oneof({ weight: 3, arbitrary: fc.boolean() }, value),
  since: fc.oneof({ weight: 3, arbitrary: recentDate }, fc.constantFrom(...edgeDates), anyDate, value),
  until: fc.oneof({ weight: 3, arbitrary: recentDate }, fc.constantFrom(...edgeDates), anyDate, value),
  types: eventTypes,
  endpoint_id: fc.oneof({ weight: 3, arbitrary: knownId }, value),
  label: fc.oneof(fc.string({ maxLength: 300 }), fc.constant(null), value),
  message: fc.oneof(fc.string({ maxLength: 400 }), value),
  signature: fc.oneof(
    value,
    hex(130).map((h) => `0x${h}`),
  ),
};

/** Any body: arbitrary JSON or non-JSON text. */
const anyBody = fc.oneof(
  fc.jsonValue({ maxDepth: 3 }).map((v) => JSON.stringify(v)),
  fc.string({ maxLength: 200 }),
);

/** JSON text of every shape a parser may choke on: deep nesting, huge numbers, lone surrogates, NUL, duplicates. */
const hostileJson = fc.oneof(
  fc.nat({ max: 30_000 }).map((n) => `${"[".repeat(n)}${"]".repeat(n)}`),
  fc.nat({ max: 10_000 }).map((n) => `${'{"a":'.repeat(n)}1${"}".repeat(n)}`),
  fc.nat({ max: 10_000 }).map((n) => `{"url":${"[".repeat(n)}${"]".repeat(n)}}`),
  fc.constantFrom(
    "1e400",
    "-1e400",
    "123456789012345678901234567890",
    '{"limit":1e400,"enabled":-0}',
    '{"description":"\\ud800","label":"\\udfff x"}',
    '{"url":"https://h.example/\\ud83d","event_types":["\\udc00"]}',
    '{"description":"a\\u0000b"}',
    '{"\\u0000":1}',
    '{"label":"x","label":"y","label":null}',
    '{"__proto__":{"enabled":false},"constructor":{"prototype":{}}}',
    '{"url":"https://h.example/"}garbage',
    "\ufeff{}",
    "{}\u0000",
    "null",
    "[]",
    '""',
    "true",
    "{",
    "]",
  ),
  fc.string({ unit: "binary", maxLength: 60 }).map((t) => JSON.stringify({ description: t, label: t, message: t })),
);

/** A value of any JSON type, for a field that expects one type. */
const wrongType = fc.oneof(
  fc.jsonValue({ maxDepth: 2 }),
  fc.constantFrom(1e308, -1, 0.5, 2 ** 64, true, [], {}, [[]], { length: 1 }),
);

/** A route's body (of POST, PATCH and DELETE): none, its fields each present or not, or any body. */
const bodyOf = (...names: (keyof typeof fields)[]) => {
  const record = fc.record(
    Object.fromEntries(
      names.map((n) => [n, fc.oneof({ weight: 6, arbitrary: fields[n] as fc.Arbitrary<unknown> }, wrongType)]),
    ),
    { requiredKeys: [] },
  );
  return fc.option(
    fc.oneof(
      { weight: 6, arbitrary: record },
      { weight: 1, arbitrary: anyBody },
      { weight: 1, arbitrary: hostileJson },
      // an array where an object is expected
      { weight: 1, arbitrary: fc.array(record, { minLength: 1, maxLength: 2 }) },
    ),
    { nil: undefined, freq: 6 },
  );
};

type Route = {
  name: string;
  method: "GET" | "POST" | "PATCH" | "DELETE";
  /** The path, from a generated merchant (or other single value) and a generated id. */
  path: (v: string, id: string) => string;
  /** The id of the path (its kind mostly; anything by default). */
  id?: fc.Arbitrary<string>;
  query?: fc.Arbitrary<string>;
  body?: fc.Arbitrary<unknown>;
  /** Run before each request: what a live service would have done meanwhile. */
  before?: () => Promise<unknown>;
};

const WEBHOOKS = "/v0/webhook_endpoints";
const noBody = bodyOf();

/** Every route and method of the README. */
const ROUTES: Route[] = [
  { name: "activity", method: "GET", path: (m) => `/v0/activity/${m}`, query: Q.activity },
  { name: "payments", method: "GET", path: (m) => `/v0/payments/${m}`, query: Q.activity },
  { name: "failures", method: "GET", path: (m) => `/v0/failures/${m}`, query: Q.activity },
  { name: "subscriptions", method: "GET", path: (m) => `/v0/subscriptions/${m}`, query: Q.subscriptions },
  {
    name: "subscription by id (merchant)",
    method: "GET",
    path: (m) => `/v0/subscriptions/${m}/${subscriptionId}`,
    query: Q.subscription,
  },
  {
    name: "subscription by id (id)",
    method: "GET",
    path: (_, id) => `/v0/subscriptions/${M1}/${id}`,
    id: fc.oneof(
      fc.constant(null).map(() => subscriptionId),
      hugeNumber.map(encodeURIComponent),
      fc.nat().map(String),
      encoded,
    ),
    query: Q.subscription,
  },
  { name: "stats", method: "GET", path: (m) => `/v0/stats/${m}`, query: Q.stats },
  { name: "renewals", method: "GET", path: (m) => `/v0/renewals/${m}`, query: Q.renewals },
  { name: "events", method: "GET", path: (m) => `/v0/events/${m}`, query: Q.events },
  { name: "event by id", id: idOf("evt_"), method: "GET", path: (m, id) => `/v0/events/${m}/${id}` },
  {
    name: "redeliver",
    id: idOf("evt_"),
    method: "POST",
    path: (m, id) => `/v0/events/${m}/${id}/redeliver`,
    body: bodyOf("endpoint_id"),
  },
  { name: "webhook endpoints", method: "GET", path: (m) => `${WEBHOOKS}/${m}` },
  {
    name: "create webhook endpoint",
    method: "POST",
    path: (m) => `${WEBHOOKS}/${m}`,
    body: bodyOf("url", "event_types", "description"),
  },
  { name: "webhook endpoint", id: idOf("we_"), method: "GET", path: (m, id) => `${WEBHOOKS}/${m}/${id}` },
  {
    name: "update webhook endpoint",
    id: idOf("we_"),
    method: "PATCH",
    path: (m, id) => `${WEBHOOKS}/${m}/${id}`,
    body: bodyOf("url", "event_types", "description", "enabled"),
  },
  {
    name: "rotate secret",
    id: idOf("we_"),
    method: "POST",
    path: (m, id) => `${WEBHOOKS}/${m}/${id}/rotate_secret`,
    body: noBody,
  },
  {
    name: "test delivery",
    id: idOf("we_"),
    method: "POST",
    path: (m, id) => `${WEBHOOKS}/${m}/${id}/test`,
    body: noBody,
  },
  {
    name: "deliveries",
    id: idOf("we_"),
    method: "GET",
    path: (m, id) => `${WEBHOOKS}/${m}/${id}/deliveries`,
    query: Q.deliveries,
  },
  {
    name: "replay",
    id: idOf("we_"),
    method: "POST",
    path: (m, id) => `${WEBHOOKS}/${m}/${id}/replay`,
    body: bodyOf("since", "until", "types"),
  },
  { name: "api keys", method: "GET", path: (m) => `/v0/api_keys/${m}` },
  { name: "create api key", method: "POST", path: (m) => `/v0/api_keys/${m}`, body: bodyOf("label") },
  {
    name: "revoke api key",
    id: idOf("key_"),
    method: "DELETE",
    path: (m, id) => `/v0/api_keys/${m}/${id}`,
    body: noBody,
  },
  {
    name: "delete webhook endpoint",
    id: idOf("we_"),
    method: "DELETE",
    path: (m, id) => `${WEBHOOKS}/${m}/${id}`,
    body: noBody,
  },
  { name: "auth check", method: "GET", path: () => "/v0/auth/check", query: Q.check },
  { name: "siwe nonce", method: "GET", path: () => "/v0/siwe/nonce" },
  { name: "siwe me", method: "GET", path: () => "/v0/siwe/me" },
  {
    name: "siwe verify",
    method: "POST",
    path: () => "/v0/siwe/verify",
    body: fc.oneof(
      bodyOf("message", "signature"),
      fc
        .tuple(
          fc.nat(),
          fc.oneof(
            { weight: 4, arbitrary: fc.constant("as signed") },
            fc.constantFrom("message+", "signature+", "signature cut", "swapped"),
          ),
        )
        .map(([i, how]) => {
          const { message, signature } = signIns[i % signIns.length]!;
          if (how === "message+") return { message: `${message}\n`, signature };
          if (how === "signature+") return { message, signature: `${signature}00` };
          if (how === "signature cut") return { message, signature: signature.slice(0, -2) };
          if (how === "swapped") return { message: signature, signature: message };
          return { message, signature };
        }),
    ),
  },
  { name: "siwe logout", method: "POST", path: () => "/v0/siwe/logout", body: noBody },
  { name: "healthz", method: "GET", path: () => "/healthz" },
  // A live indexer sees the head every poll: without it /readyz is rightly a 503 once the file has run 30 s.
  {
    name: "readyz",
    method: "GET",
    path: () => "/readyz",
    before: () => s.db.sql`update chains set head_seen_at = now()`,
  },
  { name: "docs", method: "GET", path: () => "/docs" },
  { name: "docs json", method: "GET", path: () => "/docs/json" },
  { name: "dashboard", method: "GET", path: () => "/dashboard" },
  {
    name: "dashboard asset",
    method: "GET",
    path: (_, name) => `/dashboard/assets/${name}`,
    id: fc.oneof(fc.constantFrom("main.js", "styles.css", "main.js%00", "..%2Fmain.js", "MAIN.JS"), encoded),
  },
  { name: "unknown", method: "GET", path: (v) => `/v0/${v}`, query: Q.activity },
];

/** Keeps the id of what a request created (an endpoint, an API key), so later requests act on it. */
function rememberId(text: string): void {
  try {
    const id = (JSON.parse(text) as { id?: unknown }).id;
    if (typeof id === "string" && known.length < 200) known.push(id);
  } catch {
    // not an object with an id
  }
}

/**
 * What a write may change, per table: webhook endpoints (all they hold), deliveries, API keys (not their last use),
 * SIWE sessions and nonces (not whether spent: a rejected sign-in spends its nonce on purpose). A rejected write must
 * leave every line as it was.
 */
async function stateOf(): Promise<Record<string, string>> {
  const rows = await s.db.sql<{ t: string; n: string; h: string }[]>`
    select t, count(*)::text as n, md5(coalesce(string_agg(x, '|' order by x), '')) as h from (
      select 'webhook_endpoints' as t,
        concat_ws(',', id, merchant, url, event_types::text, description, enabled::text, disabled_reason, secret,
          previous_secret, updated_at::text) as x
        from webhook_endpoints
      union all select 'webhook_deliveries', concat_ws(',', id, endpoint_id, event_id, origin) from webhook_deliveries
      union all select 'api_keys', concat_ws(',', id, merchant, label, revoked_at::text) from api_keys
      union all select 'sessions', concat_ws(',', id, address, revoked_at::text) from sessions
      union all select 'siwe_nonces', nonce from siwe_nonces
    ) r group by t`;
  return Object.fromEntries(rows.map((r) => [r.t, `${r.n} rows ${r.h}`]));
}

/** The {@link stateOf} after the last rejected write (undefined once anything else may have changed it). */
let lastState: Record<string, string> | undefined;

/** The tables whose lines differ between two {@link stateOf}s. */
function changed(before: Record<string, string>, after: Record<string, string>): string[] {
  return [...new Set([...Object.keys(before), ...Object.keys(after)])].filter((t) => before[t] !== after[t]);
}

/** Sends one generated request; returns what is wrong with the answer, or null. */
async function probe(
  method: string,
  path: string,
  qs: string,
  h: Record<string, string | undefined | (string | undefined)[]>,
  b: unknown,
): Promise<string | null> {
  const hdrs = new Headers();
  for (const [k, vs] of Object.entries(h)) {
    for (const v of Array.isArray(vs) ? vs : [vs]) {
      if (v === undefined) continue;
      try {
        hdrs.append(k, v);
      } catch {
        // not a valid header value: a real client could not send it either
      }
    }
  }
  let init: RequestInit = { method, headers: hdrs };
  if (method !== "GET" && b !== undefined) {
    if (h["content-type"] === undefined) hdrs.set("content-type", "application/json");
    init = { ...init, body: typeof b === "string" ? b : JSON.stringify(b) };
  }
  const url = `http://localhost${path}${qs ? `?${qs}` : ""}`;
  const before = method === "GET" ? undefined : (lastState ?? (await stateOf()));
  lastState = undefined;
  const res = await s.app.handle(new Request(url, init));
  const text = await res.text();
  const sent = `${b === undefined || method === "GET" ? "" : ` with ${JSON.stringify(b).slice(0, 300)}`} headers ${JSON.stringify(h).slice(0, 300)}`;
  if (res.status >= 500 || res.status < 200) return `${method} ${url}${sent} -> ${res.status} ${text.slice(0, 300)}`;
  if (before && res.status >= 400) {
    lastState = await stateOf();
    const tables = changed(before, lastState);
    if (tables.length > 0) {
      return `${method} ${url}${sent} -> ${res.status} ${text.slice(0, 200)} but changed ${tables.join(", ")}`;
    }
  }
  if (res.status === 201) rememberId(text);
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
    if (!ok) return `${method} ${url}${sent} -> ${res.status} without the envelope: ${text.slice(0, 300)}`;
    const type = res.headers.get("content-type") ?? "";
    if (!type.startsWith("application/json")) return `${method} ${url}${sent} -> ${res.status} as ${type}`;
  }
  return null;
}

/** A path's merchant (or single value): M1 often, any address, or anything. */
const merchant = fc.oneof({ weight: 4, arbitrary: fc.constant(M1) }, address, encoded);
/** A path's id: an existing one often, or anything. */
const id = fc.oneof({ weight: 3, arbitrary: knownId }, address, encoded);

describe("no generated request gets a 5xx", () => {
  for (const route of ROUTES) {
    test(`${route.method} ${route.name}`, async () => {
      session = await newSession();
      lastState = undefined;
      await fc.assert(
        fc.asyncProperty(
          merchant,
          route.id ?? id,
          route.query ?? Q.none,
          headers,
          route.body ?? noBody,
          async (m, i, qs, h, b) => {
            await route.before?.();
            const problem = await probe(route.method, route.path(m, i), qs, h, b);
            if (problem) throw new Error(problem);
          },
        ),
        // A request that hangs fails with its values shown, not as the test's timeout (30 s: a loaded machine can stall
        // an answer for seconds, and the test has 60).
        { numRuns: RUNS, seed: SEED, timeout: 30_000 },
      );
    }, 60_000);
  }

  test("the fixed regressions: /readyz is a 503 only once the head is stale, so its property keeps it seen", async () => {
    // The property failed for /readyz on every seed once the file had run 30 s after seeding (a slow CI machine,
    // PROPERTY_RUNS=1000): GET /readyz -> 503 "the indexer has not observed the head of chain 31337 in the last 30 s".
    await s.db.sql`update chains set head_seen_at = now() - interval '31 seconds'`;
    const stale = await s.get("/readyz");
    expect(stale.status).toBe(503);
    expect(stale.body.error).toMatchObject({ code: "unavailable" });
    await ROUTES.find((r) => r.name === "readyz")!.before!();
    expect((await s.get("/readyz")).status).toBe(200);
  });

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
