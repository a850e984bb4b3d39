import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { createApiKey } from "../../../src/auth/api-keys";
import { createSession } from "../../../src/auth/sessions";
import { startSeededApp, type SeededApp } from "../../../testkit/app";

const M1 = "0x70997970c51812dc3a010c7d01b50e0d17dc79c8";
const M2 = "0x3c44cdddb6a900fa2b585dd299e03d12fa4293bc";
const TYPES = ["charge.succeeded", "charge.failed", "subscription.created", "subscription.status_changed"];

let s: SeededApp;
let key1: string;
let key2: string;
const ids: string[] = [];

beforeAll(async () => {
  s = await startSeededApp();
  key1 = (await createApiKey(s.db.sql, { merchant: M1 })).key;
  key2 = (await createApiKey(s.db.sql, { merchant: M2 })).key;
  for (let i = 0; i < 12; i++) {
    const id = `evt_${i.toString(16).padStart(40, "0")}`;
    ids.push(id);
    await s.db.sql`
      insert into merchant_events (id, chain_id, merchant, type, block_number, log_index, ts, data)
      values (${id}, ${i % 2 ? 31337 : 10}, ${M1}, ${TYPES[i % 4]!}, ${100 + i}, 0,
        ${new Date(Date.UTC(2026, 10, 1 + i))}, ${s.db.sql.json({ object: { n: i } })})`;
  }
  await s.db.sql`
    insert into merchant_events (id, chain_id, merchant, type, block_number, log_index, ts, data)
    values ('evt_ffff', 31337, ${M2}, 'charge.failed', 1, 0, now(), '{"object":{}}')`;
});

afterAll(() => s?.close());

const get = (path: string, key = key1) => s.get(path, { authorization: `Bearer ${key}` });

describe("GET /v0/events/:merchant", () => {
  test("the merchant's events as envelopes, in log order, every one without limit", async () => {
    const res = await get(`/v0/events/${M1}`);
    expect(res.status).toBe(200);
    expect(res.body.map((e: any) => e.id)).toEqual(ids);
    expect(res.body[3]).toEqual({
      id: ids[3],
      type: "subscription.status_changed",
      timestamp: "2026-11-04T00:00:00.000Z",
      chain_id: 31337,
      merchant: M1,
      block_number: "103",
      data: { object: { n: 3 } },
    });
    expect(res.headers.get("link")).toBeNull();
  });

  test("without limit, a log longer than one chunk is streamed whole; format=csv gives the same rows", async () => {
    const M3 = "0x00000000000000000000000000000000000000c3";
    const key3 = (await createApiKey(s.db.sql, { merchant: M3 })).key;
    await s.db.sql`
      insert into merchant_events (id, chain_id, merchant, type, block_number, log_index, ts, data)
      select 'evt_c3' || lpad(g::text, 10, '0'), 31337, ${M3}, 'charge.succeeded', g, 0, now(),
        ${JSON.stringify({ object: { note: 'a, "quoted" cell' } })}::text::jsonb
      from generate_series(1, 2500) g`;
    const all = await get(`/v0/events/${M3}`, key3);
    expect(all.status).toBe(200);
    expect(all.body).toHaveLength(2500);
    expect(all.body.map((e: any) => e.block_number)).toEqual(Array.from({ length: 2500 }, (_, i) => String(i + 1)));
    const desc = await get(`/v0/events/${M3}?order=desc&starting_after=evt_c30000000100`, key3);
    expect(desc.body.map((e: any) => e.block_number)).toEqual(Array.from({ length: 99 }, (_, i) => String(99 - i)));
    const csv = await s.app.handle(
      new Request(`http://localhost/v0/events/${M3}?format=csv&limit=2`, {
        headers: { authorization: `Bearer ${key3}` },
      }),
    );
    expect(csv.headers.get("content-type")).toStartWith("text/csv");
    expect(csv.headers.get("content-disposition")).toContain("attachment");
    expect(csv.headers.get("link")).toContain("starting_after=evt_c30000000002");
    const text = await csv.text();
    expect(text.split("\r\n")[0]).toBe("id,type,timestamp,chain_id,merchant,block_number,data");
    expect(text.split("\r\n")[1]).toStartWith("evt_c30000000001,charge.succeeded,");
    expect(text.split("\r\n")[1]).toEndWith(`,${M3},1,"{""object"":{""note"":""a, \\""quoted\\"" cell""}}"`);
  });

  test("limit, Link and starting_after page through it; order=desc reverses it", async () => {
    const seen: string[] = [];
    let path: string | null = `/v0/events/${M1}?limit=5`;
    while (path) {
      const res = await get(path);
      expect(res.status).toBe(200);
      seen.push(...res.body.map((e: any) => e.id));
      const link = res.headers.get("link");
      path = link ? new URL(/<([^>]+)>/.exec(link)![1]!).pathname + new URL(/<([^>]+)>/.exec(link)![1]!).search : null;
    }
    expect(seen).toEqual(ids);
    const desc = await get(`/v0/events/${M1}?order=desc&limit=3&starting_after=${ids[5]}`);
    expect(desc.body.map((e: any) => e.id)).toEqual([ids[4], ids[3], ids[2]]);
  });

  test("type (one or several), since and chain_id filter", async () => {
    const one = await get(`/v0/events/${M1}?type=charge.failed`);
    expect(one.body.map((e: any) => e.id)).toEqual([ids[1], ids[5], ids[9]]);
    const two = await get(`/v0/events/${M1}?type=charge.failed,subscription.created`);
    expect(two.body.length).toBe(6);
    const since = await get(`/v0/events/${M1}?since=2026-11-10T00:00:00Z`);
    expect(since.body.map((e: any) => e.id)).toEqual(ids.slice(9));
    const chain = await get(`/v0/events/${M1}?chain_id=10`);
    expect(chain.body.every((e: any) => e.chain_id === 10)).toBe(true);
    expect(chain.body.length).toBe(6);
  });

  test("bad input is a 400 with the parameter named; another merchant's key 403; none 401", async () => {
    for (const q of [
      "type=charge.nope",
      "limit=0",
      "limit=1001",
      "starting_after=nope",
      "order=up",
      "since=yesterday",
      "chain_id=x",
    ]) {
      const res = await get(`/v0/events/${M1}?${q}`);
      expect(res.status).toBe(400);
      expect(res.body.error.param).toBe(q.split("=")[0]);
    }
    expect((await get(`/v0/events/${M1}?starting_after=evt_ffff`)).status).toBe(400);
    expect((await get(`/v0/events/${M1}`, key2)).status).toBe(403);
    expect((await s.get(`/v0/events/${M1}`, {})).status).toBe(401);
  });
});

describe("since and NUL characters", () => {
  test("since takes what the activity routes' since takes: an ISO 8601 date-time in 0001–9999, never unix seconds", async () => {
    for (const since of ["1796000000", "1", "Jan%201%202020", "0000-01-01T00:00:00Z", "%2B275760-09-13T00:00:00Z"]) {
      const res = await get(`/v0/events/${M1}?since=${since}`);
      expect(res.status, since).toBe(400);
      expect(res.body.error).toMatchObject({ code: "invalid_parameter", param: "since" });
    }
    for (const since of ["2026-11-10T00:00:00Z", "2026-11-10T02:00:00%2B02:00", "2026-11-10T00:00:00.000Z"]) {
      const res = await get(`/v0/events/${M1}?since=${since}`);
      expect(
        res.body.map((e: any) => e.id),
        since,
      ).toEqual(ids.slice(9));
    }
  });

  test("a NUL in any query or path value is a 400 naming the parameter, also where a prefix would pass", async () => {
    for (const q of [
      "type=charge.failed%00",
      "since=2026-11-10T00:00:00Z%00",
      `starting_after=${ids[1]}%00`,
      "limit=1%00",
      "order=asc%00",
      "chain_id=10%00",
      "format=json%00",
    ]) {
      const res = await get(`/v0/events/${M1}?${q}`);
      expect(res.status, q).toBe(400);
      expect(res.body.error).toMatchObject({ code: "invalid_parameter", param: q.split("=")[0] });
    }
    for (const [path, param] of [
      [`/v0/events/${M1}/${ids[1]}%00`, "id"],
      [`/v0/events/${M1}%00`, "merchant"],
      [`/v0/events/${M1}%00/${ids[1]}`, "merchant"],
    ] as const) {
      const res = await get(path);
      expect(res.status, path).toBe(400);
      expect(res.body.error.param).toBe(param);
    }
  });
});

describe("GET /v0/events/:merchant/:id", () => {
  test("one event; 404 when unknown or another merchant's", async () => {
    const res = await get(`/v0/events/${M1}/${ids[2]}`);
    expect(res.status).toBe(200);
    expect(res.body.id).toBe(ids[2]);
    // service.md "Freshness": it reads the index, so it says how far the event's chain is indexed, as the list of that chain does.
    const list = await get(`/v0/events/${M1}?limit=1&chain_id=${res.body.chain_id}`);
    expect(res.headers.get("x-indexed-block")).toMatch(/^[0-9]+$/);
    expect(res.headers.get("x-indexed-block")).toBe(list.headers.get("x-indexed-block"));
    expect(res.headers.get("x-indexed-at")).toBe(list.headers.get("x-indexed-at"));
    expect(res.body.type).toBe("subscription.created");
    expect((await get(`/v0/events/${M1}/evt_ffff`)).status).toBe(404);
    expect((await get(`/v0/events/${M1}/evt_0`)).status).toBe(404);
    // webhooks.md §3: an unknown id is a 404, whatever its spelling (event ids are opaque to a merchant).
    for (const id of ["nope", "evt_ABCdef", `evt_${"f".repeat(61)}`, "123"]) {
      const res = await get(`/v0/events/${M1}/${id}`);
      expect(res.status, id).toBe(404);
      expect(res.body.error.code).toBe("not_found");
      expect(res.body.error.param).toBe("id");
    }
    // The credential is checked first: no credential is a 401, not a 404.
    expect((await s.get(`/v0/events/${M1}/nope`, {})).status).toBe(401);
  });
});

describe("a chain-scoped credential (a SIWE session, or a key it made) reads only its chain's events", () => {
  const sessionOn = async (chainId: number) =>
    (await s.db.sql.begin((tx) => createSession(tx, { address: M1, chainId, ttlSeconds: 600 }))).token;

  test("the list filters to the chain; another chain_id is a 403 as on the other read routes", async () => {
    for (const chainId of [10, 31337]) {
      const session = await sessionOn(chainId);
      const made = await s.app.handle(
        new Request(`http://localhost/v0/api_keys/${M1}`, {
          method: "POST",
          headers: { authorization: `Bearer ${session}` },
        }),
      );
      const scopedKey = ((await made.json()) as { key: string }).key;
      for (const cred of [session, scopedKey]) {
        const res = await get(`/v0/events/${M1}`, cred);
        expect(res.status).toBe(200);
        expect(res.body.map((e: any) => e.id)).toEqual(ids.filter((_, i) => (i % 2 ? 31337 : 10) === chainId));
        const paged = await get(`/v0/events/${M1}?limit=2&order=desc`, cred);
        expect(paged.body.every((e: any) => e.chain_id === chainId)).toBe(true);
        const own = await get(`/v0/events/${M1}?chain_id=${chainId}`, cred);
        expect(own.body.length).toBe(6);
        const other = await get(`/v0/events/${M1}?chain_id=${chainId === 10 ? 31337 : 10}`, cred);
        expect(other.status).toBe(403);
        expect(other.body.error.code).toBe("forbidden");
      }
    }
    // A CLI key reads every chain.
    expect((await get(`/v0/events/${M1}`)).body.length).toBe(12);
  });

  test("one event of another chain is a 404, as an unknown id (its chain is not named in the request)", async () => {
    const session = await sessionOn(10);
    expect((await get(`/v0/events/${M1}/${ids[0]}`, session)).status).toBe(200);
    const other = await get(`/v0/events/${M1}/${ids[1]}`, session);
    expect(other.status).toBe(404);
    expect(other.body.error.code).toBe("not_found");
    expect((await get(`/v0/events/${M1}?starting_after=${ids[1]}`, session)).status).toBe(400);
    expect((await get(`/v0/events/${M1}/${ids[1]}`)).status).toBe(200);
  });
});
