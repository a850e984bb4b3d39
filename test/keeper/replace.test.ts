/**
 * Slow transactions on anvil with automine off: a charge not mined within the deadline is replaced at its nonce with
 * fees at least 12.5 % higher, exactly one version is mined and indexed; KEEPER_MAX_FEE_GWEI is never exceeded.
 */
import { afterAll, beforeAll, expect, test } from "bun:test";
import {
  TransactionNotFoundError,
  TransactionReceiptNotFoundError,
  createWalletClient,
  http,
  keccak256,
  parseGwei,
  parseTransaction,
  type Address,
  type Hash,
  type Hex,
} from "viem";
import { publicClientFor } from "../../src/chain/clients";
import { createLogger } from "../../src/common/log";
import type { Db } from "../../src/db/client";
import { createIndexer } from "../../src/indexer";
import { createKeeper, type Keeper, type KeeperConfig } from "../../src/keeper";
import { accounts } from "../../testkit/accounts";
import { createTestChain, type TestChain } from "../../testkit/chain";
import { until } from "../../testkit/cli";
import { testIndexer } from "../../testkit/indexer";
import { createTestDb } from "../../testkit/db";
import { startRpcProxy, type HeldRequest } from "../../testkit/rpc-proxy";

let chain: TestChain;
let db: Db;
let token: Address;
let module: Address;
let indexer: ReturnType<typeof createIndexer>;
const keepers: Keeper[] = [];

beforeAll(async () => {
  chain = await createTestChain();
  db = await createTestDb();
  token = await chain.deployToken();
  module = await chain.createModule("merchant");
  await chain.createPlan("merchant", module, { planId: 1, token, amount: 1_000_000n, interval: 30 * 86_400 });
  indexer = testIndexer(db, chain, { pollMs: 100 });
  await indexer.start();
}, 60_000);

afterAll(async () => {
  await chain?.testClient.setAutomine(true).catch(() => {});
  for (const k of keepers) await k.stop().catch(() => {});
  await indexer?.stop();
  await db?.close();
  await chain?.stop();
}, 60_000);

/** The keepers' clock: the deadline passes when a test moves it, never because the machine is slow. */
let clockMs = Date.now();
const DEADLINE_MS = 60_000;

function makeKeeper(config: Partial<KeeperConfig>, lines: string[], rpcUrl = chain.rpcUrl): Keeper {
  const keeper = createKeeper({
    sql: db.sql,
    client: publicClientFor(rpcUrl),
    wallet: createWalletClient({
      chain: chain.wallet("keeper").chain,
      transport: http(rpcUrl, { retryCount: 0 }),
      account: accounts.keeper,
    }),
    config: {
      chainId: chain.chainId,
      PROCESSOR_ADDRESS: chain.processor,
      POLL_INTERVAL_MS: 100,
      retrySchedule: [3600],
      txDeadlineMs: DEADLINE_MS,
      ...config,
    },
    log: createLogger("debug", (l) => lines.push(l)),
    clock: () => clockMs,
  });
  keepers.push(keeper);
  return keeper;
}

/** A due subscription, indexed, with automine switched off afterwards so that the keeper's sends stay pending. */
async function dueWithAutomineOff(name: "alice" | "bob" | "carol" | "dave"): Promise<bigint> {
  await chain.fund(name, token, 10_000_000n);
  const id = await chain.subscribe(name, module, 1);
  await indexer.waitForBlock(await chain.publicClient.getBlockNumber());
  await chain.testClient.setAutomine(false);
  return id;
}

async function eip1559(hash: Hash) {
  const tx = await chain.publicClient.getTransaction({ hash });
  return { nonce: tx.nonce, maxFee: tx.maxFeePerGas!, tip: tx.maxPriorityFeePerGas! };
}

async function minedOnce(hashes: Hash[]): Promise<Hash> {
  const mined: Hash[] = [];
  for (const hash of hashes) {
    try {
      expect((await chain.publicClient.getTransactionReceipt({ hash })).status).toBe("success");
      mined.push(hash);
    } catch (err) {
      expect(err).toBeInstanceOf(TransactionReceiptNotFoundError);
    }
  }
  expect(mined).toHaveLength(1);
  return mined[0]!;
}

async function chargesIndexed(id: bigint) {
  await indexer.waitForBlock(await chain.publicClient.getBlockNumber());
  const rows = await db.sql<{ type: string }[]>`
    select type from activity where chain_id = ${chain.chainId} and subscription_id = ${id.toString()}`;
  return rows.map((r) => r.type);
}

test("a charge not mined by the deadline is replaced at its nonce with 12.5 % higher fees; one is mined", async () => {
  const lines: string[] = [];
  const id = await dueWithAutomineOff("alice");
  try {
    const keeper = makeKeeper({ maxFeePerGas: parseGwei("1000") }, lines);
    const first = await keeper.tick();
    expect(first.sent.map((s) => s.subscriptionId)).toEqual([`${id}`]);
    const original = first.sent[0]!.hash;
    const before = await eip1559(original);
    // Up to the deadline the next pass only waits.
    clockMs += DEADLINE_MS;
    const waiting = await keeper.tick();
    expect(waiting.replaced).toEqual([]);
    expect(waiting.sent).toEqual([]);
    clockMs += 1;
    const late = await keeper.tick();
    expect(late.replaced).toHaveLength(1);
    expect(late.replaced[0]).toMatchObject({ subscriptionId: `${id}`, replaced: original, nonce: before.nonce });
    const replacement = late.replaced[0]!.hash;
    const after = await eip1559(replacement);
    expect(after.nonce).toBe(before.nonce);
    expect(after.maxFee * 1000n).toBeGreaterThanOrEqual(before.maxFee * 1125n);
    expect(after.tip * 1000n).toBeGreaterThanOrEqual(before.tip * 1125n);

    await chain.testClient.mine({ blocks: 1 });
    expect(await minedOnce([original, replacement])).toBe(replacement);
    const collected = await keeper.tick();
    expect(collected.mined).toEqual([{ subscriptionId: `${id}`, hash: replacement, status: "success" }]);
    expect(await chargesIndexed(id)).toEqual(["CHARGE"]);
    await keeper.stop();
  } finally {
    await chain.testClient.setAutomine(true);
  }
}, 60_000);

test("KEEPER_MAX_FEE_GWEI is never exceeded: no replacement above it, no send when the base fee is above it", async () => {
  const lines: string[] = [];
  const id = await dueWithAutomineOff("bob");
  try {
    const network = await chain.publicClient.estimateFeesPerGas();
    // Room for the first send, not for a 12.5 % bump.
    const cap = (network.maxFeePerGas * 105n) / 100n;
    const keeper = makeKeeper({ maxFeePerGas: cap }, lines);
    const first = await keeper.tick();
    expect(first.sent).toHaveLength(1);
    const original = first.sent[0]!.hash;
    expect((await eip1559(original)).maxFee).toBeLessThanOrEqual(cap);
    clockMs += DEADLINE_MS + 1;
    const late = await keeper.tick();
    expect(late.replaced).toEqual([]);
    expect(lines.some((l) => l.includes("fee cap leaves no room to replace it"))).toBe(true);
    await chain.testClient.mine({ blocks: 1 });
    expect(await minedOnce([original])).toBe(original);
    expect(await chargesIndexed(id)).toEqual(["CHARGE"]);
    await keeper.stop();

    // A cap below the base fee: nothing is sent, and the keeper says why.
    const poorLines: string[] = [];
    await chain.testClient.setAutomine(true);
    const other = await dueWithAutomineOff("carol");
    const poor = makeKeeper({ maxFeePerGas: 1n }, poorLines);
    const nonce = await chain.publicClient.getTransactionCount({ address: chain.keeper, blockTag: "pending" });
    const r = await poor.tick();
    expect(r.sent).toEqual([]);
    expect(r.skipped).toContainEqual({ module: module.toLowerCase(), subscriptionId: `${other}`, reason: "fee_cap" });
    expect(poorLines.some((l) => l.includes("KEEPER_MAX_FEE_GWEI") && l.includes('"level":"warn"'))).toBe(true);
    expect(await chain.publicClient.getTransactionCount({ address: chain.keeper, blockTag: "pending" })).toBe(nonce);
    await poor.stop();
  } finally {
    await chain.testClient.setAutomine(true);
  }
}, 60_000);

test("a replacement's hash is on the claim before the node has it", async () => {
  const lines: string[] = [];
  const proxy = startRpcProxy(chain.rpcUrl);
  const id = await dueWithAutomineOff("dave");
  try {
    const keeper = makeKeeper({ maxFeePerGas: parseGwei("1000") }, lines, proxy.url);
    const original = (await keeper.tick()).sent.find((s) => s.subscriptionId === `${id}`)!.hash;
    const nonce = (await eip1559(original)).nonce;
    proxy.hold("eth_sendRawTransaction");
    clockMs += DEADLINE_MS + 1;
    const ticking = keeper.tick();
    // A charge left due by the test above is sent and replaced too: its broadcasts pass (sends are serialized).
    const ours = (h: HeldRequest) => parseTransaction(h.params[0] as Hex).nonce === nonce;
    const held = await until("the replacement's broadcast", async () => {
      for (const h of proxy.held.filter((h) => !ours(h))) void h.release();
      return proxy.held.find(ours);
    });
    const replacement = keccak256(held.params[0] as Hex);
    expect(replacement).not.toBe(original);
    const [claim] = await db.sql<{ tx_hash: string; tx_nonce: string }[]>`
      select tx_hash, tx_nonce::text as tx_nonce from keeper_claims where subscription_id = ${id.toString()}`;
    expect(claim).toEqual({ tx_hash: replacement, tx_nonce: String(nonce) });
    await expect(chain.publicClient.getTransaction({ hash: replacement })).rejects.toBeInstanceOf(
      TransactionNotFoundError,
    );
    proxy.unhold("eth_sendRawTransaction");
    for (const h of proxy.held) await h.release();
    expect((await ticking).replaced.map((r) => r.hash)).toContain(replacement);
    await chain.testClient.mine({ blocks: 1 });
    expect(await minedOnce([original, replacement])).toBe(replacement);
    expect(await chargesIndexed(id)).toEqual(["CHARGE"]);
    await keeper.stop();
  } finally {
    for (const h of proxy.held) h.drop();
    proxy.stop();
    await chain.testClient.setAutomine(true);
  }
}, 60_000);
