/**
 * A charge is on its claim before the node has it, and what a new holder of the key does with the claims a dead
 * holder left: real anvil, the real indexer, an RPC proxy that holds `eth_sendRawTransaction` while the test looks.
 */
import { afterAll, beforeAll, expect, test } from "bun:test";
import {
  createWalletClient,
  encodeFunctionData,
  http,
  keccak256,
  parseGwei,
  TransactionNotFoundError,
  TransactionReceiptNotFoundError,
  type Address,
  type Hash,
  type Hex,
} from "viem";
import { subscriptionProcessorAbi } from "../../src/chain/abis";
import { publicClientFor } from "../../src/chain/clients";
import { createLogger } from "../../src/common/log";
import type { Db } from "../../src/db/client";
import { createIndexer } from "../../src/indexer";
import { createKeeper, type Keeper, type KeeperConfig, type KeeperOptions } from "../../src/keeper";
import { accounts } from "../../testkit/accounts";
import { createTestChain, type TestChain } from "../../testkit/chain";
import { until } from "../../testkit/cli";
import { testIndexer } from "../../testkit/indexer";
import { createTestDb, testDbKind } from "../../testkit/db";
import { startRpcProxy, type RpcProxy } from "../../testkit/rpc-proxy";

let chain: TestChain;
let db: Db;
let token: Address;
let module: Address;
let proxy: RpcProxy;
let indexer: ReturnType<typeof createIndexer>;
const keepers: Keeper[] = [];

beforeAll(async () => {
  chain = await createTestChain();
  db = await createTestDb();
  token = await chain.deployToken();
  module = await chain.createModule("merchant");
  await chain.createPlan("merchant", module, { planId: 1, token, amount: 1_000_000n, interval: 30 * 86_400 });
  proxy = startRpcProxy(chain.rpcUrl);
  indexer = testIndexer(db, chain, { pollMs: 100 });
  await indexer.start();
}, 60_000);

afterAll(async () => {
  for (const h of proxy?.held ?? []) h.drop();
  for (const k of keepers) await k.stop().catch(() => {});
  await indexer?.stop();
  proxy?.stop();
  await db?.close();
  await chain?.stop();
}, 60_000);

/** A keeper whose node (reads and broadcasts) is behind the proxy. */
function keeperViaProxy(extra: Partial<KeeperOptions> = {}, config: Partial<KeeperConfig> = {}): Keeper {
  const keeper = createKeeper({
    sql: db.sql,
    client: publicClientFor(proxy.url),
    wallet: createWalletClient({
      chain: chain.wallet("keeper").chain,
      transport: http(proxy.url, { retryCount: 0 }),
      account: accounts.keeper,
    }),
    config: {
      chainId: chain.chainId,
      PROCESSOR_ADDRESS: chain.processor,
      POLL_INTERVAL_MS: 100,
      retrySchedule: [3600],
      ...config,
    },
    ...extra,
  });
  keepers.push(keeper);
  return keeper;
}

async function dueSubscription(name: "alice" | "bob" | "carol" | "dave" | "erin"): Promise<bigint> {
  await chain.fund(name, token, 10_000_000n);
  const id = await chain.subscribe(name, module, 1);
  await indexer.waitForBlock(await chain.publicClient.getBlockNumber());
  return id;
}

async function claimOf(id: bigint | number) {
  const [row] = await db.sql<{ owner: string; tx_hash: string | null; tx_nonce: string | null }[]>`
    select owner, tx_hash, tx_nonce::text as tx_nonce from keeper_claims
    where chain_id = ${chain.chainId} and subscription_id = ${id.toString()}`;
  return row;
}

async function nodeHas(hash: Hash): Promise<boolean> {
  try {
    await chain.publicClient.getTransaction({ hash });
    return true;
  } catch (err) {
    expect(err).toBeInstanceOf(TransactionNotFoundError);
    return false;
  }
}

async function charges(id: bigint) {
  await indexer.waitForBlock(await chain.publicClient.getBlockNumber());
  const rows = await db.sql<{ type: string }[]>`
    select type from activity where chain_id = ${chain.chainId} and subscription_id = ${id.toString()}`;
  return rows.map((r) => r.type);
}

/** Runs `fn` with anvil mining only when told to; afterwards automine is back and one block mines what is pending. */
async function withoutAutomine(fn: () => Promise<void>): Promise<void> {
  await chain.testClient.setAutomine(false);
  try {
    await fn();
  } finally {
    await chain.testClient.setAutomine(true);
    await chain.testClient.mine({ blocks: 1 });
  }
}

/** What the keeper logged when it took over a dead holder's claims. */
const takeoverLine = (lines: string[]) =>
  lines.map((l) => JSON.parse(l)).find((l) => l.msg.startsWith("keeper took over the claims"));

const pendingNonce = () => chain.publicClient.getTransactionCount({ address: chain.keeper, blockTag: "pending" });

test(`a charge's hash and nonce are on its claim before the node has the transaction (${testDbKind})`, async () => {
  const keeper = keeperViaProxy();
  const id = await dueSubscription("alice");
  const nonce = await pendingNonce();
  proxy.hold("eth_sendRawTransaction");
  try {
    const ticking = keeper.tick();
    const held = await until("the keeper's broadcast", async () => proxy.held[0]);
    const hash = keccak256(held.params[0] as Hex);
    // The keeper waits on its broadcast: the claim already names the transaction, the node has never seen it.
    expect(await claimOf(id)).toMatchObject({ tx_hash: hash, tx_nonce: String(nonce) });
    expect(await nodeHas(hash)).toBe(false);
    await held.release();
    const r = await ticking;
    expect(r.sent).toEqual([{ module: module.toLowerCase(), subscriptionId: `${id}`, hash }]);
    expect((await chain.publicClient.waitForTransactionReceipt({ hash })).status).toBe("success");
    expect(await charges(id)).toEqual(["CHARGE"]);
  } finally {
    proxy.unhold("eth_sendRawTransaction");
    proxy.held.length = 0;
    await keeper.stop();
  }
}, 60_000);

test(`a broadcast whose answer is lost after the node took it counts as sent, not as failed (${testDbKind})`, async () => {
  const keeper = keeperViaProxy();
  const id = await dueSubscription("bob");
  proxy.hold("eth_sendRawTransaction");
  try {
    const ticking = keeper.tick();
    const held = await until("the keeper's broadcast", async () => proxy.held[0]);
    await held.forward();
    held.drop(); // the keeper gets a 503 for a transaction the node has
    const r = await ticking;
    const hash = keccak256(held.params[0] as Hex);
    expect(r.errors).toBe(0);
    expect(r.sent.map((s) => s.hash)).toEqual([hash]);
    expect(keeper.inFlight()).toBe(1);
    expect((await claimOf(id))?.tx_hash).toBe(hash);
    expect((await chain.publicClient.waitForTransactionReceipt({ hash })).status).toBe("success");
    expect(await charges(id)).toEqual(["CHARGE"]);
  } finally {
    proxy.unhold("eth_sendRawTransaction");
    proxy.held.length = 0;
    await keeper.stop();
  }
}, 60_000);

test(`a new holder of the key releases a dead holder's claims only when their transaction was never broadcast or can no longer be mined (${testDbKind})`, async () => {
  const dead = `${chain.keeper.toLowerCase()}:dead0001`;
  const otherKey = `${accounts.keeper2.address.toLowerCase()}:dead0002`;
  const unknownHash = (n: number) => `0x${n.toString(16).padStart(64, "f")}`;
  // A mined transaction of the key, and one pending at the next nonce (automine off).
  const mined = await chain.send(chain.wallet("keeper").sendTransaction({ to: chain.keeper, value: 0n }));
  await chain.testClient.setAutomine(false);
  try {
    const minedCount = await chain.publicClient.getTransactionCount({ address: chain.keeper, blockTag: "latest" });
    const pendingHash = await chain.wallet("keeper").sendTransaction({ to: chain.keeper, value: 0n });
    expect(await pendingNonce()).toBe(minedCount + 1);
    const claims: [number, string, string | null, number | null][] = [
      [9001, dead, null, null], // never signed
      [9002, dead, mined.transactionHash, minedCount - 1], // mined
      [9003, dead, pendingHash, minedCount], // pending
      [9004, dead, unknownHash(4), minedCount - 1], // unknown, its nonce taken by another: never minable
      [9005, dead, unknownHash(5), minedCount + 1], // unknown, its nonce free (the pending count): ours to take
      [9006, dead, unknownHash(6), minedCount], // unknown, its nonce held by the pending one: may be its version
      [9007, dead, unknownHash(7), null], // unknown, no nonce recorded (a claim from before 0026)
      [9008, otherKey, unknownHash(8), 0], // another key's: never this keeper's to judge
    ];
    for (const [id, owner, hash, nonce] of claims) {
      await db.sql`
        insert into keeper_claims (chain_id, subscription_id, owner, tx_hash, tx_nonce, expires_at)
        values (${chain.chainId}, ${id}, ${owner}, ${hash}, ${nonce}, now() + interval '1 hour')`;
    }
    const lines: string[] = [];
    const keeper = keeperViaProxy({ log: createLogger("info", (l) => lines.push(l)) });
    const r = await keeper.tick();
    expect(r.sent).toEqual([]);
    const left = await db.sql<{ id: number }[]>`
      select subscription_id::int as id from keeper_claims where chain_id = ${chain.chainId} and subscription_id >= 9000
      order by 1`;
    expect(left.map((c) => c.id)).toEqual([9002, 9003, 9006, 9007, 9008]);
    const said = takeoverLine(lines);
    // 9003's pending transaction is not a charge of subscription 9003: nothing to adopt.
    expect([said.unsent, said.released.sort(), said.adopted, said.kept.sort()]).toEqual([
      1,
      ["9004", "9005"],
      [],
      ["9002", "9003", "9006", "9007"],
    ]);
    await keeper.stop();
  } finally {
    await chain.testClient.setAutomine(true);
    await chain.testClient.mine({ blocks: 1 });
    await db.sql`delete from keeper_claims where subscription_id >= 9000`;
  }
}, 60_000);

test(`a new holder of the key adopts a dead holder's pending charge: replaced after the deadline, mined once, later charges not stuck behind it (${testDbKind})`, async () => {
  const id = await dueSubscription("carol");
  const dead = `${chain.keeper.toLowerCase()}:dead0003`;
  let clockMs = Date.now();
  const deadlineMs = 60_000;
  await withoutAutomine(async () => {
    // The dead holder's charge: on its claim (live for an hour) and pending on the node, never to be mined as it is.
    const nonce = await pendingNonce();
    const data = encodeFunctionData({ abi: subscriptionProcessorAbi, functionName: "charge", args: [module, id] });
    const deadHash = await chain.wallet("keeper").sendTransaction({ to: chain.processor, data, nonce });
    const deadTx = await chain.publicClient.getTransaction({ hash: deadHash });
    await db.sql`
      insert into keeper_claims (chain_id, subscription_id, owner, tx_hash, tx_nonce, expires_at)
      values (${chain.chainId}, ${id.toString()}, ${dead}, ${deadHash}, ${nonce}, now() + interval '1 hour')`;

    const lines: string[] = [];
    const keeper = keeperViaProxy(
      { log: createLogger("info", (l) => lines.push(l)), clock: () => clockMs },
      { txDeadlineMs: deadlineMs, maxFeePerGas: parseGwei("1000") },
    );
    const first = await keeper.tick();
    const said = takeoverLine(lines);
    expect(said).toMatchObject({ unsent: 0, released: [], adopted: [`${id}`], kept: [] });
    // Tracked as the new holder's own send: not charged again, its claim renewed for the new holder.
    expect(first.sent).toEqual([]);
    expect(first.skipped).toContainEqual({
      module: module.toLowerCase(),
      subscriptionId: `${id}`,
      reason: "in_flight",
    });
    expect(keeper.inFlight()).toBe(1);
    const claim = await claimOf(id);
    expect(claim).toMatchObject({ tx_hash: deadHash, tx_nonce: String(nonce) });
    expect(claim!.owner).not.toBe(dead);
    expect(claim!.owner.startsWith(`${chain.keeper.toLowerCase()}:`)).toBe(true);

    clockMs += deadlineMs + 1;
    const late = await keeper.tick();
    expect(late.replaced).toHaveLength(1);
    expect(late.replaced[0]).toMatchObject({ subscriptionId: `${id}`, nonce, replaced: deadHash });
    const replacement = late.replaced[0]!.hash;
    const replaced = await chain.publicClient.getTransaction({ hash: replacement });
    expect(replaced.nonce).toBe(nonce);
    expect(replaced.input).toBe(data);
    expect(replaced.maxFeePerGas! * 1000n).toBeGreaterThanOrEqual(deadTx.maxFeePerGas! * 1125n);
    expect(replaced.maxPriorityFeePerGas! * 1000n).toBeGreaterThanOrEqual(deadTx.maxPriorityFeePerGas! * 1125n);
    expect((await claimOf(id))?.tx_hash).toBe(replacement);

    await chain.testClient.mine({ blocks: 1 });
    expect((await chain.publicClient.getTransactionReceipt({ hash: replacement })).status).toBe("success");
    await expect(chain.publicClient.getTransactionReceipt({ hash: deadHash })).rejects.toBeInstanceOf(
      TransactionReceiptNotFoundError,
    );
    expect((await keeper.tick()).mined).toEqual([{ subscriptionId: `${id}`, hash: replacement, status: "success" }]);
    expect(await charges(id)).toEqual(["CHARGE"]);

    // The key's next charge takes the next nonce and is mined at once.
    await chain.testClient.setAutomine(true);
    const next = await dueSubscription("dave");
    const r = await keeper.tick();
    expect(r.sent.map((s) => s.subscriptionId)).toEqual([`${next}`]);
    const sent = await chain.publicClient.waitForTransactionReceipt({ hash: r.sent[0]!.hash });
    expect(sent.status).toBe("success");
    expect((await chain.publicClient.getTransaction({ hash: r.sent[0]!.hash })).nonce).toBe(nonce + 1);
    expect(await charges(next)).toEqual(["CHARGE"]);
    expect(await charges(id)).toEqual(["CHARGE"]);
    await keeper.stop();
  });
}, 60_000);

test(`a dead holder's replacement that never reached the node: the pending version before it is adopted and mined once (${testDbKind})`, async () => {
  const id = await dueSubscription("erin");
  const dead = `${chain.keeper.toLowerCase()}:dead0004`;
  await withoutAutomine(async () => {
    // The dead holder's charge is pending; it signed and recorded a replacement at the same nonce, then died.
    const nonce = await pendingNonce();
    const data = encodeFunctionData({ abi: subscriptionProcessorAbi, functionName: "charge", args: [module, id] });
    const firstHash = await chain.wallet("keeper").sendTransaction({ to: chain.processor, data, nonce });
    const neverSent = keccak256("0x0badc0de");
    await db.sql`
      insert into keeper_claims (chain_id, subscription_id, owner, tx_hash, tx_nonce, earlier_tx_hashes, expires_at)
      values (${chain.chainId}, ${id.toString()}, ${dead}, ${neverSent}, ${nonce}, ${[firstHash]}::text[],
        now() + interval '1 hour')`;

    const lines: string[] = [];
    const keeper = keeperViaProxy({ log: createLogger("info", (l) => lines.push(l)) });
    const first = await keeper.tick();
    const said = takeoverLine(lines);
    expect(said).toMatchObject({ unsent: 0, released: [], adopted: [`${id}`], kept: [] });
    expect(first.sent).toEqual([]);
    expect(keeper.inFlight()).toBe(1);
    expect(await claimOf(id)).toMatchObject({ tx_hash: firstHash, tx_nonce: String(nonce) });

    await chain.testClient.mine({ blocks: 1 });
    expect((await chain.publicClient.getTransactionReceipt({ hash: firstHash })).status).toBe("success");
    expect((await keeper.tick()).mined).toEqual([{ subscriptionId: `${id}`, hash: firstHash, status: "success" }]);
    expect(await charges(id)).toEqual(["CHARGE"]);
    await keeper.stop();
  });
}, 60_000);
