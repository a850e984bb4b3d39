/** The stored endpoints: a chain scope is part of every write's own WHERE (one query, no check before it). */
import { afterAll, beforeAll, expect, test } from "bun:test";
import type { Db } from "../../src/db/client";
import {
  createEndpoint,
  deleteEndpoint,
  listDeliveries,
  rotateSecret,
  updateEndpoint,
} from "../../src/webhooks/endpoints";
import { createTestDb, testDbKind } from "../../testkit/db";

const MERCHANT = "0x00000000000000000000000000000000000000f1";
const CHAIN_A = 31337;
const CHAIN_B = 8453;
let db: Db;

beforeAll(async () => {
  db = await createTestDb();
}, 60_000);
afterAll(async () => {
  await db?.close();
});

const endpoint = (chainId: number | null) =>
  createEndpoint(
    db.sql,
    { merchant: MERCHANT, url: "https://example.com/hook", eventTypes: ["*"], description: null, chainId },
    undefined,
  );

const stored = async (id: string) =>
  (await db.sql`select url, enabled, secret, previous_secret from webhook_endpoints where id = ${id}`)[0];

test(`update, delete and rotate scoped to a chain match nothing of another chain and change nothing (${testDbKind})`, async () => {
  const onA = await endpoint(CHAIN_A);
  const before = await stored(onA.id);
  expect(
    await updateEndpoint(db.sql, MERCHANT, onA.id, { url: "https://example.org/x", enabled: false }, CHAIN_B),
  ).toBe(undefined);
  expect(await rotateSecret(db.sql, MERCHANT, onA.id, undefined, CHAIN_B)).toBe(undefined);
  expect(await deleteEndpoint(db.sql, MERCHANT, onA.id, CHAIN_B)).toBe(false);
  expect(await stored(onA.id)).toEqual(before);

  // The same writes in scope: its own chain, or no scope at all.
  expect((await updateEndpoint(db.sql, MERCHANT, onA.id, { enabled: false }, CHAIN_A))?.enabled).toBe(false);
  expect((await rotateSecret(db.sql, MERCHANT, onA.id, undefined))?.secret).toMatch(/^whsec_/);
  expect(await deleteEndpoint(db.sql, MERCHANT, onA.id, CHAIN_A)).toBe(true);
  expect(await stored(onA.id)).toBeUndefined();
});

test(`an all-chain endpoint is in every chain's scope (${testDbKind})`, async () => {
  const all = await endpoint(null);
  expect((await updateEndpoint(db.sql, MERCHANT, all.id, { description: "b" }, CHAIN_B))?.description).toBe("b");
  expect((await rotateSecret(db.sql, MERCHANT, all.id, undefined, CHAIN_A))?.id).toBe(all.id);
  expect(await deleteEndpoint(db.sql, MERCHANT, all.id, CHAIN_B)).toBe(true);
});

test(`the delivery log pages through deliveries created microseconds apart, each once, newest first (${testDbKind})`, async () => {
  const { id } = await endpoint(null);
  // Five deliveries within one millisecond (a fan-out creates thousands a second), and one later.
  const times = ["00.000100", "00.000300", "00.000300", "00.000500", "00.000900", "00.999000"].map(
    (t) => `2030-01-01 00:00:${t}+00`,
  );
  for (const [i, t] of times.entries()) {
    await db.sql`insert into webhook_deliveries (id, endpoint_id, event_seq, event_id, event_type, created_at)
      values (${`wd_${String(i).padStart(24, "0")}`}, ${id}, ${i}, ${`evt_${i}`}, 'charge.succeeded', ${t}::text::timestamptz)`;
  }
  const seen: string[] = [];
  let after: string | undefined;
  for (let page = 0; page < 10; page++) {
    const rows = await listDeliveries(db.sql, id, { limit: 2, after });
    seen.push(...rows.slice(0, 2).map((r) => r.id));
    if (rows.length <= 2) break;
    after = rows[1]!.id;
  }
  expect(seen).toEqual([5, 4, 3, 2, 1, 0].map((i) => `wd_${String(i).padStart(24, "0")}`));
});
