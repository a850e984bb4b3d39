/**
 * CHAINS: two anvils with different chain ids indexed (and charged) by one process, on PGlite and Postgres. Each
 * chain's index equals a fresh single-chain index of it, each `chain_id` is answered from its own data, and a
 * chain whose node dies does not hold the other back.
 */
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import type { Address } from "viem";
import { createApiKey } from "../../src/auth/api-keys";
import { ConfigError, loadConfig } from "../../src/common/config";
import type { Db } from "../../src/db/client";
import { startService, type Service } from "../../src/service";
import { keys } from "../../testkit/accounts";
import { createTestChain, type TestChain } from "../../testkit/chain";
import { freePort, until } from "../../testkit/cli";
import { dumpChainData } from "../../testkit/compare";
import { createTestDb } from "../../testkit/db";
import { indexOnce } from "../../testkit/indexer";

const B_ID = 31338;
let a: TestChain;
let b: TestChain;
let service: Service;
let key: string;
let merchant: string;
const modules = new Map<number, Address>();
const tokens = new Map<number, Address>();

/** A plan of `amount` on the chain and `n` subscriptions to it, the first ones charged by the test keeper. */
async function seed(chain: TestChain, amount: bigint, n: number) {
  const token = await chain.deployToken();
  const module = await chain.createModule("merchant");
  await chain.createPlan("merchant", module, { planId: 1, token, amount, interval: 86_400 });
  for (const who of ["alice", "bob", "carol"].slice(0, n) as ("alice" | "bob" | "carol")[]) {
    await chain.fund(who, token, 1_000_000n);
    await chain.charge(module, await chain.subscribe(who, module, 1));
  }
  modules.set(chain.chainId, module);
  tokens.set(chain.chainId, token);
}

const head = (chain: TestChain) => chain.publicClient.getBlockNumber({ cacheTime: 0 });
const get = (path: string) => fetch(service.url + path, { headers: { authorization: `Bearer ${key}` } });

beforeAll(async () => {
  [a, b] = await Promise.all([createTestChain(), createTestChain({ anvil: { args: ["--chain-id", String(B_ID)] } })]);
  merchant = a.address("merchant").toLowerCase();
  await Promise.all([seed(a, 1_000n, 1), seed(b, 2_000n, 2)]);
  const config = loadConfig({
    CHAINS: `${a.chainId},${B_ID}`,
    [`RPC_URL_${a.chainId}`]: a.rpcUrl,
    [`RPC_URL_${B_ID}`]: b.rpcUrl,
    [`PROCESSOR_ADDRESS_${a.chainId}`]: a.processor,
    [`PROCESSOR_ADDRESS_${B_ID}`]: b.processor,
    [`START_BLOCK_${a.chainId}`]: a.startBlock.toString(),
    [`START_BLOCK_${B_ID}`]: b.startBlock.toString(),
    POLL_INTERVAL_MS: "100",
    [`POLL_INTERVAL_MS_${B_ID}`]: "150",
    KEEPER_PRIVATE_KEY: keys.keeper,
    SIWE_DOMAIN: "localhost",
    ROLES: "api,indexer,keeper",
    PORT: String(await freePort()),
    HOST: "127.0.0.1",
    LOG_LEVEL: "error",
  });
  // Each chain's indexer and keeper hold a connection for their locks: the pool the service sizes for itself.
  service = await startService(config, { db: await createTestDb({ max: 12 }) });
  key = (await createApiKey(service.db.sql, { merchant })).key;
}, 120_000);

afterAll(async () => {
  await service?.stop();
  await a?.stop();
  await b?.stop();
});

describe("several chains in one process", () => {
  test("configuration: per-chain variables are required or fall back, and errors name the variable", () => {
    const base = { CHAINS: "1,2", RPC_URL_1: "http://one", RPC_URL_2: "http://two", PROCESSOR_ADDRESS: a.processor };
    const c = loadConfig({ ...base, START_BLOCK_2: "7", CONFIRMATIONS: "3" });
    expect(c.CHAIN_ID).toBe(1);
    expect(c.indexed.map((x) => [x.chainId, x.rpcUrl, x.startBlock, x.confirmations])).toEqual([
      [1, "http://one", 0, 3],
      [2, "http://two", 7, 3],
    ]);
    expect(() => loadConfig({ ...base, RPC_URL_2: undefined })).toThrow(/RPC_URL_2/);
    expect(() => loadConfig({ ...base, PROCESSOR_ADDRESS: undefined, PROCESSOR_ADDRESS_1: a.processor })).toThrow(
      /PROCESSOR_ADDRESS_2/,
    );
    expect(() => loadConfig({ ...base, START_BLOCK_2: "x" })).toThrow(/START_BLOCK_2/);
    expect(() => loadConfig({ ...base, CHAIN_ID: "3" })).toThrow(ConfigError);
    // The single-chain variables keep working unchanged.
    expect(loadConfig({ RPC_URL: "http://one", PROCESSOR_ADDRESS: a.processor }).indexed).toHaveLength(1);
  });

  test("both chains are indexed exactly, one indexer and keeper each", async () => {
    expect([...service.indexers.keys()].sort()).toEqual([a.chainId, B_ID]);
    expect([...service.keepers.keys()].sort()).toEqual([a.chainId, B_ID]);
    // A subscription made now on each chain is charged by that chain's keeper.
    for (const chain of [a, b]) {
      await chain.fund("dave", tokens.get(chain.chainId)!, 1_000_000n);
      await chain.subscribe("dave", modules.get(chain.chainId)!, 1);
    }
    for (const chain of [a, b]) {
      await until(`chain ${chain.chainId}'s keeper to charge dave`, async () => {
        const res = await get(`/v0/payments/${merchant}?chain_id=${chain.chainId}`);
        const rows = (await res.json()) as { keeper_address: string }[];
        return rows.some((r) => r.keeper_address === a.address("keeper").toLowerCase()) && rows.length >= 2;
      });
      await service.indexers.get(chain.chainId)!.waitForBlock(await head(chain));
    }
    for (const chain of [a, b]) {
      const fresh: Db = await createTestDb();
      try {
        await indexOnce(fresh.sql, chain.rpcUrl, chain.processor, { db: fresh, startBlock: chain.startBlock });
        const [mine, theirs] = [
          await dumpChainData(service.db.sql, chain.chainId),
          await dumpChainData(fresh.sql, chain.chainId),
        ];
        for (const table of Object.keys(mine) as (keyof typeof mine)[]) {
          expect({ chain: chain.chainId, [table]: mine[table] }).toEqual({
            chain: chain.chainId,
            [table]: theirs[table],
          });
        }
      } finally {
        await fresh.close();
      }
    }
  }, 90_000);

  test("each chain_id is answered from its own data; no chain_id means CHAIN_ID's; /readyz covers both", async () => {
    const amounts = async (q: string) =>
      new Set(
        ((await (await get(`/v0/payments/${merchant}${q}`)).json()) as { amount_charged: string }[]).map(
          (r) => r.amount_charged,
        ),
      );
    expect(await amounts(`?chain_id=${a.chainId}`)).toEqual(new Set(["1000"]));
    expect(await amounts(`?chain_id=${B_ID}`)).toEqual(new Set(["2000"]));
    expect(await amounts("")).toEqual(new Set(["1000"]));
    const subs = await get(`/v0/subscriptions/${merchant}?chain_id=${B_ID}`);
    expect(((await subs.json()) as unknown[]).length).toBe(3);
    expect(subs.headers.get("x-indexed-block")).toBe(String(await head(b)));
    const ready = await fetch(`${service.url}/readyz`);
    expect(ready.status).toBe(200);
    const body = (await ready.json()) as { chains: { chain_id: number }[] };
    expect(body.chains.map((c) => c.chain_id).sort()).toEqual([a.chainId, B_ID]);
  });

  test("with one chain's node dead, the other keeps being indexed", async () => {
    await a.stop();
    await b.fund("erin", tokens.get(B_ID)!, 1_000_000n);
    await b.charge(modules.get(B_ID)!, await b.subscribe("erin", modules.get(B_ID)!, 1));
    await service.indexers.get(B_ID)!.waitForBlock(await head(b), 20_000);
    const res = await get(`/v0/subscriptions/${merchant}?chain_id=${B_ID}`);
    expect(((await res.json()) as unknown[]).length).toBe(4);
    await until(
      "chain A's indexer to report its dead node",
      async () => service.indexers.get(a.chainId)!.status().lastError,
    );
  }, 60_000);
});
