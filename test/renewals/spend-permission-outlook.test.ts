/**
 * The renewal outlook of spend permissions (spend-permissions spec §4, §10 test 10) end to end on a real anvil chain:
 * the project's manager and smart accounts, the service's indexer leader evaluating, the API listing. USDC with 6
 * decimals, allowance 9,990,000, period 30 days, a horizon that covers S+P. A balance of 4,000,000 is at risk for
 * 5,990,000 and a mint recovers it; two permissions of one account against 15,000,000 renew in due order; a module
 * subscription and a permission of one wallet share its balance, ties going to the module subscription; a manager
 * removed as owner is `ManagerNotOwner`; a revoked permission has no outlook; a native-token permission reads the
 * native balance.
 */
import { afterAll, beforeAll, describe, expect, setDefaultTimeout, test } from "bun:test";
import { encodeFunctionData, maxUint256, parseEventLogs, type Address } from "viem";
import { createApiKey } from "../../src/auth/api-keys";
import { subscriptionModuleAbi, testSmartAccountAbi, testTokenAbi } from "../../src/chain/abis";
import { NATIVE_TOKEN, type SpendPermission } from "../../src/domain/spend-permission";
import type { Service } from "../../src/service";
import { createTestChain, type TestChain, type WalletName } from "../../testkit/chain";
import { freePort, until } from "../../testkit/cli";
import parsePrometheusTextFormat from "parse-prometheus-text-format";
import { startChainService } from "../../testkit/service";
import {
  TEST_ALLOWANCE,
  TEST_PERIOD,
  deploySpendPermissions,
  type Call,
  type SpendPermissionKit,
} from "../../testkit/spend-permissions";

// Real chains and services: slower than bun's default 5 s per test when files run together.
setDefaultTimeout(60_000);

const DAY = 86_400;
const ETH = 10n ** 18n;
let chain: TestChain;
let kit: SpendPermissionKit;
let service: Service;
let usdc: Address;
let mod: Address;
let spender: Address;
/** API keys of the spender (the permissions' merchant) and of the module's merchant. */
let spenderKey: string;
let moduleKey: string;
let S: number;
let moduleSub: bigint;
const acct: Record<string, Address> = {};
const perm: Record<string, SpendPermission> = {};

const lower = (a: string) => a.toLowerCase();
const iso = (t: number) => new Date(t * 1000).toISOString();
const get = async (path: string, key = spenderKey) => {
  const res = await fetch(service.url + path, { headers: { authorization: `Bearer ${key}` } });
  return JSON.parse(await res.text());
};
const recordOf = (p: SpendPermission) => get(`/v0/subscriptions/${lower(spender)}/${kit.hash(p)}`);
/** Waits until the permission's outlook satisfies `ok` (RENEWAL_CHECK_INTERVAL_S=1: re-read every second). */
const outlookWhen = (p: SpendPermission, what: string, ok: (r: any) => boolean) =>
  until(
    what,
    async () => {
      const r = (await recordOf(p)).renewal;
      return r && ok(r) ? r : null;
    },
    20_000,
  );
const events = async (type: string, p: SpendPermission) =>
  ((await get(`/v0/events/${lower(spender)}?type=${type}`)) as any[]).filter(
    (e) => e.data.object.on_chain_id === kit.hash(p),
  );
const mint = (to: Address, amount: bigint) =>
  chain.send(
    chain
      .wallet("deployer")
      .writeContract({ address: usdc, abi: testTokenAbi, functionName: "mint", args: [to, amount] }),
  );
const call = (target: Address, abi: any, functionName: string, args: unknown[]): Call => ({
  target,
  value: 0n,
  data: encodeFunctionData({ abi, functionName, args } as never),
});
/** A smart account of `owner` with the manager as an owner, holding `usdc` of the test token. */
const account = async (name: string, owner: WalletName, usdcAmount: bigint) => {
  acct[name] = await kit.createAccount(owner);
  if (usdcAmount > 0n) await mint(acct[name]!, usdcAmount);
  return acct[name]!;
};
/** The account approves `p` itself (start in the future or the past: no charge yet). */
const approve = (owner: WalletName, p: SpendPermission) =>
  kit.executeAs(owner, p.account, [kit.managerCall("approve", [p])]);

beforeAll(async () => {
  chain = await createTestChain();
  kit = await deploySpendPermissions(chain);
  usdc = await chain.deployToken({ symbol: "USDC", decimals: 6 });
  spender = await kit.createAccount("merchant", { managerOwner: false });
  mod = await chain.createModule("merchant");
  await chain.createPlan("merchant", mod, { planId: 1, token: usdc, amount: TEST_ALLOWANCE, interval: TEST_PERIOD });
  S = Number(await chain.now()) + 10;
  // alice: the Base Pay first charge at S (approveWithSignature + spend by the spender), 4,000,000 left: N = S+P.
  await account("alice", "alice", TEST_ALLOWANCE + 4_000_000n);
  perm.alice = kit.permission({ account: acct.alice!, spender, token: usdc, start: S, salt: 1n });
  await chain.setNextTimestamp(S);
  await kit.executeAs("merchant", spender, [
    kit.managerCall("approveWithSignature", [perm.alice, await kit.sign("alice", perm.alice)]),
    kit.managerCall("spend", [perm.alice, TEST_ALLOWANCE]),
  ]);
  // bob: two permissions in USDC, due one day apart, against 15,000,000.
  await account("bob", "bob", 15_000_000n);
  perm.bob1 = kit.permission({ account: acct.bob!, spender, token: usdc, start: S + DAY, salt: 2n });
  perm.bob2 = kit.permission({ account: acct.bob!, spender, token: usdc, start: S + 2 * DAY, salt: 3n });
  await approve("bob", perm.bob1);
  await approve("bob", perm.bob2);
  // carol: a module subscription (due at its creation) and a permission due earlier still: both past due, so both
  // are due at the evaluated block's time — a tie the module subscription wins.
  await account("carol", "carol", TEST_ALLOWANCE + 5_000_000n);
  perm.carol = kit.permission({ account: acct.carol!, spender, token: usdc, start: S - 100, salt: 4n });
  await approve("carol", perm.carol);
  const subscribed = await kit.executeAs("carol", acct.carol!, [
    call(usdc, testTokenAbi, "approve", [chain.processor, maxUint256]),
    call(mod, subscriptionModuleAbi, "subscribe", [1, 0, 0n]),
  ]);
  const [created] = parseEventLogs({
    abi: subscriptionModuleAbi,
    eventName: "SubscriptionCreated",
    logs: subscribed.logs,
  });
  moduleSub = created!.args.subscriptionId;
  // dave: one permission with plenty of balance (its manager is removed as owner later).
  await account("dave", "dave", 20_000_000n);
  perm.dave = kit.permission({ account: acct.dave!, spender, token: usdc, start: S + DAY, salt: 5n });
  await approve("dave", perm.dave);
  // erin: one permission she revokes later, and one in the native token (the account holds 1 ETH).
  await account("erin", "erin", 20_000_000n);
  perm.erin = kit.permission({ account: acct.erin!, spender, token: usdc, start: S + DAY, salt: 6n });
  await approve("erin", perm.erin);
  await account("native", "erin", 0n);
  perm.native = kit.permission({
    account: acct.native!,
    spender,
    token: NATIVE_TOKEN,
    allowance: 2n * ETH,
    start: S + DAY,
    salt: 7n,
  });
  await approve("erin", perm.native);
  service = await startChainService(chain, {
    SPEND_PERMISSION_MANAGER: kit.manager,
    SPEND_PERMISSION_SPENDERS: spender,
    ENTRYPOINT_ADDRESSES: kit.entryPoint,
    RENEWAL_CHECK_INTERVAL_S: "1",
    RENEWAL_HORIZON_S: String(TEST_PERIOD + 2 * DAY),
    SIWE_DOMAIN: "localhost",
    ROLES: "api,indexer",
    METRICS_PORT: String(await freePort()),
  });
  spenderKey = (await createApiKey(service.db.sql, { merchant: lower(spender) })).key;
  moduleKey = (await createApiKey(service.db.sql, { merchant: lower(chain.address("merchant")) })).key;
  const head = await chain.publicClient.getBlockNumber();
  await service.indexer!.waitForBlock(head, 20_000);
  await until("every outlook judged at the head", async () => {
    const [row] = await service.db.sql<{ n: number }[]>`
      select count(*)::int as n from renewal_outlooks where checked_block >= ${head.toString()}`;
    return row!.n === 8; // alice, bob ×2, carol ×2 (module and permission), dave, erin, native
  });
}, 120_000);

afterAll(async () => {
  await service?.stop();
  await chain?.stop();
});

describe("the outlook of a spend permission", () => {
  test("§10 test 10: a balance of 4,000,000 is at risk for 5,990,000; a mint sends renewal_recovered", async () => {
    const risk = await outlookWhen(perm.alice!, "alice at risk", (r) => r.outlook === "at_risk");
    expect(risk).toMatchObject({
      due_at: iso(S + TEST_PERIOD),
      outlook: "at_risk",
      reason: "InsufficientBalance",
      amount: "9990000",
      currency: "USDC",
      token_decimals: 6,
      balance: "4000000",
      allowance: "9990000",
      credit: "0",
      shortfall: "5990000",
    });
    const [sent] = await until("alice's renewal_at_risk", async () => {
      const l = await events("subscription.renewal_at_risk", perm.alice!);
      return l.length ? l : null;
    });
    expect(sent.data.renewal).toMatchObject({ reason: "InsufficientBalance", shortfall: "5990000" });
    expect(sent.data.previous_renewal).toBeNull();
    expect(sent.data.object).toMatchObject({ source: "spend_permission", on_chain_id: kit.hash(perm.alice!) });
    expect(sent.data.object.renewal).toEqual(sent.data.renewal);

    await mint(acct.alice!, 10_000_000n);
    const [recovered] = await until("alice's renewal_recovered", async () => {
      const l = await events("subscription.renewal_recovered", perm.alice!);
      return l.length ? l : null;
    });
    expect(recovered.data.renewal).toMatchObject({
      outlook: "will_renew",
      reason: null,
      balance: "14000000",
      shortfall: "0",
    });
    expect(recovered.data.previous_renewal).toEqual(sent.data.renewal);
    expect((await events("subscription.renewal_at_risk", perm.alice!)).length).toBe(1);
  });

  test("two permissions of one account in one token against 15,000,000: the earlier renews, the later is at risk", async () => {
    const first = await outlookWhen(perm.bob1!, "bob's first", () => true);
    const second = await outlookWhen(perm.bob2!, "bob's second", () => true);
    expect(first).toMatchObject({ due_at: iso(S + DAY), outlook: "will_renew", balance: "15000000", shortfall: "0" });
    expect(second).toMatchObject({
      due_at: iso(S + 2 * DAY),
      outlook: "at_risk",
      reason: "InsufficientBalance",
      balance: "15000000",
      shortfall: "4980000",
    });
  });

  test("a module subscription and a permission share the wallet's balance; a tie goes to the module subscription", async () => {
    const p = await outlookWhen(perm.carol!, "carol's permission", () => true);
    const m = (await get(`/v0/subscriptions/${lower(chain.address("merchant"))}/${moduleSub}`, moduleKey)).renewal;
    expect(m).toMatchObject({ outlook: "will_renew", balance: "14990000", allowance: maxUint256.toString() });
    expect(p).toMatchObject({
      outlook: "at_risk",
      reason: "InsufficientBalance",
      balance: "14990000",
      shortfall: "4990000",
    });
    // Both past due: due at the evaluated block's time, the same instant.
    expect(p.due_at).toBe(p.checked_at);
    expect(m.due_at).toBe(m.checked_at);
  });

  test("the manager removed as an owner of the account: ManagerNotOwner for the full amount", async () => {
    expect((await outlookWhen(perm.dave!, "dave's outlook", () => true)).outlook).toBe("will_renew");
    await kit.executeAs("dave", acct.dave!, [
      call(acct.dave!, testSmartAccountAbi, "removeOwnerAddress", [kit.manager]),
    ]);
    const r = await outlookWhen(perm.dave!, "dave at risk", (o) => o.outlook === "at_risk");
    expect(r).toMatchObject({ reason: "ManagerNotOwner", balance: "20000000", shortfall: "9990000" });
    const [sent] = await until("dave's renewal_at_risk", async () => {
      const l = await events("subscription.renewal_at_risk", perm.dave!);
      return l.length ? l : null;
    });
    expect(sent.data.renewal.reason).toBe("ManagerNotOwner");
    const listed = await get(`/v0/renewals/${lower(spender)}?reason=ManagerNotOwner`);
    expect(listed.map((i: any) => i.on_chain_id)).toEqual([kit.hash(perm.dave!)]);
    const stats = await get(`/v0/stats/${lower(spender)}`);
    const usdcTotals = stats.renewals.find((t: any) => t.token === lower(usdc));
    expect(usdcTotals.at_risk.by_reason.ManagerNotOwner).toEqual({ count: 1, amount: "9990000" });
  });

  test("a revoked permission has no outlook, in its record or the list", async () => {
    expect((await outlookWhen(perm.erin!, "erin's outlook", () => true)).outlook).toBe("will_renew");
    await kit.executeAs("erin", acct.erin!, [kit.managerCall("revoke", [perm.erin])]);
    await service.indexer!.waitForBlock(await chain.publicClient.getBlockNumber(), 20_000);
    const record = await recordOf(perm.erin!);
    expect(record.status).toBe("CANCELLED");
    expect(record.renewal).toBeNull();
    const listed = (await get(`/v0/renewals/${lower(spender)}`)) as any[];
    expect(listed.some((i) => i.on_chain_id === kit.hash(perm.erin!))).toBe(false);
    await until("its stored outlook deleted", async () => {
      const [row] = await service.db.sql<{ n: number }[]>`
        select count(*)::int as n from renewal_outlooks where subscriber = ${lower(acct.erin!)}`;
      return row!.n === 0;
    });
  });

  test("a native-token permission is judged against the account's native balance", async () => {
    const r = await outlookWhen(perm.native!, "the native outlook", () => true);
    expect(r).toMatchObject({
      outlook: "at_risk",
      reason: "InsufficientBalance",
      amount: (2n * ETH).toString(),
      currency: "ETH",
      token_decimals: 18,
      balance: ETH.toString(),
      shortfall: ETH.toString(),
    });
    await chain.testClient.setBalance({ address: acct.native!, value: 3n * ETH });
    const ok = await outlookWhen(perm.native!, "native will renew", (o) => o.outlook === "will_renew");
    expect(ok.balance).toBe((3n * ETH).toString());
  });
});

describe("GET /v0/renewals/:merchant with spend permissions", () => {
  test("items name the permission (hash, manager, plan key), by due_at then id, and page by allocation id", async () => {
    const items = (await get(`/v0/renewals/${lower(spender)}`)) as any[];
    const mgr = lower(kit.manager);
    const bob1 = items.find((i) => i.on_chain_id === kit.hash(perm.bob1!));
    expect(bob1).toMatchObject({
      allocation_id: `${chain.chainId}:${mgr}:${kit.hash(perm.bob1!)}`,
      module_address: mgr,
      user_address: lower(acct.bob!),
      plan_id: `${chain.chainId}:${mgr}:${lower(spender)}:${lower(usdc)}:${TEST_ALLOWANCE}:${TEST_PERIOD}`,
      outlook: "will_renew",
    });
    // Only the spender's: the module subscription is another merchant's.
    expect(items.some((i) => i.on_chain_id === moduleSub.toString())).toBe(false);
    const keys = items.map((i) => [Date.parse(i.due_at), BigInt(i.on_chain_id)] as const);
    const sorted = [...keys].sort((a, b) => a[0] - b[0] || (a[1] < b[1] ? -1 : a[1] > b[1] ? 1 : 0));
    expect(keys).toEqual(sorted);
    const page = (await get(`/v0/renewals/${lower(spender)}?limit=2`)) as any[];
    const rest = (await get(
      `/v0/renewals/${lower(spender)}?starting_after=${encodeURIComponent(page[1].allocation_id)}`,
    )) as any[];
    expect([...page, ...rest].map((i) => i.allocation_id)).toEqual(items.map((i) => i.allocation_id));
  });
});

describe("metrics", () => {
  type Family = { name: string; metrics: { value: string; labels?: Record<string, string> }[] };
  const family = async (name: string) =>
    (parsePrometheusTextFormat(await (await fetch(service.metricsUrl!)).text()) as Family[]).find(
      (f) => f.name === name,
    )?.metrics ?? [];
  const count = async (name: string, labels: Record<string, string>) =>
    Number((await family(name)).find((m) => Object.entries(labels).every(([k, v]) => m.labels?.[k] === v))?.value ?? 0);

  test("outlooks by reason count permissions; a permission's charge counts against the outlook that stood", async () => {
    expect(await count("renewal_outlooks", { outlook: "at_risk", reason: "ManagerNotOwner" })).toBe(1);
    const before = await count("renewal_predictions_total", { predicted: "will_renew", actual: "succeeded" });
    // alice's outlook for S+P stands at will_renew (recovered); the spender charges at S+P.
    await chain.setNextTimestamp(S + TEST_PERIOD);
    await kit.executeAs("merchant", spender, [kit.managerCall("spend", [perm.alice, TEST_ALLOWANCE])]);
    await service.indexer!.waitForBlock(await chain.publicClient.getBlockNumber(), 20_000);
    expect(await count("renewal_predictions_total", { predicted: "will_renew", actual: "succeeded" })).toBe(before + 1);
  });
});
