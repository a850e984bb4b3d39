/**
 * The renewal outlook end to end on a real anvil chain and database: the indexer's leader evaluates, the API lists.
 * Each reason is reached on purpose (approve less, move the balance away, an allowance expiry before the due instant),
 * credit covering a charge, two subscriptions of one wallet against a balance for one (across merchants), and one
 * approval counted for all of a wallet's subscriptions in the token. Then the list's filters, paging and CSV, the
 * subscription records, stats, and a failed read that keeps the previous outlooks.
 */
import { afterAll, beforeAll, describe, expect, setDefaultTimeout, test } from "bun:test";
import type { Address } from "viem";
import { createApiKey } from "../../src/auth/api-keys";
import { subscriptionModuleAbi, testTokenAbi } from "../../src/chain/abis";
import { MULTICALL3_ADDRESS } from "../../src/chain/multicall3";
import { createRenewalLoop } from "../../src/renewals/loop";
import { createRenewalReader } from "../../src/renewals/reader";
import type { Service } from "../../src/service";
import { keys } from "../../testkit/accounts";
import { createTestChain, type TestChain, type WalletName } from "../../testkit/chain";
import { until } from "../../testkit/cli";
import { parseCsvObjects } from "../../testkit/csv";
import { startChainService } from "../../testkit/service";

// Real chains and services: slower than bun's default 5 s per test when files run together.
setDefaultTimeout(60_000);

const U = 1_000_000n; // one TUSD
const AMOUNT = 10n * U;
const INTERVAL = 3 * 86_400;
let chain: TestChain;
let service: Service;
let key: string;
let merchant: string;
let token: Address;
let modA: Address;
let modB: Address;
const subs: Record<string, bigint> = {};

const lower = (a: string) => a.toLowerCase();
const get = async (path: string, k = key) => {
  const res = await fetch(service.url + path, { headers: { authorization: `Bearer ${k}` } });
  return { status: res.status, headers: res.headers, text: await res.text() };
};
const json = async (path: string) => JSON.parse((await get(path)).text);
/** Outlooks without when they were taken: the loop re-evaluates every second, so reads a moment apart may differ there. */
const withoutCheck = (items: { checked_at?: string; checked_block?: string }[]) =>
  items.map(({ checked_at: _at, checked_block: _block, ...rest }) => rest);
const renewalOf = async (id: bigint) => (await json(`/v0/subscriptions/${merchant}/${id}`)).renewal;
/** Waits until the subscription's outlook satisfies `ok` (the loop runs every poll; RENEWAL_CHECK_INTERVAL_S=1). */
const outlookWhen = (id: bigint, what: string, ok: (r: any) => boolean) =>
  until(
    what,
    async () => {
      const r = await renewalOf(id);
      return r && ok(r) ? r : null;
    },
    15_000,
  );

const write = (who: WalletName, address: Address, abi: any, functionName: string, args: unknown[]) =>
  chain.send(chain.wallet(who).writeContract({ address, abi, functionName, args } as never));
const approve = (who: WalletName, amount: bigint) =>
  write(who, token, testTokenAbi, "approve", [chain.processor, amount]);

/** Subscribes `who` to plan 1 of `module` and charges the first period: the next charge is due in 3 days. */
async function paidSub(who: WalletName, module: Address): Promise<bigint> {
  const id = await chain.subscribe(who, module, 1);
  await chain.charge(module, id);
  return id;
}

beforeAll(async () => {
  chain = await createTestChain();
  token = await chain.deployToken({ symbol: "TUSD", decimals: 6 });
  [modA, modB] = [await chain.createModule("merchant"), await chain.createModule("merchant2")];
  await chain.createPlan("merchant", modA, { planId: 1, token, amount: AMOUNT, interval: INTERVAL });
  await chain.createPlan("merchant2", modB, { planId: 1, token, amount: AMOUNT, interval: INTERVAL });
  await chain.createPlan("merchant", modA, { planId: 2, token, amount: AMOUNT, interval: INTERVAL });
  for (const w of ["alice", "bob", "carol"] as const) {
    await chain.fund(w, token, 100n * U);
    subs[w] = await paidSub(w, modA);
  }
  // dave: credit covers the next charge, no balance left.
  await chain.fund("dave", token, 20n * U);
  subs.dave = await paidSub("dave", modA);
  await write("dave", chain.processor, chain.processorContract.abi, "refill", [modA, subs.dave, AMOUNT]);
  // erin: one subscription with each merchant, a balance of 15 left for two charges of 10.
  await chain.fund("erin", token, 35n * U);
  subs.erinA = await paidSub("erin", modA);
  subs.erinB = await paidSub("erin", modB);
  // keeper2: two plans of one merchant, plenty of balance; its allowance is cut to one charge later.
  await chain.fund("keeper2", token, 100n * U);
  subs.k2first = await paidSub("keeper2", modA);
  subs.k2second = await chain.subscribe("keeper2", modA, 2);
  await chain.charge(modA, subs.k2second);
  merchant = lower(chain.address("merchant"));
  service = await startChainService(
    chain,
    {
      RENEWAL_CHECK_INTERVAL_S: "1",
      SIWE_DOMAIN: "localhost",
      ROLES: "api,indexer",
    },
    8,
  );
  key = (await createApiKey(service.db.sql, { merchant })).key;
  await settled();
}, 120_000);

/** Waits until the index reached the head and every outlook was judged at it (the loop evaluates while catching up). */
async function settled() {
  const head = await chain.publicClient.getBlockNumber();
  await service.indexer!.waitForBlock(head, 15_000);
  await until("outlooks at the head", async () => {
    const [row] = await service.db.sql<{ n: number }[]>`
      select count(*)::int as n from renewal_outlooks where checked_block >= ${head.toString()}`;
    return row!.n === 8; // alice, bob, carol, dave, erin ×2, keeper2 ×2
  });
}

afterAll(async () => {
  await service?.stop();
  await chain?.stop();
});

describe("evaluation on the indexer's leader", () => {
  test("every paid subscription due within the horizon gets an outlook from one pinned block, amounts exact", async () => {
    const r = await outlookWhen(subs.alice!, "alice's outlook", () => true);
    const next = (await json(`/v0/subscriptions/${merchant}/${subs.alice}`)).next_charge_date;
    expect(r).toMatchObject({
      due_at: next,
      outlook: "will_renew",
      reason: null,
      amount: "10000000",
      currency: "TUSD",
      token_decimals: 6,
      balance: "90000000",
      credit: "0",
      shortfall: "0",
    });
    const block = await chain.publicClient.getBlock({ blockNumber: BigInt(r.checked_block) });
    expect(r.checked_at).toBe(new Date(Number(block.timestamp) * 1000).toISOString());
  });

  test("credit covering the charge: will_renew with no balance", async () => {
    const r = await outlookWhen(subs.dave!, "dave's outlook", () => true);
    expect(r).toMatchObject({ outlook: "will_renew", balance: "0", credit: "10000000", shortfall: "0" });
  });

  test("two subscriptions of one wallet (two merchants) against a balance for one: exactly the later one at risk", async () => {
    const later = await outlookWhen(subs.erinA!, "erin's outlook", () => true);
    // erinA was charged first, so it is due first; erinB (merchant2's) takes the rest of the balance and fails.
    expect(later).toMatchObject({ outlook: "will_renew", balance: "15000000" });
    const rows = await service.db.sql`
      select outlook, reason, shortfall::text from renewal_outlooks where subscription_id = ${subs.erinB!.toString()}`;
    expect([...rows]).toEqual([{ outlook: "at_risk", reason: "InsufficientBalance", shortfall: "5000000" }]);
    // merchant sees only its own: erin's B subscription is not in its list.
    const list = await json(`/v0/renewals/${merchant}`);
    expect(list.map((i: any) => i.on_chain_id)).not.toContain(subs.erinB!.toString());
  });

  test("approve less: InsufficientAllowance with the shortfall, within one check interval", async () => {
    await approve("alice", 4_210_000n);
    const r = await outlookWhen(subs.alice!, "alice at risk", (x) => x.outlook === "at_risk");
    expect(r).toMatchObject({ reason: "InsufficientAllowance", allowance: "4210000", shortfall: "5790000" });
  });

  test("move the balance away: InsufficientBalance with the shortfall", async () => {
    await write("bob", token, testTokenAbi, "transfer", [chain.address("deployer"), 85_790_000n]);
    const r = await outlookWhen(subs.bob!, "bob at risk", (x) => x.outlook === "at_risk");
    expect(r).toMatchObject({ reason: "InsufficientBalance", balance: "4210000", shortfall: "5790000" });
  });

  test("an allowance expiry before the due instant (a module log): AllowanceExpired for the full amount", async () => {
    const expiry = (await chain.now()) + 86_400n;
    await write("carol", modA, subscriptionModuleAbi, "setAllowanceExpiry", [subs.carol, expiry]);
    const r = await outlookWhen(subs.carol!, "carol at risk", (x) => x.outlook === "at_risk");
    expect(r).toMatchObject({ reason: "AllowanceExpired", shortfall: "10000000", balance: "90000000" });
  });

  test("one approval counts for all the wallet's subscriptions in the token, in due order", async () => {
    await approve("keeper2", AMOUNT);
    const second = await outlookWhen(subs.k2second!, "keeper2's second at risk", (x) => x.outlook === "at_risk");
    expect(second).toMatchObject({ reason: "InsufficientAllowance", allowance: "10000000", shortfall: "10000000" });
    expect(await renewalOf(subs.k2first!)).toMatchObject({ outlook: "will_renew", allowance: "10000000" });
  });

  test("pausing (a log) removes the outlook; resuming brings it back", async () => {
    await write("dave", modA, subscriptionModuleAbi, "pause", [subs.dave]);
    await until("dave's outlook gone", async () => (await renewalOf(subs.dave!)) === null);
    await write("dave", modA, subscriptionModuleAbi, "resume", [subs.dave]);
    await outlookWhen(subs.dave!, "dave's outlook back", (x) => x.outlook === "will_renew");
  });
});

describe("GET /v0/renewals/:merchant", () => {
  test("filters: outlook, reason, due_before, token; ordered by due_at then id", async () => {
    await until("every outlook settled", async () => {
      const list = await json(`/v0/renewals/${merchant}?outlook=at_risk`);
      return list.length === 4; // alice, bob, carol, keeper2's second
    });
    const all = await json(`/v0/renewals/${merchant}`);
    expect(all.length).toBe(7);
    const keys = all.map((i: any) => [i.due_at, BigInt(i.on_chain_id)]);
    const sorted = [...keys].sort((a, b) => (a[0] < b[0] ? -1 : a[0] > b[0] ? 1 : a[1] < b[1] ? -1 : 1));
    expect(keys).toEqual(sorted);
    const item = all.find((i: any) => i.on_chain_id === subs.bob!.toString());
    expect(item).toMatchObject({
      allocation_id: `${chain.chainId}:${lower(modA)}:${subs.bob}`,
      module_address: lower(modA),
      user_address: lower(chain.address("bob")),
      plan_id: `${chain.chainId}:${lower(modA)}:1`,
      reason: "InsufficientBalance",
    });
    const balance = await json(`/v0/renewals/${merchant}?reason=InsufficientBalance`);
    expect(balance.map((i: any) => i.on_chain_id)).toEqual([subs.bob!.toString()]);
    expect((await json(`/v0/renewals/${merchant}?outlook=will_renew`)).length).toBe(3);
    expect((await json(`/v0/renewals/${merchant}?token=tusd`)).length).toBe(7);
    expect(await json(`/v0/renewals/${merchant}?token=TUS`)).toEqual([]);
    expect(await json(`/v0/renewals/${merchant}?due_before=${encodeURIComponent(all[0].due_at)}`)).toEqual([]);
    const cut = new Date(Date.parse(all[0].due_at) + 1).toISOString();
    expect((await json(`/v0/renewals/${merchant}?due_before=${cut}`)).length).toBeGreaterThanOrEqual(1);
  });

  test("paging with limit and starting_after (Link), and CSV of the same rows", async () => {
    const all = await json(`/v0/renewals/${merchant}`);
    const first = await get(`/v0/renewals/${merchant}?limit=4`);
    expect(withoutCheck(JSON.parse(first.text))).toEqual(withoutCheck(all.slice(0, 4)));
    const next = first.headers.get("link")!;
    expect(next).toContain(`starting_after=${encodeURIComponent(all[3].allocation_id)}`);
    const second = await get(
      new URL(/<([^>]+)>/.exec(next)![1]!).pathname + new URL(/<([^>]+)>/.exec(next)![1]!).search,
    );
    expect(withoutCheck(JSON.parse(second.text))).toEqual(withoutCheck(all.slice(4)));
    expect(second.headers.get("link")).toBeNull();
    const csv = await get(`/v0/renewals/${merchant}?format=csv`);
    expect(csv.headers.get("content-type")).toContain("text/csv");
    const { rows } = parseCsvObjects(csv.text);
    expect(rows.map((r) => r.allocation_id)).toEqual(all.map((i: any) => i.allocation_id));
    const bob = rows.find((r) => r.on_chain_id === subs.bob!.toString())!;
    expect([bob.shortfall, bob.shortfall_decimal, bob.amount_decimal]).toEqual(["5790000", "5.79", "10"]);
  });

  test("bad input is a 400 naming the parameter; another merchant's key a 403", async () => {
    for (const [q, param] of [
      ["outlook=maybe", "outlook"],
      ["reason=TransferFailed", "reason"],
      ["outlook=will_renew&reason=InsufficientBalance", "reason"],
      ["due_before=tomorrow", "due_before"],
      ["limit=0", "limit"],
      [`starting_after=${chain.chainId}:${lower(modB)}:${subs.erinB}`, "starting_after"],
    ]) {
      const res = await get(`/v0/renewals/${merchant}?${q}`);
      expect({ q, status: res.status, param: JSON.parse(res.text).error.param }).toEqual({ q, status: 400, param });
    }
    const other = (await createApiKey(service.db.sql, { merchant: lower(chain.address("merchant2")) })).key;
    expect((await get(`/v0/renewals/${merchant}`, other)).status).toBe(403);
    const theirs = JSON.parse((await get(`/v0/renewals/${lower(chain.address("merchant2"))}`, other)).text);
    expect(theirs.map((i: any) => [i.on_chain_id, i.reason])).toEqual([
      [subs.erinB!.toString(), "InsufficientBalance"],
    ]);
  });

  test("stats: per token, due, will_renew and at_risk by reason, counts and sums", async () => {
    const stats = await json(`/v0/stats/${merchant}`);
    expect(stats.renewals).toEqual([
      {
        token: lower(token),
        currency: "TUSD",
        token_decimals: 6,
        due: { count: 7, amount: "70000000" },
        will_renew: { count: 3, amount: "30000000" },
        at_risk: {
          count: 4,
          amount: "40000000",
          by_reason: {
            AllowanceExpired: { count: 1, amount: "10000000" },
            InsufficientAllowance: { count: 2, amount: "20000000" },
            InsufficientBalance: { count: 1, amount: "10000000" },
            ManagerNotOwner: { count: 0, amount: "0" },
          },
        },
      },
    ]);
  });
});

describe("a failed read", () => {
  test("keeps the previous outlooks and rejects the pass (retried by the loop), the index unaffected", async () => {
    // The wallet the failed pass reads (the service's own loop may re-evaluate it meanwhile, to the same values).
    const alice = lower(chain.address("alice"));
    const rows = () => service.db.sql`select subscription_id::text, outlook, reason, shortfall::text
      from renewal_outlooks where subscriber = ${alice} order by subscription_id`;
    const before = [...(await rows())];
    expect(before.length).toBe(1);
    const loop = createRenewalLoop({
      sql: service.db.sql,
      chainId: chain.chainId,
      reader: createRenewalReader({
        rpcUrl: "http://127.0.0.1:1",
        processor: chain.processor,
        multicall: MULTICALL3_ADDRESS,
        concurrency: 1,
        timeoutMs: 300,
      }),
      isLeader: () => true,
      horizonS: 604_800,
      intervalS: 900,
      pollMs: 100,
    });
    loop.markDirty([alice], 0n); // a log touched alice: the pass must read
    await expect(loop.runOnce()).rejects.toThrow();
    expect([...(await rows())]).toEqual(before);
    await chain.mineAt((await chain.now()) + 1n);
    const head = await chain.publicClient.getBlockNumber();
    await service.indexer!.waitForBlock(head, 5_000);
  });
});

describe("a pass in slices", () => {
  test("slices of whole wallets, two at a time, judge exactly as one slice (a wallet's charges stay together)", async () => {
    const rows = () => service.db.sql`select subscription_id::text, outlook, reason, shortfall::text, balance::text,
      allowance::text from renewal_outlooks order by subscription_id`;
    const before = [...(await rows())];
    expect(before.length).toBe(8);
    const passes: { evaluated: number }[] = [];
    const loop = createRenewalLoop({
      sql: service.db.sql,
      chainId: chain.chainId,
      reader: createRenewalReader({
        rpcUrl: chain.rpcUrl,
        processor: chain.processor,
        multicall: MULTICALL3_ADDRESS,
        concurrency: 2,
      }),
      isLeader: () => true,
      horizonS: 604_800,
      intervalS: 900,
      pollMs: 100,
      sliceSize: 1,
      onPass: (r) => passes.push(r),
    });
    const wallets = (["alice", "bob", "carol", "dave", "erin", "keeper2"] as const).map((w) => lower(chain.address(w)));
    loop.markDirty(wallets, 0n); // logs touched every wallet: the pass reads them all
    await loop.runOnce();
    expect(passes.map((p) => p.evaluated)).toEqual([8]);
    expect([...(await rows())]).toEqual(before);
  });
});
