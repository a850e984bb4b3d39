/** The stored endpoints: a chain scope is part of every write's own WHERE (one query, no check before it). */
import { afterAll, beforeAll, expect, test } from "bun:test";
import type { Db } from "../../src/db/client";
import { createEndpoint, deleteEndpoint, rotateSecret, updateEndpoint } from "../../src/webhooks/endpoints";
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
