/**
 * Failover on Postgres: two `bun run src/main.ts` processes share one database; the leader is SIGKILLed and the
 * standby goes on (indexing with ROLES=indexer; charging with one keeper key and ROLES=indexer,keeper), also with the
 * leader killed in the middle of a charge's broadcast (its node behind a proxy that holds eth_sendRawTransaction).
 * Postgres only: uses DATABASE_URL when set, else a private cluster of its own (never a server assumed on 5432).
 */
import { afterAll, beforeAll, expect, test } from "bun:test";
import postgres from "postgres";
import {
  decodeFunctionData,
  keccak256,
  parseTransaction,
  TransactionNotFoundError,
  type Address,
  type Hash,
  type Hex,
} from "viem";
import { subscriptionProcessorAbi } from "../../src/chain/abis";
import { createDb, type Db } from "../../src/db/client";
import { keys } from "../../testkit/accounts";
import { createTestChain, type TestChain } from "../../testkit/chain";
import { jsonLines, spawnBun, until, type Child } from "../../testkit/cli";
import { startPgCluster, type PgCluster } from "../../testkit/pg-cluster";
import { startRpcProxy, type HeldRequest, type RpcProxy } from "../../testkit/rpc-proxy";

const NAME = `failover_${Date.now().toString(36)}_${Math.random().toString(36).slice(2, 6)}`;
const KEEPER_DB = `${NAME}_k`;
const KILLED_DBS = [`${NAME}_k1`, `${NAME}_k2`];

let chain: TestChain;
let token: Address;
let module: Address;
let admin: postgres.Sql;
let db: Db;
let url: string;
let base: string;
let cluster: PgCluster | undefined;
const children: Child[] = [];

beforeAll(async () => {
  if (!process.env.DATABASE_URL) cluster = await startPgCluster();
  base = process.env.DATABASE_URL ?? cluster!.url;
  admin = postgres(base, { max: 1, onnotice: () => {} });
  await admin.unsafe(`create database ${NAME}`);
  const u = new URL(base);
  u.pathname = `/${NAME}`;
  url = u.toString();
  db = await createDb({ url, max: 2 });
  chain = await createTestChain();
  token = await chain.deployToken();
  module = await chain.createModule("merchant");
  await chain.createPlan("merchant", module, { planId: 1, token, amount: 1_000n, interval: 86_400 });
  await chain.createPlan("merchant", module, { planId: 2, token, amount: 2_000n, interval: 86_400 });
  await chain.createPlan("merchant", module, { planId: 3, token, amount: 3_000n, interval: 86_400 });
}, 60_000);

afterAll(async () => {
  for (const c of children) c.proc.kill("SIGKILL");
  await Promise.all(children.map((c) => c.exited));
  await db?.close();
  await chain?.stop();
  await admin?.unsafe(`drop database if exists ${NAME} with (force)`);
  for (const name of [KEEPER_DB, ...KILLED_DBS]) await admin?.unsafe(`drop database if exists ${name} with (force)`);
  await admin?.end();
  await cluster?.stop();
}, 60_000);

function startIndexer(extra: Record<string, string> = {}): Child {
  const child = spawnBun(["src/main.ts"], {
    DATABASE_URL: url,
    RPC_URL: chain.rpcUrl,
    PROCESSOR_ADDRESS: chain.processor,
    START_BLOCK: chain.startBlock.toString(),
    ROLES: "indexer",
    POLL_INTERVAL_MS: "100",
    LOG_LEVEL: "info",
    ...extra,
  });
  children.push(child);
  return child;
}

async function indexedThrough(block: bigint) {
  return until(
    `the index to reach block ${block}`,
    async () => {
      const [row] = await db.sql<{ indexed_block: string | null }[]>`
      select indexed_block::text as indexed_block from chains where chain_id = ${chain.chainId}`;
      return row?.indexed_block && BigInt(row.indexed_block) >= block;
    },
    30_000,
  );
}

async function subscriptionCount(): Promise<number> {
  const [row] = await db.sql<
    { n: number }[]
  >`select count(*)::int as n from subscriptions where chain_id = ${chain.chainId}`;
  return row!.n;
}

test("the standby indexer takes over when the leader is killed (Postgres only)", async () => {
  await chain.fund("alice", token, 1_000_000n);
  await chain.subscribe("alice", module, 1);

  const leader = startIndexer();
  await leader.waitFor(/"msg":"service started"/, 60_000);
  await indexedThrough(await chain.publicClient.getBlockNumber());
  expect(await subscriptionCount()).toBe(1);

  const standby = startIndexer();
  await standby.waitFor(/"msg":"service started"/, 60_000);
  // Both run; only one writes. New events are still indexed exactly once.
  await chain.subscribe("alice", module, 2);
  await indexedThrough(await chain.publicClient.getBlockNumber());
  expect(await subscriptionCount()).toBe(2);

  // The indexer logs when it becomes the writer: the first process is, the second waits.
  expect(leader.output()).toContain('"msg":"indexer is the leader"');
  expect(standby.output()).not.toContain('"msg":"indexer is the leader"');

  leader.proc.kill("SIGKILL");
  expect(await leader.exited).not.toBe(0);

  await chain.subscribe("alice", module, 3);
  await chain.charge(module, 1n);
  const head = await chain.publicClient.getBlockNumber();
  await indexedThrough(head);
  expect(await subscriptionCount()).toBe(3);
  const [charged] = await db.sql<{ times_executed: string }[]>`
    select times_executed::text as times_executed from subscriptions where chain_id = ${chain.chainId} and subscription_id = 1`;
  expect(charged!.times_executed).toBe("1");
  const [events] = await db.sql<{ n: number }[]>`select count(*)::int as n from activity`;
  expect(events!.n).toBe(1);
  expect(standby.output()).toContain('"msg":"indexer is the leader"');

  standby.proc.kill("SIGTERM");
  expect(await standby.exited).toBe(0);
}, 120_000);

test("one keeper key on two machines: only the lock holder sends, and the standby takes over when it is killed (Postgres only)", async () => {
  await admin.unsafe(`create database ${KEEPER_DB}`);
  const u = new URL(base);
  u.pathname = `/${KEEPER_DB}`;
  const kdb = await createDb({ url: u.toString(), max: 2 });
  const env = { DATABASE_URL: u.toString(), ROLES: "indexer,keeper", KEEPER_PRIVATE_KEY: keys.keeper };
  const said = (c: Child, msg: string) =>
    c
      .output()
      .split("\n")
      .filter((l) => l.includes(`"msg":"${msg}`)).length;
  const unpaid = async () => {
    const [row] = await kdb.sql<{ n: number; total: number }[]>`
      select count(*) filter (where times_executed = 0)::int as n, count(*)::int as total from subscriptions`;
    return row!.total > 0 && row!.n === 0;
  };
  try {
    const first = startIndexer(env);
    await first.waitFor(/"msg":"keeper holds its key's lock/, 60_000);
    const second = startIndexer(env);
    await second.waitFor(/"msg":"keeper is a standby/, 60_000);
    await chain.fund("bob", token, 1_000_000n);
    const bobs: string[] = [];
    for (const plan of [1, 2, 3]) bobs.push((await chain.subscribe("bob", module, plan)).toString());
    // The leader's three charges mined and indexed before it dies. A kill between a charge's record on its claim and
    // its broadcast, or right after the broadcast, is the next two tests' case.
    const charged = async () => {
      const [row] = await kdb.sql<{ n: number }[]>`
        select count(*)::int as n from subscriptions where subscription_id = any(${bobs}) and times_executed > 0`;
      return row!.n === bobs.length && (await unpaid());
    };
    await until("bob's three subscriptions to be charged in the index", charged, 30_000);
    // The log lines arrive through a pipe, after the index may show the charges: wait for them, not a sleep. No sleep
    // for "nothing else was sent" either: the standby's whole output is counted again at the end (one send).
    await until("the leader's three sends in its log", async () => said(first, "charge sent") >= 3);
    expect(said(second, "charge sent")).toBe(0);

    first.proc.kill("SIGKILL");
    expect(await first.exited).not.toBe(0);
    await chain.fund("carol", token, 1_000_000n);
    const late = await chain.subscribe("carol", module, 1);
    await until(
      "the standby to charge the new subscription",
      async () => {
        const [row] = await kdb.sql<{ t: string }[]>`
          select times_executed::text as t from subscriptions where subscription_id = ${late.toString()}`;
        return row?.t === "1";
      },
      30_000,
    );
    await until("the standby's send in its log", async () => said(second, "charge sent") >= 1);
    expect(said(second, "keeper holds its key's lock")).toBe(1);
    // Every send of the standby is for the new subscription: none of the leader's charges is sent again (a second line
    // for it would be a resend at its nonce, which the activity check below shows was never charged twice).
    const sentBy = (c: Child) =>
      c
        .output()
        .split("\n")
        .filter((l) => l.includes('"msg":"charge sent'))
        .map((l) => String((JSON.parse(l) as { subscriptionId?: unknown }).subscriptionId));
    expect(new Set(sentBy(second))).toEqual(new Set([late.toString()]));
    for (const c of [first, second]) expect(said(c, "charge attempt failed") + said(c, "keeper pass failed")).toBe(0);
    const [charges] = await kdb.sql<{ n: number; subs: number }[]>`
      select count(*)::int as n, count(distinct subscription_id)::int as subs from activity where type = 'CHARGE'`;
    expect(charges!.n).toBe(charges!.subs);
    second.proc.kill("SIGTERM");
    expect(await second.exited).toBe(0);
  } finally {
    await kdb.close();
  }
}, 120_000);

/** The lines of a child's log with message `msg` (a prefix), parsed. */
const logged = (c: Child, msg: string) => jsonLines(c.output()).filter((l) => String(l.msg).startsWith(msg));

/** The subscriptions a child logged "charge sent" for, in order. */
const sentBy = (c: Child) => logged(c, "charge sent").map((l) => String(l.subscriptionId));

/** Keeper transactions on chain calling `charge(module, id)` since `fromBlock`. */
async function chargeTxs(id: bigint, fromBlock: bigint): Promise<Hash[]> {
  const found: Hash[] = [];
  const head = await chain.publicClient.getBlockNumber();
  for (let n = fromBlock; n <= head; n++) {
    const block = await chain.publicClient.getBlock({ blockNumber: n, includeTransactions: true });
    for (const tx of block.transactions) {
      if (
        tx.from.toLowerCase() !== chain.keeper.toLowerCase() ||
        tx.to?.toLowerCase() !== chain.processor.toLowerCase()
      )
        continue;
      const call = decodeFunctionData({ abi: subscriptionProcessorAbi, data: tx.input });
      if (call.functionName === "charge" && call.args[1] === id) found.push(tx.hash);
    }
  }
  return found;
}

/**
 * One keeper key on two machines, the leader's node behind `proxy` (which holds its broadcasts), the standby's behind
 * one without the others' pending transactions (its simulations cannot see a charge the leader left pending, as on
 * a load-balanced provider); runs `scenario` with both started and the database of `name`.
 */
async function withKeeperPair(
  name: string,
  scenario: (p: { first: Child; second: Child; proxy: RpcProxy; kdb: Db }) => Promise<void>,
) {
  await admin.unsafe(`create database ${name}`);
  const u = new URL(base);
  u.pathname = `/${name}`;
  const kdb = await createDb({ url: u.toString(), max: 2 });
  const proxy = startRpcProxy(chain.rpcUrl);
  const standbyNode = startRpcProxy(chain.rpcUrl, { noMempool: true });
  const env = { DATABASE_URL: u.toString(), ROLES: "indexer,keeper", KEEPER_PRIVATE_KEY: keys.keeper };
  try {
    // A long RPC timeout: the held broadcast must not fail on its own before the test kills the process.
    const first = startIndexer({ ...env, RPC_URL: proxy.url, RPC_TIMEOUT_MS: "60000" });
    await first.waitFor(/"msg":"keeper holds its key's lock/, 60_000);
    // A deadline past every test's end: the standby never replaces a charge it adopted, so the one mined is the leader's.
    const second = startIndexer({
      ...env,
      RPC_URL: standbyNode.url,
      LOG_LEVEL: "debug",
      KEEPER_TX_DEADLINE_MS: "300000",
    });
    await second.waitFor(/"msg":"keeper is a standby/, 60_000);
    await scenario({ first, second, proxy, kdb });
    for (const c of [first, second]) expect(logged(c, "charge attempt failed").length).toBe(0);
    second.proc.kill("SIGTERM");
    expect(await second.exited).toBe(0);
  } finally {
    for (const h of proxy.held) h.drop();
    proxy.stop();
    standbyNode.stop();
    await chain.testClient.setAutomine(true);
    await kdb.close();
  }
}

/** Subscribes `name` to plan 1 and waits until the leader's charge of it is held at the proxy: its raw transaction. */
async function heldCharge(name: "dave" | "erin", proxy: RpcProxy, kdb: Db) {
  await chain.fund(name, token, 1_000_000n);
  proxy.hold("eth_sendRawTransaction");
  const id = await chain.subscribe(name, module, 1);
  // Only this charge is held: any other the leader sends meanwhile passes.
  const ours = (h: HeldRequest) => {
    const call = decodeFunctionData({
      abi: subscriptionProcessorAbi,
      data: parseTransaction(h.params[0] as Hex).data!,
    });
    return call.functionName === "charge" && call.args[1] === id;
  };
  const held = await until(
    "the leader's broadcast of the charge",
    async () => {
      for (const h of proxy.held.filter((h) => !ours(h))) void h.release();
      return proxy.held.find(ours);
    },
    30_000,
  );
  const hash = keccak256(held.params[0] as Hex);
  // The leader waits on its broadcast: the claim already names the transaction and its nonce.
  const [claim] = await kdb.sql<{ owner: string; tx_hash: string; tx_nonce: string }[]>`
    select owner, tx_hash, tx_nonce::text as tx_nonce from keeper_claims where subscription_id = ${id.toString()}`;
  expect(claim?.tx_hash).toBe(hash);
  expect(claim?.owner.startsWith(`${chain.keeper.toLowerCase()}:`)).toBe(true);
  expect(claim?.tx_nonce).toBe(String(parseTransaction(held.params[0] as Hex).nonce));
  return { id, held, hash, nonce: Number(claim!.tx_nonce) };
}

/** Whether anvil has the transaction (pending or mined). */
async function nodeHas(hash: Hash) {
  return chain.publicClient.getTransaction({ hash }).then(
    () => true,
    (err) => {
      if (err instanceof TransactionNotFoundError) return false;
      throw err;
    },
  );
}

/** The standby charges a subscription made after the kill: every pass before it is over, its log is complete. */
async function lateChargeBy(second: Child, kdb: Db, plan: number): Promise<string> {
  await chain.fund("carol", token, 1_000_000n);
  const late = (await chain.subscribe("carol", module, plan)).toString();
  await until(
    "the standby to charge the late subscription",
    async () => {
      const [row] = await kdb.sql<{ t: string }[]>`
        select times_executed::text as t from subscriptions where subscription_id = ${late}`;
      return row?.t === "1";
    },
    30_000,
  );
  await until("the standby's send of it in its log", async () => sentBy(second).includes(late));
  return late;
}

async function chargesOf(kdb: Db, id: bigint) {
  const [row] = await kdb.sql<{ n: number }[]>`
    select count(*)::int as n from activity where type = 'CHARGE' and subscription_id = ${id.toString()}`;
  return row!.n;
}

test("the leader killed after recording a charge on its claim, before its broadcast: the standby charges it once (Postgres only)", async () => {
  await withKeeperPair(KILLED_DBS[0]!, async ({ first, second, proxy, kdb }) => {
    const from = (await chain.publicClient.getBlockNumber()) + 1n;
    const { id, held, hash, nonce } = await heldCharge("dave", proxy, kdb);
    first.proc.kill("SIGKILL");
    expect(await first.exited).not.toBe(0);
    held.drop(); // never reached the node
    expect(await nodeHas(hash)).toBe(false);
    // The standby sees a transaction its node never saw, at a nonce nothing holds: it releases the claim and charges.
    const takeover = await until(
      "the standby's takeover",
      async () => logged(second, "keeper took over the claims")[0],
    );
    expect(takeover).toMatchObject({ released: [id.toString()], kept: [] });
    const late = await lateChargeBy(second, kdb, 2);
    expect(sentBy(second).sort()).toEqual([id.toString(), late].sort());
    await until("its charge to be indexed", async () => (await chargesOf(kdb, id)) === 1);
    // One charge on chain, at the nonce the dead leader had signed for (the standby's next one). Signatures are
    // deterministic, so with the same fees it may even be the very transaction the leader never broadcast.
    const txs = await chargeTxs(id, from);
    expect(txs).toHaveLength(1);
    expect((await chain.publicClient.getTransaction({ hash: txs[0]! })).nonce).toBe(nonce);
  });
}, 120_000);

test("the leader killed right after a charge's broadcast, before hearing back: the standby never sends it again (Postgres only)", async () => {
  await withKeeperPair(KILLED_DBS[1]!, async ({ first, second, proxy, kdb }) => {
    const from = (await chain.publicClient.getBlockNumber()) + 1n;
    const { id, held, hash } = await heldCharge("erin", proxy, kdb);
    // A subscription the leader never gets to (its pass waits on the held broadcast): the standby's to charge.
    await chain.fund("carol", token, 1_000_000n);
    const late = (await chain.subscribe("carol", module, 3)).toString();
    // The node gets the charge and keeps it pending; the leader dies before the answer comes back.
    await chain.testClient.setAutomine(false);
    await held.forward();
    expect(await nodeHas(hash)).toBe(true);
    first.proc.kill("SIGKILL");
    expect(await first.exited).not.toBe(0);
    held.drop();
    const takeover = await until(
      "the standby's takeover",
      async () => logged(second, "keeper took over the claims")[0],
    );
    // The node has the leader's charge pending: the standby tracks it as its own (it would replace it if slow).
    expect(takeover).toMatchObject({ released: [], adopted: [id.toString()], kept: [] });
    // The pass that sent the late charge is over (its summary is logged): every send up to it is in the log, all made
    // while the leader's charge was still pending and invisible to the standby's simulations.
    await until("the standby's send of the late charge", async () => sentBy(second).includes(late), 30_000);
    await until("the end of that pass", async () => logged(second, "keeper pass").some((l) => Number(l.sent) > 0));
    expect(sentBy(second)).toEqual([late]);
    await chain.testClient.setAutomine(true);
    await chain.testClient.mine({ blocks: 1 });
    expect((await chain.publicClient.getTransactionReceipt({ hash })).status).toBe("success");
    await until(
      "both charges to be indexed",
      async () => (await chargesOf(kdb, id)) + (await chargesOf(kdb, BigInt(late))) === 2,
    );
    expect(await chargeTxs(id, from)).toEqual([hash]);
    expect(sentBy(second)).toEqual([late]);
  });
}, 120_000);
