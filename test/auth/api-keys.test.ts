import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import {
  createApiKey,
  findApiKey,
  InvalidLabelError,
  InvalidMerchantError,
  listApiKeys,
  revokeApiKey,
} from "../../src/auth/api-keys";
import { hashSecret } from "../../src/auth/hash";
import type { Db } from "../../src/db/client";
import { accounts } from "../../testkit/accounts";
import { createTestDb } from "../../testkit/db";

let db: Db;
const merchant = accounts.merchant.address.toLowerCase();
const merchant2 = accounts.merchant2.address.toLowerCase();

beforeAll(async () => {
  db = await createTestDb();
}, 60_000);

afterAll(async () => {
  await db?.close();
});

describe("createApiKey", () => {
  test("returns a sk_live_ key once; the row holds only its hash and a short prefix", async () => {
    const created = await createApiKey(db.sql, { merchant: accounts.merchant.address, label: " ci " });
    expect(created.id).toMatch(/^key_[0-9a-f]{20}$/);
    expect(created.key).toMatch(/^sk_live_[1-9A-HJ-NP-Za-km-z]{40,44}$/);
    expect(created.merchant).toBe(merchant);
    const [row] = await db.sql`select * from api_keys where id = ${created.id}`;
    expect(row!.key_hash).toBe(hashSecret(created.key));
    expect(row!.key_hash).not.toBe(created.key);
    expect(row!.prefix).toBe(created.key.slice(0, 12));
    expect(row!.label).toBe("ci");
    expect(row!.merchant).toBe(merchant);
    const text = JSON.stringify(row);
    expect(text).not.toContain(created.key);
    expect(text).not.toContain(created.key.slice(12));
  });

  test("refuses a bad merchant or label", async () => {
    await expect(createApiKey(db.sql, { merchant: "0x1234" })).rejects.toThrow(InvalidMerchantError);
    await expect(createApiKey(db.sql, { merchant: `${merchant}00` })).rejects.toThrow(InvalidMerchantError);
    await expect(createApiKey(db.sql, { merchant, label: "x".repeat(201) })).rejects.toThrow(InvalidLabelError);
    await expect(createApiKey(db.sql, { merchant, label: "a\nb" })).rejects.toThrow(InvalidLabelError);
  });
});

describe("findApiKey and revokeApiKey", () => {
  test("finds an active key by its secret; revoked and unknown keys are null", async () => {
    const { id, key } = await createApiKey(db.sql, { merchant });
    expect(await findApiKey(db.sql, key)).toEqual({ id, merchant, chainId: null });
    expect(await findApiKey(db.sql, `${key}x`)).toBeNull();
    expect(await findApiKey(db.sql, hashSecret(key))).toBeNull();
    expect(await revokeApiKey(db.sql, id)).toBe(true);
    expect(await revokeApiKey(db.sql, id)).toBe(false);
    expect(await revokeApiKey(db.sql, "key_unknown")).toBe(false);
    expect(await findApiKey(db.sql, key)).toBeNull();
  });

  test("last_used_at is written on first use, then at most once a minute", async () => {
    const { id, key } = await createApiKey(db.sql, { merchant });
    const lastUsed = async () =>
      (await db.sql`select last_used_at from api_keys where id = ${id}`)[0]!.last_used_at as Date | null;
    expect(await lastUsed()).toBeNull();
    await findApiKey(db.sql, key);
    const first = await lastUsed();
    expect(first).toBeInstanceOf(Date);
    await findApiKey(db.sql, key);
    expect((await lastUsed())!.getTime()).toBe(first!.getTime());
    await db.sql`update api_keys set last_used_at = now() - interval '2 minutes' where id = ${id}`;
    const stale = await lastUsed();
    await findApiKey(db.sql, key);
    expect((await lastUsed())!.getTime()).toBeGreaterThan(stale!.getTime() + 60_000);
  });
});

describe("listApiKeys", () => {
  test("lists all keys or one merchant's, never the secret or its hash", async () => {
    const a = await createApiKey(db.sql, { merchant: merchant2, label: "first" });
    // Keys list by created_at; two inserts in the same clock tick would tie.
    await Bun.sleep(5);
    const b = await createApiKey(db.sql, { merchant: merchant2 });
    await revokeApiKey(db.sql, b.id);
    const mine = await listApiKeys(db.sql, accounts.merchant2.address);
    expect(mine.map((k) => k.id)).toEqual([a.id, b.id]);
    expect(mine[0]).toMatchObject({
      merchant: merchant2,
      label: "first",
      chain_id: null,
      revoked_at: null,
      last_used_at: null,
    });
    expect(mine[0]!.created_at).toMatch(/^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$/);
    expect(mine[1]!.revoked_at).toMatch(/Z$/);
    expect(Object.keys(mine[0]!).sort()).toEqual(
      ["chain_id", "created_at", "id", "label", "last_used_at", "merchant", "prefix", "revoked_at"].sort(),
    );
    const text = JSON.stringify(await listApiKeys(db.sql));
    expect(text).not.toContain(a.key);
    expect(text).not.toContain(hashSecret(a.key));
    expect((await listApiKeys(db.sql)).length).toBeGreaterThan(mine.length);
  });
});
