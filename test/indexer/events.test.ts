import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { decodeEventLog, type Address, type Log } from "viem";
import { subscriptionModuleAbi, subscriptionProcessorAbi } from "../../src/chain/abis";
import type { Db } from "../../src/db/client";
import { createNotifier, type IndexedBatch } from "../../src/db/notify";
import { createTestChain, type TestChain } from "../../testkit/chain";
import { morePasses, until } from "../../testkit/cli";
import { createTestDb } from "../../testkit/db";
import { indexOnce, testIndexer } from "../../testkit/indexer";
import { dumpChainData } from "../../testkit/compare";
import { migrate, migrationsDir } from "../../src/db/migrate";
import { runScenario, type Scenario } from "../../testkit/scenario";

const abi = [...subscriptionProcessorAbi, ...subscriptionModuleAbi];
const reasons = ["None", "InsufficientAllowance", "InsufficientBalance", "TransferFailed", "AllowanceExpired"];

let chain: TestChain;
let db: Db;
let scenario: Scenario;
let logs: Log[];
const times = new Map<bigint, string>();
const batches: IndexedBatch[] = [];

const lower = (a: string) => a.toLowerCase();
const plain = (args: Record<string, unknown>) =>
  Object.fromEntries(
    Object.entries(args).map(([k, v]) => [
      k,
      typeof v === "bigint" ? v.toString() : typeof v === "string" ? lower(v) : v,
    ]),
  );
const decoded = (log: Log) =>
  decodeEventLog({ abi, data: log.data, topics: log.topics }) as unknown as {
    eventName: string;
    args: Record<string, unknown>;
  };

const payments = new Set(["ChargeSucceeded", "ChargeFailed", "CreditRefilled"]);
/** The columns of a log's place in the chain, as `events` and `activity` store them. */
const position = (log: Log) => ({
  chain_id: String(chain.chainId),
  block_number: log.blockNumber!.toString(),
  log_index: log.logIndex,
  tx_hash: lower(log.transactionHash!),
  block_hash: lower(log.blockHash!),
  block_time: times.get(log.blockNumber!)!,
});
/** The `events` row of a log, as the indexer stores one (payment logs were stored so before migration 0034). */
const eventRow = (log: Log) => {
  const ev = decoded(log);
  return {
    ...position(log),
    address: lower(log.address),
    name: ev.eventName,
    subscription_id: ev.args.subscriptionId === undefined ? null : String(ev.args.subscriptionId),
    args: plain(ev.args),
  };
};

beforeAll(async () => {
  chain = await createTestChain();
  scenario = await runScenario(chain);
  db = await createTestDb();
  const notifier = createNotifier(db);
  await notifier.subscribe((b) => void batches.push(b));
  await indexOnce(db.sql, chain.rpcUrl, chain.processor, { db, startBlock: chain.startBlock, notifier });
  const { m1, m2, sameBlock } = scenario.modules;
  logs = await chain.publicClient.getLogs({
    address: [chain.processor, m1, m2, sameBlock],
    fromBlock: chain.startBlock,
  });
  for (const log of logs) {
    if (!times.has(log.blockNumber!)) {
      const block = await chain.publicClient.getBlock({ blockNumber: log.blockNumber! });
      times.set(log.blockNumber!, new Date(Number(block.timestamp) * 1000).toISOString());
    }
  }
}, 60_000);

afterAll(async () => {
  await db?.close();
  await chain?.stop();
});

describe("events", () => {
  test("every log of the processor and its modules but the payment logs is stored in events with every field, as viem decodes it", async () => {
    const rows = await db.sql`select * from events order by block_number, log_index`;
    const expected = logs.filter((log) => !payments.has(decoded(log).eventName)).map(eventRow);
    const actual = rows.map((r) => ({ ...r, block_time: (r.block_time as Date).toISOString() }));
    expect(actual).toEqual(expected);
    // A payment log is stored once, as its activity row (checked field by field below).
    const activity = await db.sql`select block_number, log_index from activity order by block_number, log_index`;
    expect(activity.map((r) => `${r.block_number}:${r.log_index}`)).toEqual(
      logs.filter((log) => payments.has(decoded(log).eventName)).map((log) => `${log.blockNumber}:${log.logIndex}`),
    );
    const names = new Set([...expected.map((e) => e.name), ...logs.map((l) => decoded(l).eventName)]);
    for (const name of [
      "ModuleCreated",
      "ChargeSucceeded",
      "ChargeFailed",
      "CreditRefilled",
      "CreditWithdrawn",
      "KeeperSet",
      "FeeSet",
      "PlanCreated",
      "SubscriptionCreated",
      "SubscriptionPaused",
      "SubscriptionResumed",
      "SubscriptionCancelled",
      "AllowanceExpiryUpdated",
      "SubscriberBlocked",
      "SubscriberUnblocked",
    ]) {
      expect(names.has(name)).toBe(true);
    }
  });

  test("the module created and used in one block has its plan and subscription indexed", async () => {
    const m = lower(scenario.modules.sameBlock);
    const [mod] = await db.sql`select merchant, block_number from modules where address = ${m}`;
    expect(mod!.merchant).toBe(lower(chain.address("dave")));
    const plans = await db.sql`select plan_id, block_number from plans where module = ${m}`;
    expect(plans.map((p) => [p.plan_id, p.block_number])).toEqual([["9", mod!.block_number]]);
    const subs = await db.sql`select subscriber, block_number from subscriptions where module = ${m}`;
    expect(subs.map((s) => [s.subscriber, s.block_number])).toEqual([
      [lower(chain.address("alice")), mod!.block_number],
    ]);
  });
});

describe("derived tables", () => {
  test("subscriptions equal the contract's getSubscription, field by field", async () => {
    const rows = await db.sql`select * from subscriptions order by subscription_id`;
    expect(rows.length).toBe(scenario.subs.length + 1);
    for (const row of rows) {
      const module = row.module as Address;
      const s = await chain.publicClient.readContract({
        address: module,
        abi: subscriptionModuleAbi,
        functionName: "getSubscription",
        args: [BigInt(row.subscription_id)],
      });
      const owner = await chain.publicClient.readContract({
        address: module,
        abi: subscriptionModuleAbi,
        functionName: "owner",
      });
      const created = logs.find((l) => {
        const ev = decoded(l);
        return ev.eventName === "SubscriptionCreated" && String(ev.args.subscriptionId) === row.subscription_id;
      })!;
      expect(row).toEqual({
        chain_id: String(chain.chainId),
        subscription_id: row.subscription_id,
        module: lower(created.address),
        merchant: lower(owner),
        subscriber: lower(s.subscriber),
        plan_id: String(s.planId),
        max_executions: String(s.maxExecutions),
        times_executed: String(s.timesExecuted),
        total_spent: s.totalSpent.toString(),
        created_at: s.createdAt.toString(),
        last_paid_at: s.lastPaidAt.toString(),
        next_charge_at: s.nextChargeAt.toString(),
        allowance_expiry: s.allowanceExpiry.toString(),
        paused: s.paused,
        cancelled: s.cancelled,
        block_number: created.blockNumber!.toString(),
        log_index: created.logIndex,
        tx_hash: lower(created.transactionHash!),
      });
    }
    const expiries = rows.map((r) => r.allowance_expiry);
    expect(expiries).toContain((2n ** 64n - 1n).toString());
  });

  test("plans equal getPlan, modules their owner, tokens their metadata or null", async () => {
    const plans = await db.sql`select * from plans order by module, plan_id`;
    const planLogs = logs.filter((l) => decoded(l).eventName === "PlanCreated");
    expect(plans.length).toBe(planLogs.length);
    for (const p of plans) {
      const onChain = await chain.publicClient.readContract({
        address: p.module as Address,
        abi: subscriptionModuleAbi,
        functionName: "getPlan",
        args: [Number(p.plan_id)],
      });
      expect([p.token, p.amount, p.interval_s, p.grace_s]).toEqual([
        lower(onChain.token),
        onChain.amount.toString(),
        String(onChain.interval),
        String(onChain.gracePeriod),
      ]);
    }
    const modules = await db.sql`select address, merchant from modules order by block_number`;
    expect(modules.map((m) => [m.address, m.merchant])).toEqual([
      [lower(scenario.modules.m1), lower(chain.address("merchant"))],
      [lower(scenario.modules.m2), lower(chain.address("merchant2"))],
      [lower(scenario.modules.sameBlock), lower(chain.address("dave"))],
    ]);
    const tokens = await db.sql`select address, symbol, decimals from tokens order by address`;
    const { tusd, nometa, falsy } = scenario.tokens;
    expect(tokens.map((t) => ({ ...t }))).toEqual(
      [
        { address: lower(tusd), symbol: "TUSD", decimals: 6 },
        { address: lower(nometa), symbol: null, decimals: null },
        { address: lower(falsy), symbol: "FALSE", decimals: 18 },
      ].sort((a, b) => (a.address < b.address ? -1 : 1)),
    );
  });

  test("blocked_subscribers holds the latest block state, as isBlocked says", async () => {
    const rows = await db.sql`select module, subscriber, blocked from blocked_subscribers order by module, subscriber`;
    expect(rows.length).toBe(3);
    for (const r of rows) {
      const onChain = await chain.publicClient.readContract({
        address: r.module as Address,
        abi: subscriptionModuleAbi,
        functionName: "isBlocked",
        args: [r.subscriber as Address],
      });
      expect(r.blocked).toBe(onChain);
    }
    expect(rows.filter((r) => r.blocked).length).toBe(2);
  });

  test("activity has a CHARGE, FAIL or REFILL row per payment log, and nothing for withdrawals", async () => {
    const planToken = new Map<string, string>();
    for (const row of await db.sql`select s.subscription_id, p.token from subscriptions s
      join plans p on p.module = s.module and p.plan_id = s.plan_id`) {
      planToken.set(row.subscription_id, row.token);
    }
    const owners = new Map((await db.sql`select address, merchant from modules`).map((m) => [m.address, m.merchant]));
    const expected = [];
    for (const log of logs) {
      const { eventName, args } = decoded(log);
      if (!payments.has(eventName)) continue;
      const id = String(args.subscriptionId);
      const module = lower(args.module as string);
      const base = {
        ...position(log),
        merchant: owners.get(module),
        module,
        subscription_id: id,
      };
      if (eventName === "ChargeSucceeded") {
        expected.push({
          ...base,
          type: "CHARGE",
          token: lower(args.token as string),
          amount: String(args.amount),
          fee: String(args.fee),
          reason: null,
          keeper: lower(args.keeper as string),
        });
      } else if (eventName === "ChargeFailed") {
        expected.push({
          ...base,
          type: "FAIL",
          token: planToken.get(id),
          amount: "0",
          fee: null,
          reason: reasons[Number(args.reason)],
          keeper: lower(args.keeper as string),
        });
      } else {
        expected.push({
          ...base,
          type: "REFILL",
          token: lower(args.token as string),
          amount: String(args.amount),
          fee: null,
          reason: null,
          keeper: lower(args.from as string),
        });
      }
    }
    // The event column belongs to the event log (null without its hook): test/events covers it.
    const rows = await db.sql`select * from activity order by block_number, log_index`;
    // The permission columns are a spend permission's (null on the protocol's charges).
    const plain = rows.map(({ event_seq, permission_hash, period_start, period_end, ...r }) => ({
      ...r,
      block_time: (r.block_time as Date).toISOString(),
    }));
    expect(plain).toEqual(expected);
    expect(rows.every((r) => r.permission_hash === null && r.period_start === null && r.period_end === null)).toBe(
      true,
    );
    expect(rows.every((r) => r.event_seq === null)).toBe(true);
    expect(new Set(rows.map((r) => r.reason))).toEqual(new Set([null, ...reasons.slice(1)]));
  });

  test("the cursor is the head block with its hash and timestamp; recent block hashes are kept", async () => {
    const head = await chain.publicClient.getBlock();
    const [c] = await db.sql`select * from chains`;
    expect([c!.indexed_block, c!.indexed_hash, (c!.indexed_time as Date).getTime() / 1000]).toEqual([
      head.number.toString(),
      head.hash,
      Number(head.timestamp),
    ]);
    expect(c!.processor).toBe(lower(chain.processor));
    expect(c!.head_block).toBe(head.number.toString());
    const blocks = await db.sql`select number, hash from blocks order by number`;
    expect(blocks.at(-1)).toEqual({ number: head.number.toString(), hash: head.hash });
    expect(blocks.length).toBe(Math.min(64, Number(head.number - chain.startBlock) + 1));
  });

  test("each committed batch is announced through the notifier", async () => {
    // A notification is published after its commit and arrives over another connection: wait for the last one.
    const last = logs.at(-1)!.blockNumber!.toString();
    await until("the last batch's notification", async () => batches.at(-1)?.toBlock === last, 10_000);
    expect(batches.length).toBeGreaterThan(0);
    expect(batches.every((b) => b.chainId === chain.chainId && !b.reorg)).toBe(true);
    expect(batches[0]!.fromBlock).toBe(chain.startBlock.toString());
    expect(batches.at(-1)!.toBlock).toBe(logs.at(-1)!.blockNumber!.toString());
  });
});

describe("migration 0034", () => {
  test("an index from before it, each payment log also in events, migrates to the rows of a fresh index", async () => {
    const fresh = await dumpChainData(db.sql, chain.chainId);
    // One activity row with an event seq: its event's id in the log must not change.
    const [one] = await db.sql<{ block_number: string; log_index: number }[]>`
      update activity set event_seq = 1 where (block_number, log_index) in
        (select block_number, log_index from activity order by block_number desc limit 1)
      returning block_number, log_index`;
    const idOf = async () =>
      (await db.sql`select id from event_log where seq = 1 and a_type is not null`).map((r) => r.id as string);
    const id = await idOf();
    const log = logs.find((l) => l.blockNumber!.toString() === one!.block_number && l.logIndex === one!.log_index)!;
    const hex = (v: number | bigint, width: number) => v.toString(16).padStart(width, "0");
    expect(id).toEqual([
      `evt_${hex(chain.chainId, 10)}${hex(log.blockNumber!, 10)}${hex(log.logIndex!, 6)}${lower(log.blockHash!).slice(2, 36)}`,
    ]);
    // The schema and rows as the code before 0034 left them.
    const view = readFileSync(join(migrationsDir, "0014_create_event_log_view.sql"), "utf8");
    await db.sql`drop view event_log`;
    await db.sql.unsafe(view.slice(view.indexOf("create view")));
    await db.sql`alter table activity drop column block_hash`;
    await db.sql`delete from schema_migrations where name = '0034_move_activity_logs_out_of_events.sql'`;
    const old = logs.filter((l) => payments.has(decoded(l).eventName)).map(eventRow);
    await db.sql`insert into events select * from jsonb_populate_recordset(null::events, ${JSON.stringify(old)}::text::jsonb)`;
    expect(await idOf()).toEqual(id);

    expect(await migrate(db.sql)).toEqual(["0034_move_activity_logs_out_of_events.sql"]);
    // 0034 put its own view back; the one of the migrations after it (applied before this test) returns.
    const later = readFileSync(join(migrationsDir, "0035_add_merchant_events_snapshot.sql"), "utf8");
    await db.sql.unsafe(later.slice(later.indexOf("create or replace view")));
    expect(await idOf()).toEqual(id);
    await db.sql`update activity set event_seq = null`;
    expect(await dumpChainData(db.sql, chain.chainId)).toEqual(fresh);
  });
});

describe("realtime", () => {
  test("a running indexer picks up a new transaction, even on blocks without events it moves the cursor", async () => {
    const indexer = testIndexer(db, chain, { pollMs: 50 });
    await indexer.start();
    try {
      const id = scenario.subs[2]!; // carol: fails every time, always due
      const receipt = await chain.charge(scenario.modules.m1, id);
      await indexer.waitForBlock(receipt.blockNumber, 10_000);
      const rows = await db.sql`select type, reason from activity where tx_hash = ${receipt.transactionHash}`;
      expect(rows.map((r) => [r.type, r.reason])).toEqual([["FAIL", "InsufficientAllowance"]]);
      await chain.testClient.mine({ blocks: 3 });
      const head = await chain.publicClient.getBlockNumber({ cacheTime: 0 });
      await indexer.waitForBlock(head, 10_000);
      const [c] = await db.sql`select indexed_block from chains`;
      expect(c!.indexed_block).toBe(head.toString());
      expect(indexer.status()).toMatchObject({
        chainId: chain.chainId,
        leader: true,
        indexedBlock: head.toString(),
        lastError: null,
      });
    } finally {
      await indexer.stop();
    }
  });

  test("CONFIRMATIONS holds the newest blocks back until they are deep enough", async () => {
    const indexer = testIndexer(db, chain, { confirmations: 3 });
    await indexer.start();
    try {
      const receipt = await chain.charge(scenario.modules.m1, scenario.subs[2]!);
      await chain.testClient.mine({ blocks: 2 });
      await indexer.waitForBlock(receipt.blockNumber - 1n, 10_000);
      await morePasses(3, indexer); // several polls: the charge's block is only 2 deep
      expect(indexer.status().indexedBlock).toBe((receipt.blockNumber - 1n).toString());
      expect((await db.sql`select 1 from activity where tx_hash = ${receipt.transactionHash}`).length).toBe(0);
      await chain.testClient.mine({ blocks: 1 });
      await indexer.waitForBlock(receipt.blockNumber, 10_000);
      expect((await db.sql`select 1 from activity where tx_hash = ${receipt.transactionHash}`).length).toBe(1);
    } finally {
      await indexer.stop();
    }
  });

  test("fetching module logs by topic (past the address-list limit) gives the same index", async () => {
    const other = await createTestDb();
    try {
      await indexOnce(other.sql, chain.rpcUrl, chain.processor, {
        db: other,
        startBlock: chain.startBlock,
        tuning: { addressLimit: 0, initialRange: 5 },
      });
      await indexOnce(db.sql, chain.rpcUrl, chain.processor, { db, startBlock: chain.startBlock });
      const [a, b] = [await dumpChainData(db.sql, chain.chainId), await dumpChainData(other.sql, chain.chainId)];
      for (const table of Object.keys(a) as (keyof typeof a)[])
        expect({ [table]: a[table] }).toEqual({ [table]: b[table] });
      expect(a.modules.length).toBe(3);
    } finally {
      await other.close();
    }
  });
});
