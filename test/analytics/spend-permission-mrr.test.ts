/**
 * Spend Permissions in the MRR analytics, end to end on a real anvil: a random history of permissions (approvals,
 * first charges in the approving block, renewals, partial spends, revocations by the account, by the spender and by a
 * sender the index cannot place, plan changes by approveWithRevoke with and without a charge in the same block,
 * lapses, ends) beside module subscriptions of the same smart-account wallets in the same tokens, and a reorg, goes
 * through the real indexer with the event log, the permission events and the MRR hook. Every movement, every figure
 * of the MRR and cohorts routes, every churn reason and the identity MRR(end) − MRR(start) = Σ movements must equal
 * what test/analytics/oracle.ts computes on its own from the status timeline; each permission's timeline must end in
 * the status the rule gives now. Then an index built before permissions fed MRR, migrated and restarted, must hold
 * the movements and rollups of a fresh index.
 */
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { encodeFunctionData, getAddress, parseEventLogs, type Address, type Hash, type Hex } from "viem";
import {
  spendPermissionManagerAbi,
  subscriptionModuleAbi,
  testSmartAccountAbi,
  testSmartAccountBytecode,
  testTokenAbi,
} from "../../src/chain/abis";
import { createChainRegistry } from "../../src/chain/clients";
import type { SpendPermissionSource } from "../../src/common/config";
import type { Db } from "../../src/db/client";
import { migrate } from "../../src/db/migrate";
import { FOREVER_END, type SpendPermission } from "../../src/domain/spend-permission";
import { permissionNow, permissionStatusSql } from "../../src/domain/spend-permission-status";
import { mrrAnalytics } from "../../src/analytics/hook";
import { permissionChange } from "../../src/analytics/changes";
import { EVENT_COLUMNS, eventData, type EventRow } from "../../src/events/envelope";
import { eventsHook, type DerivedEvents } from "../../src/events/hook";
import { withPermissionEvents } from "../../src/events/spend-permission-events";
import { createApp } from "../../src/http/app";
import type { IndexerHook } from "../../src/indexer/hooks";
import type { IndexerTuning } from "../../src/indexer";
import { testConfig } from "../../testkit/app";
import { createTestChain, type TestChain, type WalletName } from "../../testkit/chain";
import { until } from "../../testkit/cli";
import { createTestDb } from "../../testkit/db";
import { testIndexer } from "../../testkit/indexer";
import { deploySpendPermissions, type Call, type SpendPermissionKit } from "../../testkit/spend-permissions";
import { apiMovements, compareAll, compareEvents, prng } from "./figures";
import { loadOracle, type OraclePlan } from "./oracle";

const DAY = 86_400;
const GRACE = 3_600;

let chain: TestChain;
let kit: SpendPermissionKit;
let db: Db;
let app: ReturnType<typeof createApp>;
let merchant: Address;
let source: SpendPermissionSource;
const tokens: Record<"usdc" | "dai", Address> = {} as never;
const plans: (OraclePlan & { address: Address })[] = [];
/** Smart-account wallets: their owner EOA, or (the relayed one) no owner that the index can tie to them. */
type Holder = { name: string; owner: WalletName | null; account: Address };
const holders: Holder[] = [];
let relay: Address;

const mrr = mrrAnalytics();
const hooks = (): IndexerHook[] => [
  eventsHook({ derive: mrr.derive, extra: withPermissionEvents(), now: () => 0 }),
  mrr.hook,
];
const figures = () => ({ app, db, merchant: merchant.toLowerCase(), chainId: chain.chainId });

/** Indexes `target` to the chain's head (its own branch: the head's hash), then stops. */
async function indexHead(target: Db, hs: IndexerHook[] = hooks(), tuning?: IndexerTuning) {
  const indexer = testIndexer(target, chain, { spendPermissions: source, hooks: hs, tuning });
  await indexer.start();
  try {
    const head = await chain.publicClient.getBlock({ blockTag: "latest" });
    await until(
      "the index at the head",
      async () =>
        (
          await target.sql`select 1 from chains where chain_id = ${chain.chainId}
            and indexed_block = ${head.number.toString()} and indexed_hash = ${head.hash}`
        ).length > 0,
      // Batches of two or three blocks on a loaded machine can take minutes.
      180_000,
    );
  } finally {
    await indexer.stop();
  }
}

const tokenCall = (token: Address, functionName: string, args: readonly unknown[]): Call => ({
  target: token,
  value: 0n,
  data: encodeFunctionData({ abi: testTokenAbi, functionName, args } as never),
});
const moduleCall = (module: Address, functionName: string, args: readonly unknown[]): Call => ({
  target: module,
  value: 0n,
  data: encodeFunctionData({ abi: subscriptionModuleAbi, functionName, args } as never),
});

/** Calls made by a holder's account: through its owner, or for the relayed one through the relay that owns it. */
async function asHolder(h: Holder, calls: Call[]) {
  if (h.owner) return kit.executeAs(h.owner, h.account, calls);
  const inner = encodeFunctionData({ abi: testSmartAccountAbi, functionName: "executeBatch", args: [calls] });
  return kit.executeAs("dave", relay, [{ target: h.account, value: 0n, data: inner }]);
}

/** The merchant's own transaction to the manager (it is the spender). */
const asSpender = (functionName: string, args: readonly unknown[]) =>
  chain.send(
    chain.wallet("merchant").writeContract({
      address: kit.manager,
      abi: spendPermissionManagerAbi,
      functionName,
      args,
      gas: 1_000_000n,
    } as never),
  );

/** Transactions sent without mining, then mined in one block in the order sent (descending tips); their receipts. */
async function inOneBlock(sends: ((tip: bigint) => Promise<Hash>)[]) {
  await chain.testClient.setAutomine(false);
  const hashes: Hash[] = [];
  try {
    for (let i = 0; i < sends.length; i++) hashes.push(await sends[i]!(BigInt(sends.length - i) * 1_000_000_000n));
    await chain.testClient.mine({ blocks: 1 });
  } finally {
    await chain.testClient.setAutomine(true);
  }
  return Promise.all(hashes.map((hash) => chain.publicClient.waitForTransactionReceipt({ hash })));
}

const fees = (tip: bigint) => ({ maxPriorityFeePerGas: tip, maxFeePerGas: 100_000_000_000n + tip });

type Perm = { p: SpendPermission; holder: Holder };
const perms: Perm[] = [];
const subs: { id: bigint; plan: (typeof plans)[number]; holder: Holder | null }[] = [];
const actions: Record<string, number> = {};
let salt = 0n;

/** A new permission of `h` with random terms (a finite end now and then). */
async function freshPermission(rnd: ReturnType<typeof prng>, h: Holder, token?: Address): Promise<SpendPermission> {
  const now = Number(await chain.now());
  const t = token ?? rnd.pick([tokens.usdc, tokens.usdc, tokens.dai]);
  const allowance =
    t === tokens.dai ? rnd.pick([10n ** 18n, 3n * 10n ** 18n]) : rnd.pick([5_000_000n, 12_000_000n, 40_000_000n]);
  return kit.permission({
    account: h.account,
    spender: merchant,
    token: t,
    allowance,
    period: rnd.pick([DAY, 7 * DAY, 30 * DAY]),
    start: now,
    end: rnd.int(4) === 0 ? now + DAY * (2 + rnd.int(10)) : FOREVER_END,
    salt: ++salt,
  });
}

const attempt = async (name: string, fn: () => Promise<unknown>) => {
  try {
    await fn();
    actions[name] = (actions[name] ?? 0) + 1;
  } catch {
    actions[`${name} (reverted)`] = (actions[`${name} (reverted)`] ?? 0) + 1;
  }
};

/** A keeper's round: every permission charged its allowance, every module subscription charged. */
async function keeperRound() {
  for (const { p } of perms) await attempt("renew", () => asSpender("spend", [p, p.allowance]));
  for (const s of subs) await attempt("charge", () => chain.charge(s.plan.address, s.id));
}

/** Approves a permission of `h` (and charges it, in the approving block or the next, when `charge`). */
async function approve(h: Holder, p: SpendPermission, charge: "no" | "next" | "same") {
  if (charge === "same" && h.owner) {
    // Base Pay's first charge: the spender approves with the account's signature and spends, in one block.
    const signature = await kit.sign(h.owner, p);
    const [a, b] = await inOneBlock([
      (tip) =>
        chain.wallet("merchant").writeContract({
          address: kit.manager,
          abi: spendPermissionManagerAbi,
          functionName: "approveWithSignature",
          args: [p, signature],
          gas: 1_000_000n,
          ...fees(tip),
        } as never),
      async (tip) =>
        chain.wallet("merchant").writeContract({
          address: kit.manager,
          abi: spendPermissionManagerAbi,
          functionName: "spend",
          args: [p, p.allowance],
          gas: 1_000_000n,
          nonce: (await chain.publicClient.getTransactionCount({ address: merchant, blockTag: "pending" })) as number,
          ...fees(tip),
        } as never),
    ]);
    if (a!.status !== "success" || b!.status !== "success") throw new Error("first charge reverted");
    perms.push({ p, holder: h });
    return;
  }
  await asHolder(h, [kit.managerCall("approve", [p])]);
  perms.push({ p, holder: h });
  if (charge !== "no") await asSpender("spend", [p, p.allowance]);
}

/** A plan change: approveWithRevoke by the account, the new permission charged in the same block or not. */
async function planChange(old: Perm, p: SpendPermission, chargeNow: boolean) {
  const h = old.holder;
  const last = await chain.publicClient.readContract({
    address: kit.manager,
    abi: spendPermissionManagerAbi,
    functionName: "getLastUpdatedPeriod",
    args: [old.p],
  } as never);
  const call = kit.managerCall("approveWithRevoke", [p, old.p, last]);
  if (!chargeNow || !h.owner) {
    await asHolder(h, [call]);
    perms.push({ p, holder: h });
    return;
  }
  const [a, b] = await inOneBlock([
    (tip) =>
      chain.wallet(h.owner!).writeContract({
        address: h.account,
        abi: testSmartAccountAbi,
        functionName: "executeBatch",
        args: [[call]],
        gas: 3_000_000n,
        ...fees(tip),
      } as never),
    (tip) =>
      chain.wallet("merchant").writeContract({
        address: kit.manager,
        abi: spendPermissionManagerAbi,
        functionName: "spend",
        args: [p, p.allowance],
        gas: 1_000_000n,
        ...fees(tip),
      } as never),
  ]);
  if (a!.status !== "success") throw new Error("approveWithRevoke reverted");
  perms.push({ p, holder: h });
  if (b!.status !== "success") throw new Error("the new permission's charge reverted");
}

/** A module subscription of a holder (or of erin, an EOA) to `plan`, charged at once. */
async function subscribe(plan: (typeof plans)[number], h: Holder | null) {
  const receipt = h
    ? await asHolder(h, [moduleCall(plan.address, "subscribe", [Number(plan.planId), 0, 0n])])
    : await chain.send(
        chain.wallet("erin").writeContract({
          address: plan.address,
          abi: subscriptionModuleAbi,
          functionName: "subscribe",
          args: [Number(plan.planId), 0, 0n],
        }),
      );
  const [created] = parseEventLogs({
    abi: subscriptionModuleAbi,
    eventName: "SubscriptionCreated",
    logs: receipt.logs,
  });
  subs.push({ id: created!.args.subscriptionId, plan, holder: h });
  await chain.charge(plan.address, created!.args.subscriptionId);
}

/** One random step; any action may revert on chain (that changes nothing). */
async function step(rnd: ReturnType<typeof prng>) {
  const h = rnd.pick(holders);
  const mine = perms.filter((x) => x.holder === h);
  const roll = rnd.int(100);
  if (roll < 14 || perms.length === 0) {
    const p = await freshPermission(rnd, h);
    await attempt("approve", () => approve(h, p, rnd.pick(["no", "next", "same"] as const)));
  } else if (roll < 26) {
    await keeperRound();
  } else if (roll < 34) {
    const { p } = rnd.pick(perms);
    await attempt("spend", () => asSpender("spend", [p, BigInt(1 + rnd.int(3))]));
  } else if (roll < 41 && mine.length > 0) {
    const { p } = rnd.pick(mine);
    await attempt("revoke", () => asHolder(h, [kit.managerCall("revoke", [p])]));
  } else if (roll < 46) {
    const { p } = rnd.pick(perms);
    await attempt("revokeAsSpender", () => asSpender("revokeAsSpender", [p]));
  } else if (roll < 55 && mine.length > 0) {
    const old = rnd.pick(mine);
    const p = await freshPermission(rnd, h, old.p.token);
    await attempt("planChange", () => planChange(old, p, rnd.int(2) === 0));
  } else if (roll < 64) {
    const plan = rnd.pick(plans);
    await attempt("subscribe", () => subscribe(plan, rnd.int(4) === 0 ? null : h));
  } else if (roll < 70 && subs.length > 0) {
    const s = rnd.pick(subs);
    await attempt("cancel", () =>
      rnd.int(3) === 0 || !s.holder
        ? chain.send(
            chain.wallet(s.holder ? "merchant" : "erin").writeContract({
              address: s.plan.address,
              abi: subscriptionModuleAbi,
              functionName: "cancel",
              args: [s.id],
            }),
          )
        : asHolder(s.holder, [moduleCall(s.plan.address, "cancel", [s.id])]),
    );
  } else {
    await attempt("time", async () => {
      await chain.testClient.increaseTime({ seconds: 600 + rnd.int(2 * DAY) });
      await chain.testClient.mine({ blocks: 1 });
    });
    if (rnd.int(2)) await keeperRound();
  }
}

/**
 * The cases every reason needs: a merchant's revocation beside a module subscription (a contraction), the account's,
 * the relayed one (`unknown`), plan changes with the new permission charged in the same block (cheaper:
 * `plan_change`) and later, and on a wallet of its own a lapse won back within 30 days and an end.
 */
async function coverage() {
  const [alice, bob] = holders as [Holder, Holder];
  const relayed = holders.find((h) => !h.owner)!;
  const perm = async (h: Holder, allowance: bigint, period: number, o: { end?: number; token?: Address } = {}) =>
    kit.permission({
      account: h.account,
      spender: merchant,
      token: o.token ?? tokens.usdc,
      allowance,
      period,
      start: Number(await chain.now()),
      end: o.end ?? FOREVER_END,
      salt: ++salt,
    });
  // Alice: a module subscription and a permission in USDC; the merchant revokes the permission.
  await attempt("subscribe", () => subscribe(plans[0]!, alice));
  const a1 = await perm(alice, 20_000_000n, 7 * DAY);
  await approve(alice, a1, "next");
  await asSpender("revokeAsSpender", [a1]);
  // Bob and the relayed wallet revoke their own.
  const b1 = await perm(bob, 12_000_000n, 7 * DAY);
  await approve(bob, b1, "same");
  await asHolder(bob, [kit.managerCall("revoke", [b1])]);
  const r1 = await perm(relayed, 12_000_000n, 7 * DAY);
  await approve(relayed, r1, "next");
  await asHolder(relayed, [kit.managerCall("revoke", [r1])]);
  // Alice again: a plan change to a cheaper permission charged in the same block, then to a dearer one charged later.
  const a2 = await perm(alice, 40_000_000n, 30 * DAY);
  await approve(alice, a2, "next");
  const a3 = await perm(alice, 30_000_000n, 30 * DAY);
  await planChange({ p: a2, holder: alice }, a3, true);
  const a4 = await perm(alice, 60_000_000n, 30 * DAY);
  await planChange({ p: a3, holder: alice }, a4, false);
  await asSpender("spend", [a4, a4.allowance]);
  // Alice cancels her module subscription herself: a contraction beside her permission.
  const aliceWeekly = subs.findLast((x) => x.holder === alice)!;
  await attempt("cancel", () => asHolder(alice, [moduleCall(aliceWeekly.plan.address, "cancel", [aliceWeekly.id])]));
  // Erin's smart account: a daily USDC permission that lapses and is charged again (recovered), and a daily DAI one
  // whose end cuts its second period short (it expires at its end).
  const erin: Holder = { name: "erin", owner: "erin", account: await kit.createAccount("erin") };
  for (const t of [tokens.usdc, tokens.dai]) {
    await chain.send(
      chain
        .wallet("deployer")
        .writeContract({ address: t, abi: testTokenAbi, functionName: "mint", args: [erin.account, 10n ** 24n] }),
    );
  }
  // Beside them a weekly module subscription in USDC, whose renewal fails once the allowance to the processor is gone.
  await asHolder(erin, [tokenCall(tokens.usdc, "approve", [chain.processor, 2n ** 255n])]);
  await subscribe(plans[0]!, erin);
  const weekly = subs.at(-1)!;
  const e1 = await perm(erin, 5_000_000n, DAY);
  await approve(erin, e1, "next");
  const e2 = await perm(erin, 10n ** 18n, DAY, { token: tokens.dai, end: Number(await chain.now()) + 2 * DAY - 100 });
  await approve(erin, e2, "next");
  await chain.testClient.increaseTime({ seconds: DAY + 60 });
  await chain.testClient.mine({ blocks: 1 });
  await asSpender("spend", [e2, e2.allowance]);
  await chain.testClient.increaseTime({ seconds: 2 * GRACE });
  await chain.testClient.mine({ blocks: 1 });
  await asSpender("spend", [e1, e1.allowance]);
  await chain.testClient.increaseTime({ seconds: 2 * DAY });
  await chain.testClient.mine({ blocks: 1 });
  await asHolder(erin, [tokenCall(tokens.usdc, "approve", [chain.processor, 0n])]);
  await chain.testClient.increaseTime({ seconds: 4 * DAY });
  await chain.testClient.mine({ blocks: 1 });
  await chain.charge(weekly.plan.address, weekly.id);
  await chain.testClient.increaseTime({ seconds: 2 * DAY });
  await chain.testClient.mine({ blocks: 1 });
  return erin;
}

/** Each permission's timeline ends in the status the rule gives now (its last change is recorded, none too early). */
async function timelineEndsNow(o: Awaited<ReturnType<typeof loadOracle>>) {
  const rows = await db.sql<{ id: string; status: string; now_s: string }[]>`
    select ${chain.chainId}::text || ':' || sp.manager || ':' || sp.hash as id,
      ${permissionStatusSql(db.sql as never)} as status, n.now_s
    from spend_permissions sp, ${permissionNow(db.sql as never, chain.chainId)}
    where sp.chain_id = ${chain.chainId}`;
  expect(rows.length).toBeGreaterThan(0);
  for (const r of rows) {
    expect({ id: r.id, status: o.statusOf(r.id, Number(r.now_s)) }).toEqual({ id: r.id, status: r.status });
  }
}

beforeAll(async () => {
  chain = await createTestChain();
  kit = await deploySpendPermissions(chain);
  db = await createTestDb();
  merchant = chain.address("merchant");
  tokens.usdc = await chain.deployToken({ symbol: "USDC", decimals: 6 });
  tokens.dai = await chain.deployToken({ symbol: "DAI", decimals: 18 });
  const module = await chain.createModule("merchant");
  const defs = [
    { planId: 1, token: tokens.usdc, amount: 10_000_000n, interval: 7 * DAY, grace: DAY },
    { planId: 2, token: tokens.usdc, amount: 30_000_000n, interval: 30 * DAY, grace: DAY },
    { planId: 3, token: tokens.dai, amount: 5n * 10n ** 18n, interval: 14 * DAY, grace: 0 },
  ];
  for (const d of defs) {
    await chain.createPlan("merchant", module, { ...d, gracePeriod: d.grace });
    plans.push({
      ...d,
      module: module.toLowerCase(),
      address: module,
      planId: String(d.planId),
      token: d.token.toLowerCase(),
    });
  }
  for (const owner of ["alice", "bob", "carol"] as const) {
    holders.push({ name: owner, owner, account: await kit.createAccount(owner) });
  }
  // A wallet owned by another smart account (the relay, owned by dave): its transactions name neither it nor the
  // merchant, so who revoked is `unknown`.
  relay = await kit.createAccount("dave", { managerOwner: false });
  const deployed = await chain.send(
    chain.wallet("deployer").deployContract({
      abi: testSmartAccountAbi,
      bytecode: testSmartAccountBytecode,
      args: [kit.entryPoint, [relay, kit.manager]],
    }),
  );
  holders.push({ name: "relayed", owner: null, account: getAddress(deployed.contractAddress!) });
  for (const h of holders) {
    for (const t of [tokens.usdc, tokens.dai]) {
      await chain.send(
        chain
          .wallet("deployer")
          .writeContract({ address: t, abi: testTokenAbi, functionName: "mint", args: [h.account, 10n ** 24n] }),
      );
      await asHolder(h, [tokenCall(t, "approve", [chain.processor, 2n ** 255n])]);
    }
  }
  await chain.fund("erin", tokens.usdc, 10n ** 12n);
  await chain.fund("erin", tokens.dai, 10n ** 24n);
  source = kit.source([merchant], { graceS: GRACE });
  const config = testConfig({ RPC_URL: chain.rpcUrl, CHAIN_ID: String(chain.chainId) });
  app = createApp({ sql: db.sql, config, chains: await createChainRegistry(config) });
}, 120_000);

afterAll(async () => {
  await db?.close();
  await chain?.stop();
});

describe("Spend Permissions in MRR", () => {
  test("every figure equals the oracle's beside module subscriptions, before and after a reorg", async () => {
    const seen = { rates: 0, reasons: new Set<string>(), kinds: new Set<string>() };
    const rnd = prng(20261130);
    for (let i = 0; i < 50; i++) await step(rnd);
    await indexHead(db);
    // A branch the reorg removes: revocations, a first charge, time past some lapses.
    const snap = await chain.snapshot();
    const [permsBefore, subsBefore] = [perms.length, subs.length];
    for (const x of perms.slice(0, 3)) {
      await attempt("revoke", () => asHolder(x.holder, [kit.managerCall("revoke", [x.p])]));
    }
    await attempt("approve", async () => approve(holders[1]!, await freshPermission(rnd, holders[1]!), "same"));
    await chain.testClient.increaseTime({ seconds: 3 * DAY });
    await chain.testClient.mine({ blocks: 1 });
    await keeperRound();
    await indexHead(db);
    await compareAll(figures(), await loadOracle(db.sql, chain.chainId, figures().merchant, plans), seen);
    const orphanEvents = (await compareEvents(figures())).filter((r) => r.reverted_by === null).map((r) => r.id);
    const orphanTop = await chain.publicClient.getBlockNumber({ cacheTime: 0 });
    await chain.revert(snap);
    perms.length = permsBefore;
    subs.length = subsBefore;
    let i = 0;
    for (; i < 40 && (await chain.publicClient.getBlockNumber({ cacheTime: 0 })) <= orphanTop; i++) await step(rnd);
    while ((await chain.publicClient.getBlockNumber({ cacheTime: 0 })) <= orphanTop) {
      await chain.testClient.mine({ blocks: 1 });
    }
    await indexHead(db);
    const [{ reorgs }] = await db.sql<{ reorgs: string }[]>`
      select count(*) as reorgs from chains where last_reorg_at is not null`;
    expect(reorgs).toBe("1");
    for (; i < 40; i++) await step(rnd);
    const erin = await coverage();
    await indexHead(db);
    const o = await loadOracle(db.sql, chain.chainId, figures().merchant, plans);
    await compareAll(figures(), o, seen);
    await timelineEndsNow(o);
    const rows = await compareEvents(figures());
    const live = new Set(rows.filter((r) => r.reverted_by === null).map((r) => r.id));
    expect(orphanEvents.filter((id) => !live.has(id)).length).toBeGreaterThan(0);

    // What the history must have shown: permissions in every kind of movement and for each of their reasons.
    const movements = await apiMovements(figures());
    const permissionIds = new Set(
      (
        await db.sql<{ id: string }[]>`
        select ${chain.chainId}::text || ':' || manager || ':' || hash as id from spend_permissions`
      ).map((r) => r.id),
    );
    const withPermission = movements.filter((m) => m.allocation_ids.some((id: string) => permissionIds.has(id)));
    const mixed = movements.filter(
      (m) =>
        m.allocation_ids.some((id: string) => permissionIds.has(id)) && m.mrr_after !== "0" && m.mrr_before !== "0",
    );
    const unknown = await db.sql<{ id: string }[]>`
      select ${chain.chainId}::text || ':' || manager || ':' || hash as id from spend_permissions
      where revoked_by = 'unknown'`;
    console.log(
      "spend permission mrr",
      JSON.stringify({
        actions,
        movements: movements.length,
        withPermission: withPermission.length,
        seen: { ...seen, reasons: [...seen.reasons], kinds: [...seen.kinds] },
      }),
    );
    const kinds = new Set(withPermission.map((m) => m.kind));
    expect([...kinds].sort()).toEqual(["churn", "contraction", "expansion", "new", "reactivation"]);
    const reasons = new Set(withPermission.map((m) => m.reason));
    for (const r of ["cancelled_by_subscriber", "cancelled_by_merchant", "not_charged", "plan_change"]) {
      expect([...reasons]).toContain(r);
    }
    expect(mixed.length).toBeGreaterThan(0);
    // A failed module renewal names the churn of a customer who also held permissions.
    expect(
      movements.some((m) => m.customer === erin.account.toLowerCase() && m.reason === "InsufficientAllowance"),
    ).toBe(true);
    expect(withPermission.some((m) => m.recovered)).toBe(true);
    // `unknown` counts as the subscriber's.
    expect(unknown.length).toBeGreaterThan(0);
    for (const { id } of unknown) {
      const leaving = withPermission.filter(
        (m) =>
          m.allocation_ids.includes(id) &&
          (m.kind === "churn" || m.kind === "contraction") &&
          m.reason !== "plan_change",
      );
      for (const m of leaving.filter((m) => m.reason?.startsWith("cancelled"))) {
        expect(m.reason).toBe("cancelled_by_subscriber");
      }
    }
    expect(seen.rates).toBeGreaterThan(0);
  }, 600_000);

  test("an index from before permissions fed MRR holds a fresh index's movements once migrated and restarted", async () => {
    // Rollup rows that sum to zero (a batch's movements that cancel out in a period) change no figure: left out.
    const tables = async (d: Db) => ({
      movements: await d.sql`
        select id, merchant, customer, token, block_number::text, at::text, kind, mrr_before::text, mrr_after::text,
          reason, recovered, allocation_ids, first_at::text, active_since::text, prev_churn_at::text
        from mrr_movements order by id`,
      daily: await d.sql`
        select merchant, token, day, kind, reason, recovered, stretch_day, prev_churn_day, count::text, amount::text
        from mrr_daily where count <> 0 or amount <> 0
        order by merchant, token, day, kind, reason, recovered, stretch_day, prev_churn_day`,
      cohorts: await d.sql`
        select merchant, token, interval, cohort_start::text, period_start::text, amount::text, customers::text,
          size::text
        from mrr_cohorts where amount <> 0 or customers <> 0 or size <> 0
        order by merchant, token, interval, cohort_start, period_start`,
    });
    const fresh = await createTestDb();
    const old = await createTestDb();
    try {
      // In batches of a few blocks (on a server, several in flight at once).
      await indexHead(fresh, hooks(), { initialRange: 2, maxRange: 3 });
      const want = await tables(fresh);
      // The live index (batches, a reorg) holds what a fresh one does.
      expect(await tables(db)).toEqual(want);
      // Before: the fold saw no permission event, and there was no start hook.
      const before = mrrAnalytics();
      const moduleOnly: DerivedEvents = (tx, input) =>
        before.derive(tx, { ...input, events: input.events.filter((e) => !permissionChange(e)) });
      await indexHead(old, [
        eventsHook({ derive: moduleOnly, extra: withPermissionEvents(), now: () => 0 }),
        { ...before.hook, onStart: undefined },
      ]);
      const stale = await tables(old);
      expect(stale.movements.length).toBeGreaterThan(0);
      expect(stale).not.toEqual(want);
      // Half of the module allocations' status events as an index from before migration 0035 stored them: the
      // record in `data`, no snapshot columns.
      const snapshots = await old.sql<EventRow[]>`
        select ${old.sql.unsafe(EVENT_COLUMNS)} from event_log e where e.s_status is not null order by e.seq`;
      expect(snapshots.length).toBeGreaterThan(0);
      for (const r of snapshots.filter((_, i) => i % 2 === 0)) {
        await old.sql`update merchant_events set data = ${eventData(r) as never},
          s_subscription_id = null, s_module = null, s_subscriber = null, s_plan_id = null, s_max_executions = null,
          s_created_at = null, s_times_executed = null, s_total_spent = null, s_next_charge_at = null,
          s_allowance_expiry = null, s_paused = null, s_cancelled = null, s_blocked = null, s_status = null,
          s_previous_status = null
          where id = ${r.id}`;
      }
      // Migrated: migration 0056 marks the chain; the next start folds its permission customers again.
      await old.sql`alter table chains drop column mrr_rebuild_due`;
      await old.sql`delete from schema_migrations where name = '0056_add_chains_mrr_rebuild.sql'`;
      expect(await migrate(old.sql)).toEqual(["0056_add_chains_mrr_rebuild.sql"]);
      expect((await old.sql`select mrr_rebuild_due from chains`).map((r) => r.mrr_rebuild_due)).toEqual([true]);
      await indexHead(old);
      expect(await tables(old)).toEqual(want);
      expect((await old.sql`select mrr_rebuild_due from chains`).map((r) => r.mrr_rebuild_due)).toEqual([false]);
      // A later block after the restart goes on from the rebuilt state.
      await chain.testClient.increaseTime({ seconds: 8 * DAY });
      await chain.testClient.mine({ blocks: 1 });
      await keeperRound();
      await indexHead(old);
      await indexHead(fresh);
      expect(await tables(old)).toEqual(await tables(fresh));
    } finally {
      await fresh.close();
      await old.close();
    }
  }, 600_000);
});
