/**
 * The renewal events end to end (renewals.md §4) on a real anvil chain with the keeper, the indexer, the webhooks
 * dispatcher and the API in one service: `renewal_at_risk` within one check interval, `renewal_recovered` after a
 * top-up, the keeper's charge at the due instant (`charge.failed` with the predicted reason, `charge.succeeded` after
 * `recovered`), and `renewal_upcoming` once per due instant at the right block, none for a plan shorter than the
 * notice, withdrawn by a reorg that removes its block, and the same ids and bodies after a re-index. The records in
 * the payloads: an observation's carries the outlook it reports; an event derived from the chain carries
 * `renewal: null`, even when an outlook stood, so that a re-index gives the same body.
 */
import { afterAll, beforeAll, describe, expect, setDefaultTimeout, test } from "bun:test";
import type { Address, Hex } from "viem";
import { createApiKey } from "../../src/auth/api-keys";
import { subscriptionModuleAbi, testTokenAbi } from "../../src/chain/abis";
import { eventsHook } from "../../src/events/hook";
import { EVENT_COLUMNS, eventData, type EventRow } from "../../src/events/envelope";
import { upcomingEvents } from "../../src/renewals/upcoming";
import type { Service } from "../../src/service";
import { keys } from "../../testkit/accounts";
import { createTestChain, type TestChain, type WalletName } from "../../testkit/chain";
import { until } from "../../testkit/cli";
import { createTestDb } from "../../testkit/db";
import { startChainService } from "../../testkit/service";
import { indexOnce } from "../../testkit/indexer";
import { endpointForAll, startReceiver, type Receiver } from "../../testkit/webhooks";

// Real chains and services: slower than bun's default 5 s per test when files run together.
setDefaultTimeout(60_000);

const U = 1_000_000n;
const AMOUNT = 10n * U;
const INTERVAL = 3 * 86_400;
const NOTICE = 86_400;
let chain: TestChain;
let service: Service;
let receiver: Receiver;
let key: string;
let merchant: string;
let token: Address;
let mod: Address;
const subs: Record<string, bigint> = {};

type Ev = { id: string; type: string; timestamp: string; block_number: string; data: any };
const lower = (a: string) => a.toLowerCase();
const events = async (type?: string): Promise<Ev[]> => {
  const q = type ? `?type=${type}` : "";
  const res = await fetch(`${service.url}/v0/events/${merchant}${q}`, { headers: { authorization: `Bearer ${key}` } });
  return res.json();
};
const of = (list: Ev[], id: bigint) => list.filter((e) => e.data.object.on_chain_id === id.toString());
const write = (who: WalletName, address: Address, abi: any, functionName: string, args: unknown[]) =>
  chain.send(chain.wallet(who).writeContract({ address, abi, functionName, args } as never));
const nextChargeAt = async (id: bigint) =>
  (
    await chain.publicClient.readContract({
      address: mod,
      abi: subscriptionModuleAbi,
      functionName: "getSubscription",
      args: [id],
    })
  ).nextChargeAt;
const indexed = async () => service.indexer!.waitForBlock(await chain.publicClient.getBlockNumber(), 15_000);
/** The bodies the receiver got (through the dispatcher, signed), by event id. */
const deliveredBodies = () => new Map(receiver.received.map((r) => [r.id, JSON.parse(r.body) as Ev]));
const CHAIN_DERIVED = ["subscription.created", "subscription.status_changed", "subscription.renewal_upcoming"];

beforeAll(async () => {
  chain = await createTestChain();
  token = await chain.deployToken({ symbol: "TUSD", decimals: 6 });
  mod = await chain.createModule("merchant");
  await chain.createPlan("merchant", mod, { planId: 1, token, amount: AMOUNT, interval: INTERVAL });
  await chain.createPlan("merchant", mod, { planId: 2, token, amount: AMOUNT, interval: 12 * 3600 }); // < notice
  for (const w of ["alice", "bob", "carol", "dave"] as const) await chain.fund(w, token, 100n * U);
  merchant = lower(chain.address("merchant"));
  receiver = startReceiver();
  service = await startChainService(chain, {
    KEEPER_PRIVATE_KEY: keys.keeper,
    RENEWAL_CHECK_INTERVAL_S: "1",
    RENEWAL_NOTICE_S: String(NOTICE),
    WEBHOOK_ALLOW_PRIVATE_URLS: "1",
    WEBHOOK_POLL_INTERVAL_MS: "100",
    SIWE_DOMAIN: "localhost",
    ROLES: "api,indexer,keeper,webhooks",
  });
  key = (await createApiKey(service.db.sql, { merchant })).key;
  await endpointForAll(service.db.sql, merchant, receiver.url);
  // Subscribed with the service running: the keeper takes each first charge at once.
  for (const w of ["alice", "bob", "carol"] as const) subs[w] = await chain.subscribe(w, mod, 1);
  subs.dave = await chain.subscribe("dave", mod, 2);
  await until("the first charges", async () => {
    const list = await events("charge.succeeded");
    return list.length === 4;
  });
}, 120_000);

afterAll(async () => {
  await service?.stop();
  await receiver?.stop();
  await chain?.stop();
});

describe("renewal_at_risk and renewal_recovered", () => {
  test("approve nothing: at_risk within one check interval, with the outlook and no previous", async () => {
    await write("carol", token, testTokenAbi, "approve", [chain.processor, 0n]);
    const [e] = await until("carol's at_risk", async () => {
      const l = of(await events("subscription.renewal_at_risk"), subs.carol!);
      return l.length ? l : null;
    });
    expect(e!.data.renewal).toMatchObject({
      outlook: "at_risk",
      reason: "InsufficientAllowance",
      shortfall: "10000000",
    });
    expect(e!.data.previous_renewal).toBeNull();
    expect(e!.data.object.renewal).toEqual(e!.data.renewal);
    expect(e!.block_number).toBe(e!.data.renewal.checked_block);
    expect(e!.timestamp).toBe(e!.data.renewal.checked_at);
  });

  test("balance moved away, then topped up: at_risk, then recovered (previous_renewal the at_risk one)", async () => {
    await write("bob", token, testTokenAbi, "transfer", [chain.address("deployer"), 85_790_000n]);
    const [risk] = await until("bob's at_risk", async () => {
      const l = of(await events("subscription.renewal_at_risk"), subs.bob!);
      return l.length ? l : null;
    });
    expect(risk!.data.renewal).toMatchObject({
      reason: "InsufficientBalance",
      balance: "4210000",
      shortfall: "5790000",
    });
    await chain.fund("bob", token, 10n * U);
    const [rec] = await until("bob's recovered", async () => {
      const l = of(await events("subscription.renewal_recovered"), subs.bob!);
      return l.length ? l : null;
    });
    expect(rec!.data.renewal).toMatchObject({ outlook: "will_renew", reason: null, balance: "14210000" });
    expect(rec!.data.previous_renewal).toEqual(risk!.data.renewal);
    // One event per change: two evaluations since, each on a newer block, sent nothing more.
    for (let i = 0; i < 2; i++) {
      await chain.testClient.mine({ blocks: 1 });
      const head = await chain.publicClient.getBlockNumber({ cacheTime: 0 });
      await until("bob evaluated on the new block", async () => {
        const [row] = await service.db.sql<{ checked_block: string }[]>`
          select checked_block::text from renewal_outlooks where chain_id = ${chain.chainId} and subscription_id = ${subs.bob!.toString()}`;
        return row !== undefined && BigInt(row.checked_block) >= head;
      });
    }
    const all = (await events()).filter(
      (e) => e.type.startsWith("subscription.renewal_") && e.data.object.on_chain_id === subs.bob!.toString(),
    );
    expect(all.map((e) => e.type).filter((t) => t !== "subscription.renewal_upcoming")).toEqual([
      "subscription.renewal_at_risk",
      "subscription.renewal_recovered",
    ]);
  });

  test("the receiver got them through the dispatcher", async () => {
    const seen = (await events()).filter((e) => /renewal_(at_risk|recovered)/.test(e.type));
    const ids = new Set(seen.map((e) => e.id));
    expect(seen.map((e) => [e.type, e.data.object.on_chain_id])).toEqual([
      ["subscription.renewal_at_risk", subs.carol!.toString()],
      ["subscription.renewal_at_risk", subs.bob!.toString()],
      ["subscription.renewal_recovered", subs.bob!.toString()],
    ]);
    await until("deliveries", async () => [...ids].every((id) => receiver.delivered().has(id)));
  });

  test("records in payloads: an observation's carries the outlook it reports, the chain's events none", async () => {
    const log = await events();
    await until("deliveries", async () => log.every((e) => receiver.delivered().has(e.id)));
    const bodies = deliveredBodies();
    for (const e of log) expect(bodies.get(e.id)).toEqual(e); // what /v0/events lists is what was sent
    const observed = log.filter((e) => /renewal_(at_risk|recovered)/.test(e.type));
    expect(observed.length).toBe(3);
    for (const e of observed) {
      expect(e.data.object.renewal).not.toBeNull();
      expect(e.data.object.renewal).toEqual(e.data.renewal);
    }
    const derived = log.filter((e) => CHAIN_DERIVED.includes(e.type));
    expect(derived.length).toBeGreaterThan(0);
    for (const e of derived) expect({ id: e.id, renewal: e.data.object.renewal }).toEqual({ id: e.id, renewal: null });
  });
});

describe("renewal_upcoming", () => {
  let noticeBlock: bigint;
  let snap: Hex;

  test("once per due instant, in the first block at or after due − notice; none for a plan shorter than it", async () => {
    const dues = await Promise.all([subs.alice!, subs.bob!, subs.carol!].map(nextChargeAt));
    const latest = dues.reduce((a, b) => (a > b ? a : b));
    snap = await chain.snapshot();
    // One block just before the last notice instant, one at it: each notice goes to the first block at or after it.
    const before = await chain.mineAt(latest - BigInt(NOTICE) - 1n);
    noticeBlock = await chain.mineAt(latest - BigInt(NOTICE));
    await indexed();
    const up = await until("three notices", async () => {
      const l = await events("subscription.renewal_upcoming");
      return l.length === 3 ? l : null;
    });
    for (const [i, who] of (["alice", "bob", "carol"] as const).entries()) {
      const [e] = of(up, subs[who]!);
      const instant = dues[i]! - BigInt(NOTICE);
      // The block is the first whose time reaches the instant: `before` for the earlier instants, if it reaches them.
      const expectedBlock = instant <= latest - BigInt(NOTICE) - 1n ? before : noticeBlock;
      expect({ who, block: e!.block_number, at: e!.timestamp }).toEqual({
        who,
        block: expectedBlock.toString(),
        at: new Date(Number(instant) * 1000).toISOString(),
      });
      expect(e!.data).toMatchObject({
        due_at: new Date(Number(dues[i]!) * 1000).toISOString(),
        amount: "10000000",
        currency: "TUSD",
        token_decimals: 6,
      });
    }
    expect(of(up, subs.dave!)).toEqual([]); // 12 h plan, 1 day notice
    // Carol's at_risk outlook stood for that due instant when her notice was created; the notice, derived from the
    // chain, does not embed it (a re-index, which has observed nothing, must give the same body).
    const res = await fetch(`${service.url}/v0/subscriptions/${merchant}/${subs.carol}`, {
      headers: { authorization: `Bearer ${key}` },
    });
    const carol = (await res.json()) as { renewal: { outlook: string; due_at: string } | null };
    expect(carol.renewal).toMatchObject({
      outlook: "at_risk",
      due_at: new Date(Number(dues[2]!) * 1000).toISOString(),
    });
    expect(of(up, subs.carol!)[0]!.data.object.renewal).toBeNull();
    // More blocks before the due instant: nothing twice.
    await chain.mineAt(latest - 3600n);
    await indexed();
    expect((await events("subscription.renewal_upcoming")).length).toBe(3);
  });

  test("a re-index from scratch gives the same ids in the same blocks, and the same bodies", async () => {
    const db = await createTestDb();
    try {
      await indexOnce(db.sql, chain.rpcUrl, chain.processor, {
        startBlock: chain.startBlock,
        db,
        hooks: [eventsHook({ extra: (tx, ctx, f) => upcomingEvents(tx, ctx, f, NOTICE) })],
      });
      const again = await db.sql<{ id: string; block_number: string }[]>`
        select id, block_number::text from merchant_events where type = 'subscription.renewal_upcoming' order by id`;
      const now = (await events("subscription.renewal_upcoming")).map((e) => ({
        id: e.id,
        block_number: e.block_number,
      }));
      expect([...again]).toEqual(now.sort((a, b) => (a.id < b.id ? -1 : 1)));
      // Every event derived from the chain, in both logs, with the same body.
      const fresh = new Map(
        (
          await db.sql<EventRow[]>`
            select ${db.sql.unsafe(EVENT_COLUMNS)} from event_log e where e.type = any(${CHAIN_DERIVED}::text[])`
        ).map((r) => [r.id, eventData(r)]),
      );
      const live = (await events()).filter((e) => CHAIN_DERIVED.includes(e.type));
      expect(live.length).toBeGreaterThanOrEqual(10);
      for (const e of live) expect({ id: e.id, data: fresh.get(e.id) }).toEqual({ id: e.id, data: e.data });
    } finally {
      await db.close();
    }
  });

  test("a reorg that removes its block withdraws it, not an observation; the new branch announces it again", async () => {
    const old = await events("subscription.renewal_upcoming");
    // An observation on the branch about to go: alice approves nothing, the loop sees it at risk.
    await write("alice", token, testTokenAbi, "approve", [chain.processor, 0n]);
    const [observed] = await until("alice's at_risk on the old branch", async () => {
      const l = of(await events("subscription.renewal_at_risk"), subs.alice!);
      return l.length ? l : null;
    });
    await chain.revert(snap);
    const dues = await Promise.all([subs.alice!, subs.bob!, subs.carol!].map(nextChargeAt));
    const latest = dues.reduce((a, b) => (a > b ? a : b));
    // The new branch: one block later than every notice instant, taller than the old one so the indexer follows it.
    await chain.mineAt(latest - BigInt(NOTICE) + 5n);
    await chain.mineAt(latest - BigInt(NOTICE) + 6n);
    await chain.mineAt(latest - BigInt(NOTICE) + 7n);
    await chain.mineAt(latest - BigInt(NOTICE) + 8n);
    await indexed();
    const reverted = await until("the withdrawals", async () => {
      const l = await events("event.reverted");
      const ids = new Set(l.map((e) => e.data.object.id));
      return old.every((e) => ids.has(e.id)) ? l : null;
    });
    expect(reverted.length).toBeGreaterThanOrEqual(3);
    // The observation is not withdrawn: the next evaluation on the new branch (where the approval never happened)
    // decides, and sends the change.
    expect(reverted.map((e) => e.data.object.id)).not.toContain(observed!.id);
    const [recovered] = await until("alice recovered on the new branch", async () => {
      const l = of(await events("subscription.renewal_recovered"), subs.alice!);
      return l.length ? l : null;
    });
    expect(recovered!.data.previous_renewal).toEqual(observed!.data.renewal);
    const standing = (await events("subscription.renewal_upcoming")).filter((e) => !old.some((o) => o.id === e.id));
    expect(standing.length).toBe(3);
    const first = await chain.publicClient.getBlock({ blockNumber: BigInt(standing[0]!.block_number) });
    expect(Number(first.timestamp)).toBe(Number(latest) - NOTICE + 5);
  });
});

describe("the charge at the due instant", () => {
  test("charge.failed carries the predicted reason; charge.succeeded follows recovered", async () => {
    const due = await nextChargeAt(subs.carol!);
    await chain.mineAt(due + 1n);
    await until("the keeper's charges", async () => {
      const failed = (await events("charge.failed")).filter((e) =>
        e.data.object.allocation_id.endsWith(`:${subs.carol}`),
      );
      return failed.length > 0;
    });
    const [failed] = await events("charge.failed");
    // The at_risk sent for this due instant said so: the state did not change since.
    const [risk] = of(await events("subscription.renewal_at_risk"), subs.carol!);
    expect(failed!.data.object.reason).toBe(risk!.data.renewal.reason);
    expect(failed!.data.object.reason).toBe("InsufficientAllowance");
    await until("bob charged", async () => {
      const ok = await events("charge.succeeded");
      return ok.filter((e) => e.data.object.allocation_id.endsWith(`:${subs.bob}`)).length === 2;
    });
    // In bob's own order: at_risk, recovered, then the charge that succeeded.
    const bob = (await events()).filter(
      (e) =>
        (e.type.startsWith("subscription.renewal_") &&
          e.type !== "subscription.renewal_upcoming" &&
          e.data.object.on_chain_id === subs.bob!.toString()) ||
        (e.type === "charge.succeeded" && e.data.object.allocation_id.endsWith(`:${subs.bob}`)),
    );
    expect(bob.slice(0, 4).map((e) => e.type)).toEqual([
      "charge.succeeded",
      "subscription.renewal_at_risk",
      "subscription.renewal_recovered",
      "charge.succeeded",
    ]);
    // The charge left 4.21 for the next due instant: a new at_risk for it, with nothing sent for it before.
    const next = await until("bob's next at_risk", async () => {
      const l = of(await events("subscription.renewal_at_risk"), subs.bob!);
      return l.length === 2 ? l[1] : null;
    });
    expect(next!.data.renewal).toMatchObject({ reason: "InsufficientBalance", balance: "4210000" });
    expect(next!.data.previous_renewal).toBeNull();
  });
});
