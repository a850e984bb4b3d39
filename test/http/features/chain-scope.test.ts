/**
 * One chain-scope rule for writes: a chain-scoped credential (a SIWE session, a key it minted) reads all-chain
 * resources but changes only its own chain's; it lists and revokes only keys of its chain; minting a key needs a
 * session signed in the last ten minutes.
 */
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { createApiKey } from "../../../src/auth/api-keys";
import { createSession } from "../../../src/auth/sessions";
import { CHAIN_A, CHAIN_B, M1 } from "../../../testkit/seed";
import { startSeededApp, type SeededApp } from "../../../testkit/app";

let s: SeededApp;
let onB: string;
let cli: string;

type Res = { status: number; body: any };

async function call(method: string, path: string, token: string, body?: unknown): Promise<Res> {
  const headers: Record<string, string> = { authorization: `Bearer ${token}` };
  if (body !== undefined) headers["content-type"] = "application/json";
  const res = await s.app.handle(
    new Request(`http://localhost${path}`, {
      method,
      headers,
      body: body === undefined ? undefined : JSON.stringify(body),
    }),
  );
  const text = await res.text();
  return { status: res.status, body: text ? JSON.parse(text) : null };
}

const signed = (chainId: number) =>
  s.db.sql.begin((tx) => createSession(tx, { address: M1, chainId, ttlSeconds: 3600 }));
const session = async (chainId: number) => (await signed(chainId)).token;

beforeAll(async () => {
  s = await startSeededApp({ WEBHOOK_ALLOW_PRIVATE_URLS: "1" });
  onB = await session(CHAIN_B);
  cli = (await createApiKey(s.db.sql, { merchant: M1 })).key;
}, 60_000);

afterAll(async () => {
  await s?.close();
});

describe("API keys of a chain-scoped session", () => {
  test("a session lists and revokes only its own chain's keys", async () => {
    const all = await createApiKey(s.db.sql, { merchant: M1, label: "all chains" });
    const onA = await createApiKey(s.db.sql, { merchant: M1, label: "chain A", chainId: CHAIN_A });
    const mine = await createApiKey(s.db.sql, { merchant: M1, label: "chain B", chainId: CHAIN_B });
    const listed = (await call("GET", `/v0/api_keys/${M1}`, onB)).body as { id: string; chain_id: number | null }[];
    expect(listed.map((k) => k.id)).toContain(mine.id);
    expect(listed.every((k) => k.chain_id === CHAIN_B)).toBe(true);
    for (const other of [all, onA]) {
      const refused = await call("DELETE", `/v0/api_keys/${M1}/${other.id}`, onB);
      expect(refused.status).toBe(404);
      expect((await s.db.sql`select revoked_at from api_keys where id = ${other.id}`)[0]!.revoked_at).toBeNull();
      expect(
        (await s.get(`/v0/subscriptions/${M1}?chain_id=${CHAIN_B}`, { authorization: `Bearer ${other.key}` })).status,
      ).not.toBe(401);
    }
    expect((await call("DELETE", `/v0/api_keys/${M1}/${mine.id}`, onB)).status).toBe(200);
  });

  test("minting needs a session younger than 10 minutes: 403 reauthentication_required, nothing created", async () => {
    const { token: old, session: made } = await signed(CHAIN_B);
    await s.db.sql`update sessions set created_at = now() - interval '11 minutes' where id = ${made.id}`;
    const count = async () => (await s.db.sql`select count(*)::int as n from api_keys where merchant = ${M1}`)[0]!.n;
    const before = await count();
    const refused = await call("POST", `/v0/api_keys/${M1}`, old, { label: "late" });
    expect(refused.status).toBe(403);
    expect(refused.body.error).toMatchObject({ type: "permission_error", code: "reauthentication_required" });
    expect(await count()).toBe(before);
    // The old session still reads and lists; a fresh sign-in mints.
    expect((await call("GET", `/v0/api_keys/${M1}`, old)).status).toBe(200);
    expect((await call("POST", `/v0/api_keys/${M1}`, await session(CHAIN_B), { label: "fresh" })).status).toBe(201);
  });
});

describe("webhook endpoints of a chain-scoped credential", () => {
  test("reads an all-chain endpoint but changes, rotates, tests, replays and deletes only its own chain's", async () => {
    const made = await call("POST", `/v0/webhook_endpoints/${M1}`, cli, { url: "http://127.0.0.1:9/all" });
    expect(made.status).toBe(201);
    const allId = made.body.id as string;
    expect(made.body.chain_id ?? null).toBeNull();
    const keyOnB = (await createApiKey(s.db.sql, { merchant: M1, chainId: CHAIN_B })).key;
    for (const scoped of [onB, keyOnB]) {
      expect((await call("GET", `/v0/webhook_endpoints/${M1}/${allId}`, scoped)).status).toBe(200);
      const writes: [string, string, unknown?][] = [
        ["PATCH", `/v0/webhook_endpoints/${M1}/${allId}`, { description: "changed" }],
        ["POST", `/v0/webhook_endpoints/${M1}/${allId}/rotate_secret`],
        ["POST", `/v0/webhook_endpoints/${M1}/${allId}/test`],
        ["POST", `/v0/webhook_endpoints/${M1}/${allId}/replay`, { since: new Date(0).toISOString() }],
        ["DELETE", `/v0/webhook_endpoints/${M1}/${allId}`],
      ];
      for (const [method, path, body] of writes) {
        const res = await call(method, path, scoped, body);
        expect({ method, path, status: res.status }).toEqual({ method, path, status: 403 });
        expect(res.body.error.message).toContain(`chain ${CHAIN_B}`);
      }
    }
    const [row] = await s.db.sql`select description from webhook_endpoints where id = ${allId}`;
    expect(row!.description ?? null).not.toBe("changed");
    // Its own chain's endpoint: every change works.
    const own = await call("POST", `/v0/webhook_endpoints/${M1}`, onB, { url: "http://127.0.0.1:9/b" });
    expect(own.status).toBe(201);
    expect(own.body.chain_id).toBe(CHAIN_B);
    const ownPath = `/v0/webhook_endpoints/${M1}/${own.body.id}`;
    expect((await call("PATCH", ownPath, onB, { description: "mine" })).status).toBe(200);
    expect((await call("POST", `${ownPath}/rotate_secret`, onB)).status).toBe(200);
    expect((await call("DELETE", ownPath, onB)).status).toBe(200);
    // The all-chain credential changes the all-chain endpoint.
    expect((await call("PATCH", `/v0/webhook_endpoints/${M1}/${allId}`, cli, { description: "ok" })).status).toBe(200);
    expect((await call("DELETE", `/v0/webhook_endpoints/${M1}/${allId}`, cli)).status).toBe(200);
  });
});
