/**
 * A chain that indexes only Spend Permissions (spend-permissions spec §7, §8): the service started with
 * SPEND_PERMISSION_MANAGER and its spenders but no PROCESSOR_ADDRESS indexes the manager, answers the permission's
 * record, its auth check in every mode and its webhooks, charges a due permission of an EOA spender with
 * SPEND_PERMISSION_KEEPER_KEYS, and leaves the module side (processor logs, module keeper) out.
 */
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import type { Address } from "viem";
import { createApiKey } from "../../src/auth/api-keys";
import { testTokenAbi } from "../../src/chain/abis";
import { loadConfig } from "../../src/common/config";
import { gatherStatus } from "../../src/http/features/control/status";
import { createIndexer } from "../../src/indexer";
import { publicClientFor } from "../../src/chain/clients";
import type { Service } from "../../src/service";
import { keys } from "../../testkit/accounts";
import { createTestChain, type TestChain } from "../../testkit/chain";
import { until } from "../../testkit/cli";
import { startChainService } from "../../testkit/service";
import {
  TEST_ALLOWANCE,
  TEST_PERIOD,
  deploySpendPermissions,
  type SpendPermissionKit,
} from "../../testkit/spend-permissions";
import { endpointForAll, startReceiver, type Receiver } from "../../testkit/webhooks";

let chain: TestChain;
let kit: SpendPermissionKit;
let service: Service;
let receiver: Receiver;
let merchant: Address;
let dave: Address; // an EOA spender whose key the keeper holds
let alice: Address;
let token: Address;
let key: string;
let hash: string;
let config: ReturnType<typeof loadConfig>;

const get = async (path: string) => {
  const res = await fetch(`${service.url}${path}`, { headers: { authorization: `Bearer ${key}` } });
  return { status: res.status, body: (await res.json()) as any };
};

beforeAll(async () => {
  chain = await createTestChain();
  kit = await deploySpendPermissions(chain);
  token = await chain.deployToken({ symbol: "USDC", decimals: 6 });
  merchant = await kit.createAccount("merchant", { managerOwner: false });
  dave = chain.address("dave");
  alice = await kit.createAccount("alice");
  await chain.send(
    chain
      .wallet("deployer")
      .writeContract({ address: token, abi: testTokenAbi, functionName: "mint", args: [alice, 10n ** 12n] }),
  );
  receiver = startReceiver();
  const env = {
    // The chain's processor exists on anvil, but this deployment does not index it.
    PROCESSOR_ADDRESS: "",
    SPEND_PERMISSION_MANAGER: kit.manager,
    SPEND_PERMISSION_SPENDERS: `${merchant},${dave}`,
    SPEND_PERMISSION_KEEPER_KEYS: keys.dave,
    ENTRYPOINT_ADDRESSES: kit.entryPoint,
    KEEPER_PRIVATE_KEY: keys.keeper,
    WEBHOOK_ALLOW_PRIVATE_URLS: "1",
    WEBHOOK_POLL_INTERVAL_MS: "50",
    ROLES: "api,indexer,keeper,webhooks",
  };
  config = loadConfig({ RPC_URL: chain.rpcUrl, ...env });
  service = await startChainService(chain, env);
  key = (await createApiKey(service.db.sql, { merchant: merchant.toLowerCase() })).key;
  await endpointForAll(service.db.sql, merchant.toLowerCase(), receiver.url);
  // Base Pay's first charge, sent by the spender account: approveWithSignature then spend.
  const start = Number(await chain.now()) + 1;
  const p = kit.permission({ account: alice, spender: merchant, token, start, salt: 1n });
  hash = kit.hash(p);
  await chain.setNextTimestamp(start);
  await kit.executeAs("merchant", merchant, [
    kit.managerCall("approveWithSignature", [p, await kit.sign("alice", p)]),
    kit.managerCall("spend", [p, TEST_ALLOWANCE]),
  ]);
  await service.indexer!.waitForBlock(await chain.publicClient.getBlockNumber(), 30_000);
}, 90_000);

afterAll(async () => {
  await service?.stop();
  await receiver?.stop();
  await chain?.stop();
});

describe("a permission-only chain", () => {
  test("the indexer runs without a processor; no keeper starts for the module side", async () => {
    expect([...service.roles].sort()).toEqual(["api", "indexer", "keeper", "webhooks"]);
    expect([...service.indexers.keys()]).toEqual([chain.chainId]);
    expect(service.keepers.size).toBe(0);
    expect(service.spendPermissionKeepers.map((k) => k.chainId)).toEqual([chain.chainId]);
    const [row] = await service.db.sql`select processor, spend_permission_manager from chains`;
    expect(row).toEqual({ processor: null, spend_permission_manager: kit.manager.toLowerCase() });
    expect(service.indexer!.status().lastError).toBeNull();
  });

  test("the permission's record and its charge are served", async () => {
    const record = await get(`/v0/subscriptions/${merchant}/${hash}`);
    expect(record.status).toBe(200);
    expect(record.body).toMatchObject({
      on_chain_id: hash,
      status: "ACTIVE",
      source: "spend_permission",
      times_executed: 1,
      total_spent: TEST_ALLOWANCE.toString(),
    });
    const activity = await get(`/v0/activity/${merchant}`);
    expect(activity.body.map((a: { type: string }) => a.type)).toEqual(["CHARGE"]);
  });

  test("the Spend Permission keeper charges a due permission of its spender key", async () => {
    const p = kit.permission({ account: alice, spender: dave, token, start: Number(await chain.now()), salt: 2n });
    await kit.executeAs("alice", alice, [kit.managerCall("approve", [p])]);
    const id = BigInt(kit.hash(p)).toString();
    const charges = () =>
      service.db.sql<{ type: string; amount: string; keeper: string }[]>`
        select type, amount::text, keeper from activity where subscription_id = ${id}`;
    await until("the keeper's spend indexed", async () => (await charges()).length > 0, 30_000);
    expect([...(await charges())]).toEqual([
      { type: "CHARGE", amount: TEST_ALLOWANCE.toString(), keeper: dave.toLowerCase() },
    ]);
    const [row] = await service.db.sql`select times_executed from spend_permissions where hash = ${kit.hash(p)}`;
    expect(row).toEqual({ times_executed: 1 });
  });

  test("the auth check answers from the index and from the chain", async () => {
    const planKey = `${token.toLowerCase()}:${TEST_ALLOWANCE}:${TEST_PERIOD}`;
    for (const mode of ["indexed", "onchain", "both"]) {
      const r = await get(
        `/v0/auth/check?module_address=${kit.manager}&wallet=${alice}&spender=${merchant}&plan_ids=${planKey}&mode=${mode}`,
      );
      expect(r.status).toBe(200);
      expect(r.body.authorized).toBe(true);
    }
  });

  test("the webhooks deliver the permission's events", async () => {
    await until("the three events delivered", async () => receiver.delivered().size >= 3);
    const delivered = receiver.received.map((r) => JSON.parse(r.body).type as string);
    const expected = ["subscription.created", "charge.succeeded", "subscription.status_changed"];
    expect([...new Set(delivered)].sort()).toEqual([...expected].sort());
    const log = await get(`/v0/events/${merchant}`);
    expect(log.body.map((e: { type: string }) => e.type)).toEqual(expected);
  });

  test("health and status report the chain; the status has no keeper chain to watch", async () => {
    const health = await fetch(`${service.url}/readyz`);
    expect(health.status).toBe(200);
    const status = await gatherStatus(service.db.sql, config);
    expect(status.chains.map((c) => c.chain_id)).toEqual([chain.chainId]);
    expect(status.keeper?.chains).toEqual([]);
    expect(status.attention.filter((a) => /keeper/.test(a))).toEqual([]);
  });

  test("a database indexed without a processor refuses one configured later (its history would be missing)", async () => {
    const indexer = createIndexer({
      sql: service.db.sql,
      client: publicClientFor(chain.rpcUrl),
      config: {
        PROCESSOR_ADDRESS: chain.processor,
        START_BLOCK: Number(chain.startBlock),
        CONFIRMATIONS: 0,
        POLL_INTERVAL_MS: 50,
        chainId: chain.chainId,
      },
    });
    await expect(indexer.start()).rejects.toThrow(/indexes no processor on chain \d+, not processor 0x/);
    await indexer.stop();
  });
});
