/**
 * The RPC budget of public on-chain checks (`mode=onchain|both`) against a real anvil behind a counting proxy that
 * can hold `eth_call`s: identical checks in flight share one call, and distinct calls beyond
 * ONCHAIN_CHECK_CONCURRENCY get a 503 `chain_busy` envelope with `Retry-After: 1` instead of a queue, and one
 * client (an address behind the trusted proxy) cannot take every slot. A spend permission's check (its Multicall3
 * read) takes its slot from the same budget.
 */
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import type { Address } from "viem";
import { testTokenAbi } from "../../../src/chain/abis";
import { createApp } from "../../../src/http/app";
import { createChainRegistry, publicClientFor } from "../../../src/chain/clients";
import type { Db } from "../../../src/db/client";
import { createTestDb } from "../../../testkit/db";
import { createTestChain, type TestChain, type WalletName } from "../../../testkit/chain";
import { request, testConfig, type Res } from "../../../testkit/app";
import { indexTo } from "../../../testkit/indexer";
import { TEST_ALLOWANCE, deploySpendPermissions, type SpendPermissionKit } from "../../../testkit/spend-permissions";

/** A JSON-RPC proxy that counts calls by method and holds `eth_call`s while `hold` is on. */
function countingProxy(target: string) {
  const counts: Record<string, number> = {};
  let held = 0;
  let release: () => void = () => {};
  let gate: Promise<void> | undefined;
  const server = Bun.serve({
    port: 0,
    hostname: "127.0.0.1",
    fetch: async (req) => {
      const text = await req.text();
      const body = JSON.parse(text) as { method: string };
      counts[body.method] = (counts[body.method] ?? 0) + 1;
      if (body.method === "eth_call" && gate) {
        held++;
        await gate;
        held--;
      }
      const upstream = await fetch(target, {
        method: "POST",
        headers: { "content-type": "application/json" },
        body: text,
      });
      return new Response(await upstream.text(), { headers: { "content-type": "application/json" } });
    },
  });
  return {
    url: `http://127.0.0.1:${server.port}`,
    calls: (method: string) => counts[method] ?? 0,
    held: () => held,
    hold: () => {
      gate = new Promise((resolve) => (release = resolve));
    },
    release: () => {
      gate = undefined;
      release();
    },
    stop: () => server.stop(true),
  };
}

let chain: TestChain;
let db: Db;
let proxy: ReturnType<typeof countingProxy>;
let app: ReturnType<typeof createApp>;
let module: Address;
let kit: SpendPermissionKit;
let spender: Address;
let spConfig: Record<string, string>;

beforeAll(async () => {
  chain = await createTestChain();
  db = await createTestDb();
  const token = await chain.deployToken();
  module = await chain.createModule("merchant");
  await chain.createPlan("merchant", module, { planId: 1, token, amount: 1_000_000n, interval: 86_400 });
  await chain.fund("alice", token, 100_000_000n);
  await chain.charge(module, await chain.subscribe("alice", module, 1));
  // A permission of alice and one of bob for the spender, both charged: ACTIVE, indexed.
  kit = await deploySpendPermissions(chain);
  spender = await kit.createAccount("merchant2", { managerOwner: false });
  for (const who of ["alice", "bob"] as const) {
    const account = await kit.createAccount(who);
    await chain.send(
      chain.wallet("deployer").writeContract({
        address: token,
        abi: testTokenAbi,
        functionName: "mint",
        args: [account, 50_000_000n],
      }),
    );
    const p = kit.permission({ account, spender, token, start: Number(await chain.now()) });
    await kit.executeAs("merchant2", spender, [
      kit.managerCall("approveWithSignature", [p, await kit.sign(who, p)]),
      kit.managerCall("spend", [p, TEST_ALLOWANCE]),
    ]);
    accountsOf.set(who, account);
  }
  const source = kit.source([spender]);
  await indexTo(db, chain, await chain.publicClient.getBlockNumber(), { spendPermissions: source });
  spConfig = { SPEND_PERMISSION_MANAGER: kit.manager, SPEND_PERMISSION_SPENDERS: spender };
  proxy = countingProxy(chain.rpcUrl);
  const config = testConfig({
    RPC_URL: proxy.url,
    CHAIN_ID: String(chain.chainId),
    ONCHAIN_CHECK_CONCURRENCY: "2",
    TRUSTED_PROXY_HOPS: "1",
    ...spConfig,
  });
  app = createApp({ sql: db.sql, config, chains: await createChainRegistry(config) });
}, 60_000);

afterAll(async () => {
  proxy?.stop();
  await db?.close();
  await chain?.stop();
});

/** The smart accounts holding alice's and bob's permissions. */
const accountsOf = new Map<WalletName, Address>();

/** A spend permission check of `wallet`'s smart account for the spender. */
const spCheck = (wallet: WalletName, client: string, to = app): Promise<Res> =>
  request(
    to,
    `/v0/auth/check?module_address=${kit.manager}&wallet=${accountsOf.get(wallet)}&spender=${spender}&mode=onchain`,
    { "x-forwarded-for": client },
  );

const check = (wallet: WalletName, mode = "onchain", client = "203.0.113.1"): Promise<Res> =>
  request(app, `/v0/auth/check?module_address=${module}&wallet=${chain.address(wallet)}&plan_ids=1&mode=${mode}`, {
    "x-forwarded-for": client,
  });

/** Waits until the proxy holds `n` calls (the checks have reached the chain). */
async function untilHeld(n: number): Promise<void> {
  for (let i = 0; i < 2_000 && proxy.held() < n; i++) await Bun.sleep(5);
  expect(proxy.held()).toBe(n);
}

describe("on-chain check budget", () => {
  test("identical checks in flight at the same time make one RPC call", async () => {
    const before = proxy.calls("eth_call");
    proxy.hold();
    const pending = [
      ...Array.from({ length: 15 }, () => check("alice")),
      ...Array.from({ length: 5 }, () => check("alice", "both")),
    ];
    await untilHeld(1);
    await Bun.sleep(50); // every request has long reached the checker: none of them does I/O before it
    proxy.release();
    const answers = await Promise.all(pending);
    for (const a of answers) {
      expect(a.status).toBe(200);
      expect(a.body.onchain).toEqual({ authorized: true, method: "isActive" });
    }
    expect(proxy.calls("eth_call") - before).toBe(1);
    // Not a cache: once answered, the next check calls the chain again.
    expect((await check("alice")).body.authorized).toBe(true);
    expect(proxy.calls("eth_call") - before).toBe(2);
  });

  test("distinct calls beyond ONCHAIN_CHECK_CONCURRENCY get a 503 chain_busy envelope with Retry-After: 1", async () => {
    const before = proxy.calls("eth_call");
    proxy.hold();
    const first = [check("alice"), check("bob", "onchain", "203.0.113.2")];
    await untilHeld(2);
    const busy = await check("carol");
    expect(busy.status).toBe(503);
    expect(busy.headers.get("retry-after")).toBe("1");
    expect(busy.body.error).toMatchObject({ type: "api_error", code: "chain_busy" });
    expect(busy.body.error.request_id).toMatch(/^req_/);
    expect((await check("carol", "both")).status).toBe(503);
    // A check identical to one in flight joins it: no slot needed.
    const joined = check("bob", "onchain", "203.0.113.3");
    proxy.release();
    const answers = await Promise.all([...first, joined]);
    expect(answers.map((a) => [a.status, a.body.authorized])).toEqual([
      [200, true],
      [200, false],
      [200, false],
    ]);
    expect(proxy.calls("eth_call") - before).toBe(2);
    // The slots are free again.
    expect((await check("carol")).status).toBe(200);
  });

  test("one client holds at most its share of the slots: another client's check still gets a slot", async () => {
    proxy.hold();
    const greedy = check("alice", "onchain", "198.51.100.1");
    await untilHeld(1);
    // Half of ONCHAIN_CHECK_CONCURRENCY (2) is in this client's hands: its next distinct check is refused…
    const refused = await check("bob", "onchain", "198.51.100.1");
    expect(refused.status).toBe(503);
    expect(refused.body.error.code).toBe("chain_busy");
    expect(refused.body.error.message).toContain("share");
    // …and another client's takes the slot left.
    const other = check("carol", "onchain", "198.51.100.2");
    await untilHeld(2);
    proxy.release();
    expect((await greedy).status).toBe(200);
    expect((await other).status).toBe(200);
  });

  test("a spend permission check takes its slot within the client's share and the chain's cap", async () => {
    const before = proxy.calls("eth_call");
    proxy.hold();
    const greedy = check("alice", "onchain", "198.51.100.7");
    await untilHeld(1);
    // The same client's permission check is refused: it already holds its share (half of 2).
    const refused = await spCheck("alice", "198.51.100.7");
    expect(refused.status).toBe(503);
    expect(refused.body.error.code).toBe("chain_busy");
    expect(refused.body.error.message).toContain("share");
    // Another client's permission check takes the last slot; a third client finds the chain at its cap.
    const other = spCheck("alice", "198.51.100.8");
    await untilHeld(2);
    const busy = await spCheck("bob", "198.51.100.9");
    expect(busy.status).toBe(503);
    expect(busy.body.error.code).toBe("chain_busy");
    // An identical permission check joins the one in flight.
    const joined = spCheck("alice", "198.51.100.10");
    proxy.release();
    for (const r of [await greedy, await other, await joined]) expect(r.status).toBe(200);
    expect((await other).body.onchain).toEqual({ authorized: true, method: "isValid+getLastUpdatedPeriod" });
    expect((await joined).body).toEqual((await other).body);
    expect(proxy.calls("eth_call") - before).toBe(2);
  });

  test("the checks use their own client, not the registry's shared one (the indexer's)", async () => {
    const config = testConfig({ RPC_URL: proxy.url, CHAIN_ID: String(chain.chainId), ...spConfig });
    const registry = await createChainRegistry(config);
    const dead = publicClientFor("http://127.0.0.1:9", 500);
    const own = createApp({ sql: db.sql, config, chains: { ...registry, get: () => dead } });
    const before = proxy.calls("eth_call");
    const res = await request(
      own,
      `/v0/auth/check?module_address=${module}&wallet=${chain.address("alice")}&plan_ids=1&mode=onchain`,
      {},
    );
    expect(res.status).toBe(200);
    expect(res.body.authorized).toBe(true);
    expect(proxy.calls("eth_call") - before).toBe(1);
    // A spend permission check too.
    const sp = await spCheck("bob", "203.0.113.50", own);
    expect(sp.status).toBe(200);
    expect(sp.body.authorized).toBe(true);
    expect(proxy.calls("eth_call") - before).toBe(2);
  });
});
