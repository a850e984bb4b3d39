/**
 * DATABASE_READ_URL against a real streaming replica (a temporary primary and `pg_basebackup -R` replica made with
 * the machine's PostgreSQL): index reads come from the replica and their freshness headers from the replica's own
 * cursor, so a lagging replica says so; keys, sessions and webhook endpoints written on the primary work at once.
 */
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import postgres from "postgres";
import { privateKeyToAccount } from "viem/accounts";
import { createApiKey } from "../../src/auth/api-keys";
import { ConfigError, loadConfig } from "../../src/common/config";
import { startService, type Service } from "../../src/service";
import { keys } from "../../testkit/accounts";
import { createTestChain, type TestChain } from "../../testkit/chain";
import { freePort, until } from "../../testkit/cli";
import { startReplicaPair, type ReplicaPair } from "../../testkit/replica";
import { signIn } from "../../testkit/siwe";

let chain: TestChain;
let pair: ReplicaPair;
let service: Service;
let replica: postgres.Sql;
let merchant: string;
let key: string;
let module: `0x${string}`;
let token: `0x${string}`;

const get = (path: string, auth = key) => fetch(service.url + path, { headers: { authorization: `Bearer ${auth}` } });
const cursor = async (sql: postgres.Sql) =>
  (await sql<{ b: string }[]>`select indexed_block::text as b from chains`)[0]?.b ?? null;

beforeAll(async () => {
  chain = await createTestChain();
  pair = await startReplicaPair();
  replica = postgres(pair.replicaUrl, { max: 1, onnotice: () => {} });
  merchant = chain.address("merchant").toLowerCase();
  token = await chain.deployToken();
  module = await chain.createModule("merchant");
  await chain.createPlan("merchant", module, { planId: 1, token, amount: 1_000n, interval: 86_400 });
  await chain.fund("alice", token, 1_000_000n);
  await chain.charge(module, await chain.subscribe("alice", module, 1));
  service = await startService(
    loadConfig({
      DATABASE_URL: pair.primaryUrl,
      DATABASE_READ_URL: pair.replicaUrl,
      RPC_URL: chain.rpcUrl,
      PROCESSOR_ADDRESS: chain.processor,
      START_BLOCK: chain.startBlock.toString(),
      POLL_INTERVAL_MS: "100",
      SIWE_DOMAIN: "localhost",
      ROLES: "api,indexer",
      PORT: String(await freePort()),
      HOST: "127.0.0.1",
      WEBHOOK_ALLOW_PRIVATE_URLS: "1",
      LOG_LEVEL: "error",
    }),
  );
  key = (await createApiKey(service.db.sql, { merchant })).key;
  await service.indexer!.waitForBlock(await chain.publicClient.getBlockNumber({ cacheTime: 0 }));
}, 90_000);

afterAll(async () => {
  await service?.stop();
  await replica?.end();
  await pair?.stop();
  await chain?.stop();
});

describe("DATABASE_READ_URL (Postgres only: a private primary and replica on both runs)", () => {
  test("needs DATABASE_URL", () => {
    expect(() => loadConfig({ DATABASE_READ_URL: "postgres://replica/db" })).toThrow(ConfigError);
  });

  test("index reads come from the replica; a lagging replica's answers and freshness headers say so", async () => {
    const path = `/v0/activity/${merchant}`;
    await until("the replica to catch up", async () => ((await (await get(path)).json()) as unknown[]).length === 1);
    await pair.pauseReplay();
    try {
      await chain.fund("bob", token, 1_000_000n);
      await chain.charge(module, await chain.subscribe("bob", module, 1));
      await service.indexer!.waitForBlock(await chain.publicClient.getBlockNumber({ cacheTime: 0 }));
      const primaryBlock = await cursor(service.db.sql);
      const replicaBlock = await cursor(replica);
      expect(BigInt(primaryBlock!)).toBeGreaterThan(BigInt(replicaBlock!));
      await Bun.sleep(2200); // past any cache entry's lifetime
      const lagging = await get(path);
      expect(((await lagging.json()) as unknown[]).length).toBe(1);
      expect(lagging.headers.get("x-indexed-block")).toBe(replicaBlock);
      const subs = await get(`/v0/subscriptions/${merchant}`);
      expect(((await subs.json()) as unknown[]).length).toBe(1);
      expect(subs.headers.get("x-indexed-block")).toBe(replicaBlock);
    } finally {
      await pair.resumeReplay();
    }
    const caught = await until("the replica to replay the new batch", async () => {
      const res = await get(path);
      const body = (await res.json()) as unknown[];
      return body.length === 2 ? res : undefined;
    });
    expect(caught.headers.get("x-indexed-block")).toBe(await cursor(service.db.sql));
  }, 60_000);

  test("an auth write followed by a read works while the replica lags (keys, sessions, webhook endpoints)", async () => {
    await pair.pauseReplay();
    try {
      const fresh = (await createApiKey(service.db.sql, { merchant })).key;
      expect((await get(`/v0/subscriptions/${merchant}`, fresh)).status).toBe(200);
      const app = {
        handle: (req: Request) => {
          const u = new URL(req.url);
          return fetch(new Request(service.url + u.pathname + u.search, req));
        },
      };
      const session = await signIn(app, privateKeyToAccount(keys.merchant));
      expect((await get(`/v0/subscriptions/${merchant}`, session)).status).toBe(200);
      const created = await fetch(`${service.url}/v0/webhook_endpoints/${merchant}`, {
        method: "POST",
        headers: { authorization: `Bearer ${fresh}`, "content-type": "application/json" },
        body: JSON.stringify({ url: "http://127.0.0.1:9/hook" }),
      });
      expect(created.status).toBe(201);
      const { id } = (await created.json()) as { id: string };
      expect((await get(`/v0/webhook_endpoints/${merchant}/${id}`, fresh)).status).toBe(200);
      // The replica indeed has none of it yet.
      expect((await replica`select count(*)::int as n from webhook_endpoints`)[0]!.n).toBe(0);
    } finally {
      await pair.resumeReplay();
    }
  }, 60_000);
});
