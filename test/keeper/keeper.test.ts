/**
 * The keeper against a real anvil chain and the real indexer: first charges, the retry schedule with time travel,
 * the grace cut-off, two keepers side by side, nonce resync, RPC outages, one sender per key and the attempt cap.
 */
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { createPublicClient, createWalletClient, http, maxUint256, type Address, type Hash } from "viem";
import { publicClientFor } from "../../src/chain/clients";
import { subscriptionModuleAbi, testTokenAbi } from "../../src/chain/abis";
import { createDb, type Db } from "../../src/db/client";
import { createNotifier } from "../../src/db/notify";
import { createIndexer } from "../../src/indexer";
import { createKeeper, type Keeper, type KeeperOptions } from "../../src/keeper";
import { createLogger } from "../../src/common/log";
import { accounts } from "../../testkit/accounts";
import { createTestChain, type TestChain, type WalletName } from "../../testkit/chain";
import { morePasses } from "../../testkit/cli";
import { testIndexer } from "../../testkit/indexer";
import { createTestDb, testDbKind } from "../../testkit/db";

const LONG = 1; // plan: 30-day interval, for tests without time travel
const SHORT = 2; // plan: 1000 s interval, 500 s grace, for the retry tests
const LONG_B = 3;

let chain: TestChain;
let db: Db;
let token: Address;
let module: Address;
let indexer: ReturnType<typeof createIndexer>;
const keepers: Keeper[] = [];

beforeAll(async () => {
  chain = await createTestChain();
  db = await createTestDb();
  token = await chain.deployToken({ symbol: "USDC", decimals: 6 });
  module = await chain.createModule("merchant");
  await chain.createPlan("merchant", module, {
    planId: LONG,
    token,
    amount: 1_000_000n,
    interval: 30 * 86_400,
    gracePeriod: 86_400,
  });
  await chain.createPlan("merchant", module, {
    planId: SHORT,
    token,
    amount: 1_000_000n,
    interval: 1000,
    gracePeriod: 500,
  });
  await chain.createPlan("merchant", module, { planId: LONG_B, token, amount: 2_000_000n, interval: 30 * 86_400 });
  await chain.send(
    chain
      .wallet("deployer")
      .writeContract({ ...chain.processorContract, functionName: "setKeeper", args: [accounts.keeper2.address, true] }),
  );
  indexer = testIndexer(db, chain, { pollMs: 100, notifier: createNotifier(db), log: () => {} });
  await indexer.start();
}, 60_000);

afterAll(async () => {
  await Promise.all(keepers.map((k) => k.stop()));
  await indexer?.stop();
  await db?.close();
  await chain?.stop();
}, 60_000);

function keeperConfig(retrySchedule: number[]): KeeperOptions["config"] {
  return { chainId: chain.chainId, PROCESSOR_ADDRESS: chain.processor, POLL_INTERVAL_MS: 200, retrySchedule };
}

function makeKeeper(name: "keeper" | "keeper2", retrySchedule: number[], extra: Partial<KeeperOptions> = {}): Keeper {
  const keeper = createKeeper({
    sql: db.sql,
    client: publicClientFor(chain.rpcUrl),
    wallet: chain.wallet(name),
    config: keeperConfig(retrySchedule),
    log: () => {},
    ...extra,
  });
  keepers.push(keeper);
  return keeper;
}

/** Waits until the indexer has committed the chain's current head. */
async function synced() {
  await indexer.waitForBlock(await chain.publicClient.getBlockNumber());
}

async function until<T>(what: string, fn: () => Promise<T | undefined | false>, timeoutMs = 15_000): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  while (Date.now() < deadline) {
    const v = await fn();
    if (v) return v;
    await Bun.sleep(50);
  }
  throw new Error(`timed out waiting for ${what}`);
}

async function sub(id: bigint) {
  const [row] = await db.sql<{ times_executed: string; last_paid_at: string }[]>`
    select times_executed::text as times_executed, last_paid_at::text as last_paid_at
    from subscriptions where chain_id = ${chain.chainId} and subscription_id = ${id.toString()}`;
  return row;
}

async function activity(id: bigint) {
  return db.sql<{ type: string; reason: string | null; keeper: string | null; block_number: string }[]>`
    select type, reason, keeper, block_number::text as block_number from activity
    where chain_id = ${chain.chainId} and subscription_id = ${id.toString()}
    order by block_number, log_index`;
}

/** Waits for a sent charge to be mined and indexed; returns its block timestamp. */
async function minedAndIndexed(hash: Hash): Promise<bigint> {
  const receipt = await chain.publicClient.waitForTransactionReceipt({ hash, pollingInterval: 20 });
  expect(receipt.status).toBe("success");
  await indexer.waitForBlock(receipt.blockNumber);
  return (await chain.publicClient.getBlock({ blockNumber: receipt.blockNumber })).timestamp;
}

async function approve(name: WalletName, amount: bigint) {
  await chain.send(
    chain
      .wallet(name)
      .writeContract({ address: token, abi: testTokenAbi, functionName: "approve", args: [chain.processor, amount] }),
  );
}

/** Subscriber cancels, so later tests' time travel never makes this subscription due again. */
async function cancel(name: WalletName, id: bigint) {
  await chain.send(
    chain
      .wallet(name)
      .writeContract({ address: module, abi: subscriptionModuleAbi, functionName: "cancel", args: [id] }),
  );
}

describe("keeper", () => {
  test("waits while an initial backfill's indexes are deferred: the index shows the past", async () => {
    const keeper = makeKeeper("keeper", [3600]);
    await chain.fund("alice", token, 10_000_000n);
    const id = await chain.subscribe("alice", module, LONG);
    await synced();
    await db.sql`insert into deferred_indexes (name, definition)
      values ('keeper_test_idx', 'CREATE INDEX keeper_test_idx ON public.plans USING btree (token)')`;
    try {
      const waiting = await keeper.tick();
      expect(waiting.due).toBe(0);
      expect(waiting.sent).toHaveLength(0);
    } finally {
      await db.sql`delete from deferred_indexes where name = 'keeper_test_idx'`;
    }
    const r = await keeper.tick();
    expect(r.sent.map((s) => s.subscriptionId)).toEqual([id.toString()]);
    await minedAndIndexed(r.sent[0]!.hash);
    await keeper.stop();
    await cancel("alice", id);
  }, 60_000);

  test("a new subscription is charged within one poll: PENDING turns ACTIVE on its own", async () => {
    const keeper = makeKeeper("keeper", [3600]);
    await keeper.start();
    await chain.fund("alice", token, 10_000_000n);
    const id = await chain.subscribe("alice", module, LONG);
    const row = await until("the first charge to be indexed", async () => {
      const r = await sub(id);
      return r && r.times_executed === "1" ? r : undefined;
    });
    expect(BigInt(row.last_paid_at)).toBeGreaterThan(0n);
    const records = await activity(id);
    expect(records.map((r) => [r.type, r.keeper])).toEqual([["CHARGE", accounts.keeper.address.toLowerCase()]]);
    await keeper.stop();
    await cancel("alice", id);
  }, 60_000);

  test("a failing subscription is retried on the schedule and recovers after approval", async () => {
    const keeper = makeKeeper("keeper", [100, 200]);
    await chain.fund("bob", token, 10_000_000n, 0n);
    const id = await chain.subscribe("bob", module, SHORT);
    await synced();
    const sentFor = (r: { sent: { subscriptionId: string; hash: Hash }[] }) =>
      r.sent.find((s) => s.subscriptionId === id.toString());

    // 1st attempt at once, then 100 s, 200 s, 200 s (the last delay repeats) after each failure.
    let failedAt = await minedAndIndexed(sentFor(await keeper.tick())!.hash);
    for (const delay of [100n, 200n, 200n]) {
      expect(sentFor(await keeper.tick())).toBeUndefined();
      await chain.mineAt(failedAt + delay - 30n);
      await synced();
      expect(sentFor(await keeper.tick())).toBeUndefined();
      await chain.mineAt(failedAt + delay);
      await synced();
      const sent = sentFor(await keeper.tick());
      expect(sent).toBeDefined();
      failedAt = await minedAndIndexed(sent!.hash);
    }
    let records = await activity(id);
    expect(records.map((r) => `${r.type}:${r.reason}`)).toEqual(Array(4).fill("FAIL:InsufficientAllowance"));
    expect(new Set(records.map((r) => r.keeper))).toEqual(new Set([accounts.keeper.address.toLowerCase()]));

    await approve("bob", maxUint256);
    await chain.mineAt(failedAt + 200n);
    await synced();
    await minedAndIndexed(sentFor(await keeper.tick())!.hash);
    records = await activity(id);
    expect(records.map((r) => r.type)).toEqual(["FAIL", "FAIL", "FAIL", "FAIL", "CHARGE"]);
    expect((await sub(id))!.times_executed).toBe("1");
    await keeper.stop();
    await cancel("bob", id);
  }, 60_000);

  test("retries stop once a paid subscription is past its grace period", async () => {
    const keeper = makeKeeper("keeper", [100, 200]);
    await chain.fund("carol", token, 10_000_000n);
    const id = await chain.subscribe("carol", module, SHORT);
    await synced();
    const sentFor = (r: { sent: { subscriptionId: string; hash: Hash }[] }) =>
      r.sent.find((s) => s.subscriptionId === id.toString());
    const paidAt = await minedAndIndexed(sentFor(await keeper.tick())!.hash);
    await approve("carol", 0n);

    // Due at paidAt + 1000, grace until paidAt + 1500.
    await chain.mineAt(paidAt + 1000n);
    await synced();
    const fail1 = await minedAndIndexed(sentFor(await keeper.tick())!.hash);
    await chain.mineAt(fail1 + 100n);
    await synced();
    await minedAndIndexed(sentFor(await keeper.tick())!.hash);
    // The schedule would allow a third attempt 200 s later, but by then the grace period is over.
    await chain.mineAt(paidAt + 1501n);
    await synced();
    expect(sentFor(await keeper.tick())).toBeUndefined();
    expect((await activity(id)).map((r) => `${r.type}:${r.reason}`)).toEqual([
      "CHARGE:null",
      "FAIL:InsufficientAllowance",
      "FAIL:InsufficientAllowance",
    ]);
    await keeper.stop();
    await cancel("carol", id);
  }, 60_000);

  test("two keepers charge each due subscription exactly once and never send a reverting transaction", async () => {
    const fromBlock = (await chain.publicClient.getBlockNumber()) + 1n;
    const a = makeKeeper("keeper", [3600]);
    const b = makeKeeper("keeper2", [3600]);
    await Promise.all([a.start(), b.start()]);
    const payers: WalletName[] = ["alice", "bob", "carol", "dave", "erin"];
    for (const name of payers) await chain.fund(name, token, 100_000_000n);
    const ids: bigint[] = [];
    for (const name of payers) {
      ids.push(await chain.subscribe(name, module, LONG));
      ids.push(await chain.subscribe(name, module, LONG_B));
    }
    // One that cannot pay: both keepers see it due, only one failure may be recorded.
    await chain.fund("merchant2", token, 100_000_000n, 0n);
    const failing = await chain.subscribe("merchant2", module, LONG);

    await until("every subscription to be charged", async () => {
      const rows = await db.sql<{ n: number }[]>`
        select count(*)::int as n from subscriptions
        where chain_id = ${chain.chainId} and times_executed = 1
          and subscription_id in ${db.sql(ids.map(String))}`;
      return rows[0]!.n === ids.length;
    });
    await until("the failing charge to be indexed", async () => (await activity(failing)).length > 0);
    // Several more polls of both keepers: nothing else may be sent.
    await morePasses(3, a, b);
    await Promise.all([a.stop(), b.stop()]);
    await synced();

    for (const id of ids) expect((await activity(id)).map((r) => r.type)).toEqual(["CHARGE"]);
    expect((await activity(failing)).map((r) => `${r.type}:${r.reason}`)).toEqual(["FAIL:InsufficientAllowance"]);

    const keeperAddrs = new Set([accounts.keeper.address.toLowerCase(), accounts.keeper2.address.toLowerCase()]);
    const head = await chain.publicClient.getBlockNumber();
    const sent: Hash[] = [];
    for (let n = fromBlock; n <= head; n++) {
      const block = await chain.publicClient.getBlock({ blockNumber: n, includeTransactions: true });
      for (const tx of block.transactions) if (keeperAddrs.has(tx.from.toLowerCase())) sent.push(tx.hash);
    }
    expect(sent).toHaveLength(ids.length + 1);
    for (const hash of sent) {
      expect((await chain.publicClient.getTransactionReceipt({ hash })).status).toBe("success");
    }
    for (const [i, name] of payers.entries()) {
      await cancel(name, ids[2 * i]!);
      await cancel(name, ids[2 * i + 1]!);
    }
    await cancel("merchant2", failing);
  }, 60_000);

  test("a keeper on a stale index simulates first and skips what others already did", async () => {
    // A second database whose indexer is stopped: its view of the chain freezes, like a lagging keeper elsewhere.
    const staleDb = await createTestDb();
    const staleIndexer = testIndexer(staleDb, chain, { pollMs: 100 });
    try {
      await chain.fund("erin", token, 10_000_000n);
      const paid = await chain.subscribe("erin", module, LONG);
      const paused = await chain.subscribe("erin", module, LONG_B);
      await chain.fund("merchant2", token, 10_000_000n, 0n);
      const unpayable = await chain.subscribe("merchant2", module, LONG);
      await staleIndexer.start();
      await staleIndexer.waitForBlock(await chain.publicClient.getBlockNumber());
      await staleIndexer.stop();

      // Meanwhile on chain: the merchant charges one, the subscriber pauses another, and a failure is recorded.
      await chain.charge(module, paid, "merchant");
      await chain.send(
        chain
          .wallet("erin")
          .writeContract({ address: module, abi: subscriptionModuleAbi, functionName: "pause", args: [paused] }),
      );
      await chain.charge(module, unpayable, "keeper2");

      const stale = createKeeper({
        sql: staleDb.sql,
        client: publicClientFor(chain.rpcUrl),
        wallet: chain.wallet("keeper"),
        config: {
          chainId: chain.chainId,
          PROCESSOR_ADDRESS: chain.processor,
          POLL_INTERVAL_MS: 200,
          retrySchedule: [3600],
        },
      });
      const before = await chain.publicClient.getTransactionCount({ address: accounts.keeper.address });
      const r = await stale.tick();
      expect(r.due).toBe(3);
      expect(r.sent).toEqual([]);
      expect(Object.fromEntries(r.skipped.map((s) => [s.subscriptionId, s.reason]))).toEqual({
        [paid.toString()]: "NotDue",
        [paused.toString()]: "NotChargeable",
        [unpayable.toString()]: "failure_already_recorded",
      });
      expect(await chain.publicClient.getTransactionCount({ address: accounts.keeper.address })).toBe(before);
      await stale.stop();
      await synced();
      await cancel("erin", paid);
      await cancel("erin", paused);
      await cancel("merchant2", unpayable);
    } finally {
      await staleIndexer.stop();
      await staleDb.close();
    }
  }, 60_000);

  test("a key the protocol owner did not allow sends nothing and says why", async () => {
    const warnings: string[] = [];
    const outsider = createKeeper({
      sql: db.sql,
      client: publicClientFor(chain.rpcUrl),
      wallet: chain.wallet("carol"),
      config: {
        chainId: chain.chainId,
        PROCESSOR_ADDRESS: chain.processor,
        POLL_INTERVAL_MS: 200,
        retrySchedule: [3600],
      },
      log: createLogger("warn", (l) => warnings.push(l)),
    });
    await chain.fund("dave", token, 10_000_000n);
    const id = await chain.subscribe("dave", module, LONG);
    await synced();
    const before = await chain.publicClient.getTransactionCount({ address: accounts.carol.address });
    const r = await outsider.tick();
    expect(r.sent).toEqual([]);
    expect(r.skipped).toEqual([{ module: module.toLowerCase(), subscriptionId: id.toString(), reason: "NotKeeper" }]);
    expect(await chain.publicClient.getTransactionCount({ address: accounts.carol.address })).toBe(before);
    await outsider.tick();
    expect(warnings.filter((w) => w.includes("NotKeeper"))).toHaveLength(1);
    await outsider.stop();
    await cancel("dave", id);
  }, 60_000);

  test("resyncs its nonce after a transaction it did not send", async () => {
    const keeper = makeKeeper("keeper", [3600]);
    await chain.fund("dave", token, 10_000_000n);
    const first = await chain.subscribe("dave", module, LONG);
    await synced();
    const r1 = await keeper.tick();
    expect(r1.sent.map((s) => s.subscriptionId)).toEqual([first.toString()]);
    await minedAndIndexed(r1.sent[0]!.hash);

    // The same key used elsewhere moves the account nonce past the keeper's local count.
    await chain.send(chain.wallet("keeper").sendTransaction({ to: accounts.keeper.address, value: 0n }));
    const second = await chain.subscribe("dave", module, LONG_B);
    await synced();
    const r2 = await keeper.tick();
    expect(r2.sent).toHaveLength(0);
    expect(r2.errors).toBe(1);
    const r3 = await keeper.tick();
    expect(r3.sent.map((s) => s.subscriptionId)).toEqual([second.toString()]);
    await minedAndIndexed(r3.sent[0]!.hash);
    expect((await sub(second))!.times_executed).toBe("1");
    await keeper.stop();
    await cancel("dave", first);
    await cancel("dave", second);
  }, 60_000);

  test("after a reorg drops a mined charge, its nonce is free again: the next charges go out at once, not behind a gap", async () => {
    const keeper = makeKeeper("keeper", [3600]);
    try {
      await chain.fund("erin", token, 10_000_000n);
      await synced();
      const snap = await chain.snapshot();
      const first = await chain.subscribe("erin", module, LONG);
      await synced();
      const r1 = await keeper.tick();
      expect(r1.sent.map((s) => s.subscriptionId)).toEqual([first.toString()]);
      await minedAndIndexed(r1.sent[0]!.hash);
      await keeper.tick(); // the receipt is seen: the charge counts as mined
      // The branch with the subscription and its charge is dropped; the new one has another subscription.
      await chain.revert(snap);
      const second = await chain.subscribe("erin", module, LONG_B);
      for (let i = 0; i < 3; i++) await chain.mineAt(Number(await chain.now()) + 1);
      await until("the new branch to be indexed", async () => {
        const [r] = await db.sql<{ plan_id: string }[]>`
          select plan_id::text from subscriptions where chain_id = ${chain.chainId} and subscription_id = ${second.toString()}`;
        return r?.plan_id === String(LONG_B);
      });
      const r2 = await keeper.tick();
      expect(r2.sent.map((s) => s.subscriptionId)).toEqual([second.toString()]);
      await minedAndIndexed(r2.sent[0]!.hash);
      expect((await sub(second))!.times_executed).toBe("1");
      await cancel("erin", second);
    } finally {
      await keeper.stop();
    }
  }, 60_000);

  /**
   * A keeper whose node goes through a proxy the test can take down (503s), the warnings it logs, and the JSON-RPC
   * methods the proxy was asked for (answered or not), in order.
   */
  function keeperBehindProxy() {
    const node = { down: false, calls: [] as string[] };
    const proxy = Bun.serve({
      port: 0,
      hostname: "127.0.0.1",
      fetch: async (req) => {
        const body = await req.text();
        const parsed = JSON.parse(body) as { method: string } | { method: string }[];
        for (const call of [parsed].flat()) node.calls.push(call.method);
        if (node.down) return new Response("unavailable", { status: 503 });
        return fetch(chain.rpcUrl, { method: "POST", headers: { "content-type": "application/json" }, body });
      },
    });
    const proxyUrl = `http://127.0.0.1:${proxy.port}`;
    const warnings: string[] = [];
    const keeper = makeKeeper("keeper", [3600], {
      client: createPublicClient({ transport: http(proxyUrl, { retryCount: 0 }), cacheTime: 0 }),
      wallet: createWalletClient({
        chain: chain.wallet("keeper").chain,
        transport: http(proxyUrl, { retryCount: 0 }),
        account: accounts.keeper,
      }),
      log: createLogger("warn", (l) => warnings.push(l)),
    });
    return { keeper, node, warnings, stopProxy: () => proxy.stop(true) };
  }

  test("survives an RPC outage and charges once the node answers again", async () => {
    const { keeper, node, warnings, stopProxy } = keeperBehindProxy();
    try {
      node.down = true;
      await keeper.start();
      await chain.fund("erin", token, 10_000_000n);
      const id = await chain.subscribe("erin", module, LONG);
      await synced();
      await until("the keeper to report failing passes", async () =>
        warnings.some((w) => w.includes("keeper pass failed")),
      );
      expect((await sub(id))!.times_executed).toBe("0");
      node.down = false;
      await until("the charge after the outage", async () => (await sub(id))?.times_executed === "1", 30_000);
      await keeper.stop();
      await cancel("erin", id);
    } finally {
      await stopProxy();
    }
  }, 60_000);

  test("stopping while the node is gone takes one round of receipt lookups, not the whole drain", async () => {
    const { keeper, node, warnings, stopProxy } = keeperBehindProxy();
    try {
      await chain.fund("erin", token, 10_000_000n);
      const id = await chain.subscribe("erin", module, LONG);
      await synced();
      const r = await keeper.tick();
      expect(r.sent.map((s) => s.subscriptionId)).toEqual([id.toString()]);
      node.down = true; // the charge is sent, its receipt not yet seen: stop would ask for it again for up to 5 s
      const before = node.calls.length;
      await keeper.stop();
      // Counted, not timed: one receipt lookup for the one charge in flight, then no more RPC calls at all.
      expect(node.calls.slice(before)).toEqual(["eth_getTransactionReceipt"]);
      expect(warnings.filter((w) => w.includes("receipt lookup failed")).length).toBe(1);
      node.down = false;
      await until("the charge to be indexed", async () => (await sub(id))?.times_executed === "1");
      await cancel("erin", id);
    } finally {
      await stopProxy();
    }
  }, 60_000);

  test("two instances with one key: only the lock holder sends, the other takes over when it stops", async () => {
    // Postgres: the second instance has its own connection pool, as another process would; PGlite has one session.
    const otherDb = testDbKind === "postgres" ? await createDb({ url: db.url, max: 2 }) : undefined;
    const logs = { a: [] as string[], b: [] as string[] };
    const a = makeKeeper("keeper", [3600], { log: createLogger("info", (l) => logs.a.push(l)) });
    const b = makeKeeper("keeper", [3600], {
      sql: otherDb?.sql ?? db.sql,
      log: createLogger("info", (l) => logs.b.push(l)),
    });
    const said = (lines: string[], msg: string) => lines.filter((l) => l.includes(`"msg":"${msg}`)).length;
    try {
      await a.start();
      await until("the first instance to take the lock", async () => said(logs.a, "keeper holds its key's lock") > 0);
      await b.start();
      await until("the second instance to stand by", async () => said(logs.b, "keeper is a standby") > 0);
      const payers: WalletName[] = ["alice", "bob", "carol", "dave", "erin"];
      const ids: [WalletName, bigint][] = [];
      for (const name of payers) {
        await chain.fund(name, token, 100_000_000n);
        ids.push(
          [name, await chain.subscribe(name, module, LONG)],
          [name, await chain.subscribe(name, module, LONG_B)],
        );
      }
      await until("every subscription to be charged", async () => {
        for (const [, id] of ids) if ((await sub(id))?.times_executed !== "1") return false;
        return true;
      });
      await morePasses(3, a, b);
      expect(said(logs.a, "charge sent")).toBe(ids.length);
      expect(said(logs.b, "charge sent")).toBe(0);

      // The holder goes: the standby takes the lock and charges what comes next.
      await a.stop();
      await chain.fund("merchant2", token, 100_000_000n);
      const late = await chain.subscribe("merchant2", module, LONG);
      await until("the standby to charge", async () => (await sub(late))?.times_executed === "1");
      expect(said(logs.b, "keeper holds its key's lock")).toBe(1);
      expect(said(logs.b, "charge sent")).toBe(1);
      for (const lines of [logs.a, logs.b]) {
        expect(said(lines, "charge attempt failed") + said(lines, "keeper pass failed")).toBe(0);
      }
      for (const [, id] of [...ids, ["merchant2", late] as const]) {
        expect((await activity(id)).map((r) => r.type)).toEqual(["CHARGE"]);
      }
      for (const [name, id] of [...ids, ["merchant2", late] as const]) await cancel(name, id);
    } finally {
      await a.stop();
      await b.stop();
      await otherDb?.close();
    }
  }, 60_000);

  test("a never-paid subscription stops after KEEPER_MAX_ATTEMPTS and is only re-simulated until it can pay", async () => {
    const keeper = makeKeeper("keeper", [100, 200], {
      config: { ...keeperConfig([100, 200]), maxAttempts: 2, recheckIntervalS: 1000 },
    });
    await chain.fund("bob", token, 10_000_000n, 0n);
    const id = await chain.subscribe("bob", module, SHORT);
    await synced();
    const sentFor = (r: { sent: { subscriptionId: string; hash: Hash }[] }) =>
      r.sent.find((s) => s.subscriptionId === id.toString());
    const fail1 = await minedAndIndexed(sentFor(await keeper.tick())!.hash);
    await chain.mineAt(fail1 + 100n);
    await synced();
    const fail2 = await minedAndIndexed(sentFor(await keeper.tick())!.hash);
    const nonce = () => chain.publicClient.getTransactionCount({ address: accounts.keeper.address });
    const sentBefore = await nonce();

    // The schedule would allow a third attempt 200 s later: two attempts are the cap.
    await chain.mineAt(fail2 + 200n);
    await synced();
    expect(sentFor(await keeper.tick())).toBeUndefined();
    // After the recheck interval it is simulated (free) and, still failing, not sent.
    await chain.mineAt(fail2 + 1000n);
    await synced();
    const recheck = await keeper.tick();
    expect(recheck.skipped).toContainEqual({
      module: module.toLowerCase(),
      subscriptionId: `${id}`,
      reason: "attempts_exhausted",
    });
    // approve() is not an indexed event: nothing happens until the next recheck, which sends the charge.
    await approve("bob", maxUint256);
    await synced();
    const early = await keeper.tick();
    expect(sentFor(early)).toBeUndefined();
    expect(early.skipped.map((s) => s.subscriptionId)).not.toContain(`${id}`);
    expect(await nonce()).toBe(sentBefore);
    await chain.mineAt(BigInt(recheck.now) + 1000n);
    await synced();
    await minedAndIndexed(sentFor(await keeper.tick())!.hash);
    expect((await activity(id)).map((r) => `${r.type}:${r.reason}`)).toEqual([
      "FAIL:InsufficientAllowance",
      "FAIL:InsufficientAllowance",
      "CHARGE:null",
    ]);
    await keeper.stop();
    await cancel("bob", id);
  }, 60_000);
});
