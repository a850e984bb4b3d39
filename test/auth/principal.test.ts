/** authenticate/assertCanRead called directly (the HTTP matrix is test/api/auth.test.ts). */
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { ForbiddenCredentialError, InvalidCredentialError, ReadOnlyCredentialError } from "../../src/auth/errors";
import { createApiKey } from "../../src/auth/api-keys";
import {
  assertCanRead,
  assertCanWrite,
  authenticate,
  chainScope,
  credentialOf,
  type Principal,
} from "../../src/auth/principal";
import { createSession, readCookie } from "../../src/auth/sessions";
import { loadConfig } from "../../src/common/config";
import type { Db } from "../../src/db/client";
import { createTestDb } from "../../testkit/db";

let db: Db;
const merchant = "0x70997970c51812dc3a010c7d01b50e0d17dc79c8";
const config = loadConfig({});

beforeAll(async () => {
  db = await createTestDb();
}, 60_000);

afterAll(async () => {
  await db?.close();
});

describe("credentialOf", () => {
  test("the Bearer token wins over the cookie; the cookie is the fallback", () => {
    expect(credentialOf({ authorization: "Bearer abc", cookie: "siwe_session=def" })).toBe("abc");
    expect(credentialOf({ authorization: null, cookie: "a=1; siwe_session=def" })).toBe("def");
    expect(credentialOf({ authorization: "", cookie: "siwe_session=" })).toBeUndefined();
    expect(credentialOf({})).toBeUndefined();
    expect(() => credentialOf({ authorization: "Token abc" })).toThrow(InvalidCredentialError);
  });

  test("readCookie finds a cookie by exact name", () => {
    expect(readCookie("xsiwe_session=1; siwe_session=2", "siwe_session")).toBe("2");
    expect(readCookie("siwe_session=", "siwe_session")).toBeUndefined();
    expect(readCookie(null, "siwe_session")).toBeUndefined();
  });
});

describe("authenticate", () => {
  test("without ADMIN_API_KEY no token is admin", async () => {
    await expect(authenticate(db.sql, config, { authorization: "Bearer " + "x".repeat(32) })).rejects.toThrow(
      InvalidCredentialError,
    );
  });

  test("an API key and a session resolve to their merchant", async () => {
    const { id, key } = await createApiKey(db.sql, { merchant });
    expect(await authenticate(db.sql, config, { authorization: `Bearer ${key}` })).toEqual({
      kind: "api_key",
      merchant,
      keyId: id,
      chainId: null,
    });
    const { token, session } = await db.sql.begin((tx) =>
      createSession(tx, { address: merchant.toUpperCase().replace("0X", "0x"), chainId: 10, ttlSeconds: 120 }),
    );
    expect(await authenticate(db.sql, config, { cookie: `siwe_session=${token}` })).toEqual({
      kind: "session",
      merchant,
      sessionId: session.id,
      chainId: 10,
      expiresAt: session.expiresAt,
      createdAt: session.createdAt,
    });
  });
});

describe("assertCanRead", () => {
  const key: Principal = { kind: "api_key", merchant, keyId: "key_1", chainId: null };
  test("own merchant in any case passes, another is forbidden, admin reads all", () => {
    expect(() => assertCanRead(key, merchant)).not.toThrow();
    expect(() => assertCanRead(key, merchant.toUpperCase().replace("0X", "0x"))).not.toThrow();
    expect(() => assertCanRead(key, "0x" + "1".repeat(40))).toThrow(ForbiddenCredentialError);
    expect(() => assertCanRead({ kind: "admin", merchant: null }, "0x" + "1".repeat(40))).not.toThrow();
  });

  test("a session reads only the chain it was signed for; keys and the admin read every chain", () => {
    const session: Principal = {
      kind: "session",
      merchant,
      sessionId: "ses_1",
      chainId: 10,
      expiresAt: "",
      createdAt: "",
    };
    expect(() => assertCanRead(session, merchant, 10)).not.toThrow();
    expect(() => assertCanRead(session, merchant, 8453)).toThrow(ForbiddenCredentialError);
    expect(() => assertCanRead(session, merchant, 8453)).toThrow("chain 10");
    expect(() => assertCanRead(key, merchant, 8453)).not.toThrow();
    expect(() => assertCanRead({ kind: "admin", merchant: null }, merchant, 8453)).not.toThrow();
  });
});

describe("chain-scoped keys and writes", () => {
  test("a key made with a chain reads only that chain, like the session that made it", async () => {
    const { id, key } = await createApiKey(db.sql, { merchant, chainId: 10 });
    const principal = await authenticate(db.sql, config, { authorization: `Bearer ${key}` });
    expect(principal).toEqual({ kind: "api_key", merchant, keyId: id, chainId: 10 });
    expect(chainScope(principal)).toBe(10);
    expect(() => assertCanRead(principal, merchant, 10)).not.toThrow();
    expect(() => assertCanRead(principal, merchant)).not.toThrow();
    expect(() => assertCanRead(principal, merchant, 8453)).toThrow("chain 10");
  });

  test("the admin key reads everything and writes nothing; a merchant's credential writes its own", () => {
    const admin: Principal = { kind: "admin", merchant: null };
    expect(() => assertCanWrite(admin, merchant)).toThrow(ReadOnlyCredentialError);
    expect(() => assertCanWrite({ kind: "api_key", merchant, keyId: "key_1", chainId: null }, merchant)).not.toThrow();
    expect(() =>
      assertCanWrite({ kind: "api_key", merchant, keyId: "key_1", chainId: null }, "0x" + "1".repeat(40)),
    ).toThrow(ForbiddenCredentialError);
    expect(chainScope(admin)).toBeNull();
  });
});
