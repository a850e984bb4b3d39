/**
 * The event log filtered by type: on an indexed scenario (activity events built from their rows, stored events), every
 * type filter gives exactly the unfiltered log's events of those types, in both orders, whole or page by page; and a
 * page of a rare type reads about the page, not the merchant's whole log.
 */
import { afterAll, beforeAll, expect, test } from "bun:test";
import type { Db } from "../../../src/db/client";
import { EVENT_TYPES } from "../../../src/events/envelope";
import { eventsResponse } from "../../../src/http/features/events/service";
import { createApp } from "../../../src/http/app";
import { createChainRegistry } from "../../../src/chain/clients";
import { createNotifier } from "../../../src/db/notify";
import { admin, request, testConfig } from "../../../testkit/app";
import { createTestChain, type TestChain } from "../../../testkit/chain";
import { createTestDb, testDbKind } from "../../../testkit/db";
import { indexEventLog } from "../../../testkit/indexer";
import { runScenario } from "../../../testkit/scenario";

let chain: TestChain;
let db: Db;
let app: ReturnType<typeof createApp>;
let merchants: string[];

beforeAll(async () => {
  chain = await createTestChain();
  db = await createTestDb();
  await runScenario(chain);
  await indexEventLog(db, chain);
  const config = testConfig();
  app = createApp({ sql: db.sql, config, chains: await createChainRegistry(config), notifier: createNotifier(db) });
  merchants = (await db.sql<{ merchant: string }[]>`select distinct merchant from event_log order by 1`).map(
    (r) => r.merchant,
  );
}, 120_000);
afterAll(async () => {
  await db?.close();
  await chain?.stop();
});

type Envelope = { id: string; type: string };
const list = async (path: string): Promise<Envelope[]> => {
  const res = await request(app, path, admin);
  expect(res.status).toBe(200);
  return res.body as Envelope[];
};

/** Every page of `limit` events, each after the last one of the page before. */
async function paged(base: string, limit: number): Promise<Envelope[]> {
  const out: Envelope[] = [];
  for (;;) {
    const after = out.length ? `&starting_after=${out.at(-1)!.id}` : "";
    const page = await list(`${base}&limit=${limit}${after}`);
    out.push(...page);
    if (page.length < limit) return out;
  }
}

test(`every type filter equals the unfiltered log's events of those types, whole and paged, both orders (${testDbKind})`, async () => {
  const filters = [
    ...EVENT_TYPES.map((t) => [t]),
    ["charge.failed", "subscription.created"],
    ["charge.succeeded", "credit.refilled", "subscription.status_changed"],
  ];
  let compared = 0;
  const seen = new Set<string>();
  for (const merchant of merchants) {
    for (const order of ["desc", "asc"]) {
      const all = await list(`/v0/events/${merchant}?order=${order}`);
      for (const e of all) seen.add(e.type);
      for (const types of filters) {
        const want = all.filter((e) => types.includes(e.type)).map((e) => e.id);
        const base = `/v0/events/${merchant}?order=${order}&type=${types.join(",")}`;
        expect((await list(base)).map((e) => e.id)).toEqual(want);
        expect((await paged(base, 3)).map((e) => e.id)).toEqual(want);
        compared += want.length;
      }
    }
  }
  // The scenario has events of the activity and of the allocations, so both tables of the log were read.
  for (const t of ["charge.succeeded", "charge.failed", "subscription.created", "subscription.status_changed"])
    expect(seen).toContain(t);
  expect(compared).toBeGreaterThan(0);
}, 120_000);

test(`a page of a rare type reads about the page, not every event of the merchant (${testDbKind})`, async () => {
  const merchant = "0x00000000000000000000000000000000000000e1";
  await db.sql`
    insert into merchant_events (id, chain_id, merchant, type, block_number, log_index, ts, data)
    select 'evt_e1' || lpad(to_hex(g), 36, '0'), 31337, ${merchant},
      case when g % 500 = 0 then 'subscription.created' else 'subscription.status_changed' end,
      g, 0, now(), '{"object":{}}'::jsonb
    from generate_series(1, 3000) g`;
  await db.sql`analyze merchant_events`;
  // Read in one transaction on one connection, the counts of its table reads around it.
  const { ids, read } = await db.sql.begin(async (tx) => {
    const reads = async () =>
      (
        await tx<{ n: number }[]>`
          select coalesce(sum(seq_tup_read + coalesce(idx_tup_fetch, 0)), 0)::int as n
          from pg_stat_xact_user_tables where relname in ('merchant_events', 'activity')`
      )[0]!.n;
    const before = await reads();
    const res = await eventsResponse(
      tx as unknown as Db["sql"],
      { merchant, types: ["subscription.created"], order: "desc", limit: 2 },
      { format: "json", headers: {}, link: () => "", logLevel: "error" },
    );
    const body = (await res.json()) as Envelope[];
    return { ids: body.map((e) => e.id), read: (await reads()) - before };
  });
  expect(ids).toEqual([
    "evt_e1" + (3000).toString(16).padStart(36, "0"),
    "evt_e1" + (2500).toString(16).padStart(36, "0"),
  ]);
  expect(read).toBeLessThan(50);
});
