/**
 * The demo `bun run dev` seeds on a fresh anvil: a merchant with two modules and six plans in three tokens, four
 * months of growth (dev/history.ts: sign-ups over the weeks, renewals, plan changes, cancellations, failed renewals
 * and recoveries, a blocked subscriber), then in its last month twenty subscribers whose histories cover every
 * status, activity type and failure reason. Accounts are anvil's unlocked dev accounts (no keys needed): #0
 * deployer, #1 merchant, #4 keeper, subscribers from #2, #3, #5, #7, #9 and #10–#24, the growth customers from account 25 on.
 * Start anvil with {@link demoAnvilArgs} so that the history ends now.
 */
import {
  encodeFunctionData,
  createPublicClient,
  createTestClient,
  createWalletClient,
  http,
  maxUint256,
  parseEventLogs,
  type Abi,
  type Address,
  type Hash,
  type PublicClient,
  type TransactionReceipt,
} from "viem";
import {
  spendPermissionManagerAbi,
  spendPermissionManagerBytecode,
  subscriptionModuleAbi,
  subscriptionProcessorAbi,
  testSmartAccountAbi,
  testSmartAccountBytecode,
  testTokenAbi,
} from "../../chain/abis";
import { chainDefinition } from "../../chain/define";
import { createModule, deployProtocol, deployToken, type DeployWallet } from "../../chain/deploy";
import { createHistory } from "./history";

const DAY = 86_400;
/** Customers of the growth history (anvil accounts from the 26th on). */
const GROWTH_CUSTOMERS = 48;
/** The day of the history on which the twenty named subscribers arrive; their story ends 30 days and 1 h later. */
const STORY_DAY = 93;
/** How long the seeded history is: from anvil's genesis to the last seeded block. */
export const HISTORY_S = (STORY_DAY + 30) * DAY + 3600;

/**
 * anvil arguments for the demo: enough unlocked accounts, and a genesis {@link HISTORY_S} before `nowS` so that the
 * seeded history ends about now (the chain's clock then runs on from there).
 */
export function demoAnvilArgs(nowS = Math.floor(Date.now() / 1000)): string[] {
  return ["--accounts", String(25 + GROWTH_CUSTOMERS), "--timestamp", String(nowS - HISTORY_S)];
}
const USDC = 10n ** 6n;
const DAI = 10n ** 18n;

/** What the demo put on chain. */
export type Seeded = {
  processor: Address;
  startBlock: bigint;
  merchant: Address;
  modules: { streaming: Address; pro: Address };
  usdc: Address;
  sampleWallet: Address;
  subscribers: number;
  subscriptions: number;
  /** Days from the first seeded block to the last. */
  historyDays: number;
  /** Base's Spend Permission manager (canonical address) and its demo permissions, the merchant as spender. */
  spendPermissionManager: Address;
};

const NAMES = [
  "alice", "bob", "carol", "dave", "erin", "frank", "grace", "heidi", "ivan", "judy",
  "mallory", "niaj", "olivia", "peggy", "rupert", "sybil", "trent", "victor", "walter", "yolanda",
] as const; // prettier-ignore
type Name = (typeof NAMES)[number];

/** Clients and one send queue per account (anvil hands out nonces per request: concurrent sends collide). */
async function connect(rpcUrl: string, chainId: number) {
  const chain = chainDefinition(chainId, rpcUrl, "anvil");
  const transport = http(rpcUrl, { retryCount: 0 });
  const pc = createPublicClient({ chain, transport, cacheTime: 0, pollingInterval: 5 }) as PublicClient;
  const test = createTestClient({ chain, transport, mode: "anvil" });
  const all = await createWalletClient({ chain, transport }).getAddresses();
  const needed = 25 + GROWTH_CUSTOMERS;
  if (all.length < needed) throw new Error(`anvil has ${all.length} accounts, the demo needs ${needed}`);
  const wallet = (account: Address) =>
    createWalletClient({ chain, transport, account, pollingInterval: 5 }) as DeployWallet;
  const queues = new Map<Address, Promise<unknown>>();
  /** Sends one call from `from` after that account's previous one, and waits for a successful receipt. */
  function send(from: Address, to: Address, abi: Abi, fn: string, args: unknown[]): Promise<TransactionReceipt> {
    const run = async () => {
      const hash: Hash = await wallet(from).writeContract({ address: to, abi, functionName: fn, args } as never);
      const receipt = await pc.waitForTransactionReceipt({ hash, pollingInterval: 5 });
      if (receipt.status !== "success") throw new Error(`demo seeding: ${fn} from ${from} reverted`);
      return receipt;
    };
    const result = (queues.get(from) ?? Promise.resolve()).then(run, run);
    queues.set(
      from,
      result.catch(() => {}),
    );
    return result;
  }
  const [deployer, merchant, , , keeper] = all as [Address, Address, Address, Address, Address];
  const subs = [all[2], all[3], all[5], all[7], all[9], ...all.slice(10, 25)] as Address[];
  const people = Object.fromEntries(NAMES.map((n, i) => [n, subs[i]!])) as Record<Name, Address>;
  const growth = all.slice(25, needed) as Address[];
  return { pc, test, wallet, send, deployer, merchant, keeper, people, growth, spare: all[6] as Address };
}
type Conn = Awaited<ReturnType<typeof connect>>;

/** Protocol, tokens (USDC, DAI and BUSD whose transferFrom returns false), the keeper, two modules, six plans. */
async function deployDemo(c: Conn) {
  const { pc, wallet, deployer, merchant } = c;
  const { processor, startBlock } = await deployProtocol({
    walletClient: wallet(deployer),
    publicClient: pc,
    feeBps: 100,
    feeRecipient: deployer,
  });
  // The deployer's and the merchant's transactions run side by side.
  const tokens = (async () => {
    const usdc = await deployToken(wallet(deployer), pc, { name: "USD Coin (demo)", symbol: "USDC", decimals: 6 });
    const dai = await deployToken(wallet(deployer), pc, { name: "Dai (demo)", symbol: "DAI", decimals: 18 });
    const busd = await deployToken(wallet(deployer), pc, {
      name: "Broken USD (transferFrom returns false)",
      symbol: "BUSD",
      decimals: 6,
      kind: "false",
    });
    await c.send(deployer, processor, subscriptionProcessorAbi, "setKeeper", [c.keeper, true]);
    return { usdc, dai, busd };
  })();
  const streaming = await createModule(wallet(merchant), pc, processor);
  const pro = await createModule(wallet(merchant), pc, processor);
  const { usdc, dai, busd } = await tokens;
  const plan = (module: Address, args: unknown[]) =>
    c.send(merchant, module, subscriptionModuleAbi, "createPlan", args);
  // Streaming: 1 = monthly in USDC, 2 = yearly in DAI, 3 = "plus" monthly in USDC.
  // Pro: 1 = weekly in DAI, 2 = monthly in BUSD, 3 = "team" weekly in DAI.
  await Promise.all([
    plan(streaming, [1, usdc, 9_990_000n, 30 * DAY, 3 * DAY]),
    plan(streaming, [2, dai, 99n * DAI, 365 * DAY, 7 * DAY]),
    plan(streaming, [3, usdc, 29_990_000n, 30 * DAY, 3 * DAY]),
    plan(pro, [1, dai, 5n * DAI, 7 * DAY, 2 * DAY]),
    plan(pro, [2, busd, 20n * USDC, 30 * DAY, 3 * DAY]),
    plan(pro, [3, dai, 12n * DAI, 7 * DAY, 2 * DAY]),
  ]);
  return { processor, startBlock, usdc, dai, busd, streaming, pro };
}
type Deployed = Awaited<ReturnType<typeof deployDemo>>;

/** The calls the demo story is told with. */
function actions(c: Conn, d: Deployed) {
  const proc = (from: Address, fn: string, args: unknown[]) =>
    c.send(from, d.processor, subscriptionProcessorAbi, fn, args);
  const mod = (from: Address, module: Address, fn: string, args: unknown[]) =>
    c.send(from, module, subscriptionModuleAbi, fn, args);
  const token = (from: Address, address: Address, fn: string, args: unknown[]) =>
    c.send(from, address, testTokenAbi, fn, args);
  const fund = async (who: Address, t: Address, amount: bigint, approve: bigint | null = maxUint256) => {
    await token(who, t, "mint", [who, amount]);
    if (approve !== null) await token(who, t, "approve", [d.processor, approve]);
  };
  const subscribe = async (who: Address, module: Address, planId: number, maxExecutions = 0, allowanceExpiry = 0n) => {
    const r = await mod(who, module, "subscribe", [planId, maxExecutions, allowanceExpiry]);
    const [ev] = parseEventLogs({ abi: subscriptionModuleAbi, eventName: "SubscriptionCreated", logs: r.logs });
    if (!ev) throw new Error("demo seeding: subscribe emitted no SubscriptionCreated");
    return ev.args.subscriptionId;
  };
  const charge = (module: Address, id: bigint, by: Address = c.keeper) => proc(by, "charge", [module, id]);
  return { proc, mod, token, fund, subscribe, charge };
}
type Actions = ReturnType<typeof actions>;
type Ids = Record<string, bigint>;

/** Day 0: subscriptions that get their first charge now. */
async function dayZero(c: Conn, d: Deployed, a: Actions): Promise<Ids> {
  const { fund, subscribe, proc } = a;
  const { usdc, dai, streaming, pro } = d;
  const p = c.people;
  const t0 = (await c.pc.getBlock({ blockTag: "latest" })).timestamp;
  const started: [string, Promise<bigint>][] = [
    ["alice", fund(p.alice, usdc, 100n * USDC).then(() => subscribe(p.alice, streaming, 1))],
    ["bob", fund(p.bob, dai, 500n * DAI).then(() => subscribe(p.bob, streaming, 2))],
    // carol pays from prepaid credit: she approves just the refill, so charges never touch her wallet.
    [
      "carol",
      fund(p.carol, dai, 20n * DAI, 20n * DAI).then(async () => {
        const id = await subscribe(p.carol, pro, 1);
        await proc(p.carol, "refill", [pro, id, 20n * DAI]);
        return id;
      }),
    ],
    ["dave", fund(p.dave, usdc, 100n * USDC).then(() => subscribe(p.dave, streaming, 1))],
    ["erin", fund(p.erin, usdc, 100n * USDC).then(() => subscribe(p.erin, streaming, 1))],
    ["frank", fund(p.frank, dai, 100n * DAI).then(() => subscribe(p.frank, pro, 1))],
    // judy's allowance expires after a day: her renewal fails with AllowanceExpired.
    ["judy", fund(p.judy, usdc, 100n * USDC).then(() => subscribe(p.judy, streaming, 1, 0, t0 + BigInt(DAY)))],
    // mallory holds exactly one payment: her renewal fails with InsufficientBalance.
    ["mallory", fund(p.mallory, dai, 5n * DAI).then(() => subscribe(p.mallory, pro, 1))],
    ["niaj", fund(p.niaj, dai, 100n * DAI).then(() => subscribe(p.niaj, pro, 1))],
    // peggy allows a single execution.
    ["peggy", fund(p.peggy, dai, 100n * DAI).then(() => subscribe(p.peggy, pro, 1, 1))],
    ["rupert", fund(p.rupert, dai, 500n * DAI).then(() => subscribe(p.rupert, streaming, 2))],
    ["sybil", fund(p.sybil, usdc, 100n * USDC).then(() => subscribe(p.sybil, streaming, 1))],
    ["trent", fund(p.trent, dai, 100n * DAI).then(() => subscribe(p.trent, pro, 1))],
    ["victor", fund(p.victor, dai, 500n * DAI).then(() => subscribe(p.victor, streaming, 2))],
    ["walter", fund(p.walter, usdc, 100n * USDC).then(() => subscribe(p.walter, streaming, 1))],
    ["yolandaA", fund(p.yolanda, usdc, 100n * USDC).then(() => subscribe(p.yolanda, streaming, 1))],
    ["yolandaB", fund(p.yolanda, dai, 500n * DAI).then(() => subscribe(p.yolanda, streaming, 2))],
  ];
  const ids: Ids = Object.fromEntries(await Promise.all(started.map(async ([name, id]) => [name, await id] as const)));
  const streamingIds = ["alice", "dave", "erin", "judy", "sybil", "walter", "yolandaA", "bob", "rupert", "victor"];
  await Promise.all([
    ...[...streamingIds, "yolandaB"].map((n) => a.charge(streaming, ids[n]!)),
    ...["carol", "frank", "mallory", "niaj", "peggy", "trent"].map((n) => a.charge(pro, ids[n]!)),
  ]);
  return ids;
}

/** Day 0, later: pauses, cancels, blocks, a revoked allowance, a refill that is withdrawn again. */
async function dayZeroChanges(c: Conn, d: Deployed, a: Actions, ids: Ids) {
  const { mod, token, proc } = a;
  const { streaming, pro } = d;
  const { merchant, people: p } = c;
  await Promise.all([
    mod(p.dave, streaming, "pause", [ids.dave]),
    mod(p.erin, streaming, "cancel", [ids.erin]),
    mod(merchant, pro, "blockSubscriber", [p.frank]),
    token(p.niaj, d.dai, "approve", [d.processor, 0n]),
    mod(merchant, streaming, "pause", [ids.rupert]).then(() => mod(merchant, streaming, "resume", [ids.rupert])),
    mod(p.sybil, streaming, "cancel", [ids.sybil]),
    mod(merchant, streaming, "blockSubscriber", [p.victor]).then(() =>
      mod(merchant, streaming, "unblockSubscriber", [p.victor]),
    ),
    proc(p.walter, "refill", [streaming, ids.walter, 9_990_000n]).then(() =>
      proc(p.walter, "withdrawCredit", [streaming, ids.walter]),
    ),
  ]);
}

/** Day 30 + 1 h (`at`): monthly renewals are due, weekly plans without a renewal have lapsed. */
async function dayThirty(c: Conn, d: Deployed, a: Actions, ids: Ids, at: number) {
  const { fund, subscribe, mod, token, charge } = a;
  const { usdc, busd, dai, streaming, pro } = d;
  const p = c.people;
  await c.test.setNextBlockTimestamp({ timestamp: BigInt(at) });
  await c.test.mine({ blocks: 1 });
  const [sybil2, grace, heidi, ivan, olivia] = await Promise.all([
    subscribe(p.sybil, streaming, 1),
    // Failing first charges keep these PENDING: no allowance, no balance, a token whose transferFrom fails.
    subscribe(p.grace, streaming, 1),
    token(p.heidi, usdc, "approve", [d.processor, maxUint256]).then(() => subscribe(p.heidi, streaming, 1)),
    fund(p.ivan, busd, 100n * USDC).then(() => subscribe(p.ivan, pro, 2)),
    fund(p.olivia, dai, 100n * DAI).then(() => subscribe(p.olivia, pro, 1)),
  ]);
  await mod(p.olivia, pro, "pause", [olivia]);
  await Promise.all([
    ...[ids.alice, ids.judy, ids.walter, ids.yolandaA, sybil2, grace, heidi].map((id) => charge(streaming, id!)),
    ...[ids.carol, ids.mallory, ids.niaj, ivan].map((id) => charge(pro, id!)),
    // The merchant may charge its own subscriptions: this record's keeper_address is the merchant.
    charge(pro, ids.trent!, c.merchant),
  ]);
}

/** Seeds the demo on a fresh anvil and says what it put there. */
export async function seedDemo(rpcUrl: string, chainId: number): Promise<Seeded> {
  const c = await connect(rpcUrl, chainId);
  const d = await deployDemo(c);
  const a = actions(c, d);
  const t0 = Number((await c.pc.getBlock({ blockTag: "latest" })).timestamp);
  await c.test.setBlockGasLimit({ gasLimit: 1_000_000_000n });
  const history = createHistory({
    rpcUrl,
    processor: d.processor,
    keeper: c.keeper,
    merchant: c.merchant,
    customers: c.growth,
    t0,
    lastDay: STORY_DAY + 29,
    plans: {
      basic: { module: d.streaming, planId: 1, token: d.usdc, amount: 9_990_000n, interval: 30 * DAY },
      plus: { module: d.streaming, planId: 3, token: d.usdc, amount: 29_990_000n, interval: 30 * DAY },
      yearly: { module: d.streaming, planId: 2, token: d.dai, amount: 99n * DAI, interval: 365 * DAY },
      weekly: { module: d.pro, planId: 1, token: d.dai, amount: 5n * DAI, interval: 7 * DAY },
      team: { module: d.pro, planId: 3, token: d.dai, amount: 12n * DAI, interval: 7 * DAY },
    },
  });
  await history.runDays(0, STORY_DAY);
  // The named subscribers' story: its day 0 is the history's STORY_DAY, and it ends 30 days and 1 h later.
  const storyStart = t0 + STORY_DAY * DAY;
  await c.test.setNextBlockTimestamp({ timestamp: BigInt(storyStart) });
  await c.test.mine({ blocks: 1 });
  const ids = await dayZero(c, d, a);
  await dayZeroChanges(c, d, a, ids);
  const sp = await spendPermissionsDayZero(c, d);
  await history.runDays(STORY_DAY, STORY_DAY + 30);
  await dayThirty(c, d, a, ids, storyStart + 30 * DAY + 3600);
  await spendPermissionsDayThirty(c, sp);
  return {
    processor: d.processor,
    startBlock: d.startBlock,
    merchant: c.merchant,
    modules: { streaming: d.streaming, pro: d.pro },
    usdc: d.usdc,
    sampleWallet: c.people.yolanda,
    subscribers: NAMES.length + GROWTH_CUSTOMERS,
    subscriptions: 22 + history.subscriptions,
    historyDays: Math.round(HISTORY_S / DAY),
    spendPermissionManager: MANAGER,
  };
}

/**
 * A new subscriber (anvil account #6, unused by the seed) funds, approves and subscribes to the streaming monthly
 * plan now: the keeper charges it at once, so the running service has something live to announce.
 */
export async function subscribeNow(rpcUrl: string, chainId: number, seeded: Seeded): Promise<bigint> {
  const c = await connect(rpcUrl, chainId);
  const who = c.spare;
  await c.send(who, seeded.usdc, testTokenAbi, "mint", [who, 100n * USDC]);
  await c.send(who, seeded.usdc, testTokenAbi, "approve", [seeded.processor, maxUint256]);
  const r = await c.send(who, seeded.modules.streaming, subscriptionModuleAbi, "subscribe", [1, 0, 0n]);
  const [ev] = parseEventLogs({ abi: subscriptionModuleAbi, eventName: "SubscriptionCreated", logs: r.logs });
  if (!ev) throw new Error("demo: subscribe emitted no SubscriptionCreated");
  return ev.args.subscriptionId;
}

const MANAGER = "0xf85210B21cC50302F477BA56686d2019dC9b67Ad" as Address;
const FOREVER = 281474976710655;

/** A permission of the demo account for the merchant's spender in USDC. */
const demoPermission = (
  account: Address,
  spender: Address,
  usdc: Address,
  start: number,
  period: number,
  salt: bigint,
) => ({
  account,
  spender,
  token: usdc,
  allowance: 9_990_000n,
  period,
  start,
  end: FOREVER,
  salt,
  extraData: "0x" as const,
});
type DemoPermission = ReturnType<typeof demoPermission>;

/**
 * Base Spend Permissions, day 0: the manager at its canonical address, smart accounts (the manager one of their
 * owners) of the subscribers "judy", with USDC, and "mallory", with exactly one weekly payment, and three permissions
 * for the merchant as spender: judy's monthly one (the running service's keeper charges its second month), mallory's
 * weekly one charged now (lapsed by day 30; her empty balance keeps the keeper's retries from sending), and judy's
 * second monthly one, revoked on day 30.
 */
async function spendPermissionsDayZero(c: Conn, d: Deployed): Promise<{ account: Address; perms: DemoPermission[] }> {
  const { pc, wallet, deployer, test } = c;
  const deploy = async (abi: Abi, bytecode: `0x${string}`, args: unknown[]) => {
    const hash = await wallet(deployer).deployContract({ abi, bytecode, args } as never);
    const r = await pc.waitForTransactionReceipt({ hash, pollingInterval: 5 });
    if (!r.contractAddress) throw new Error("demo seeding: a deployment produced no contract");
    return r.contractAddress;
  };
  const built = await deploy(spendPermissionManagerAbi as Abi, spendPermissionManagerBytecode, [
    "0xcfCE48B757601F3f351CB6f434CB0517aEEE293D",
    "0x011A61C07DbF256A68256B1cB51A5e246730aB92",
  ]);
  await test.setCode({ address: MANAGER, bytecode: (await pc.getCode({ address: built }))! });
  const smartAccount = (owner: Address) =>
    deploy(testSmartAccountAbi as Abi, testSmartAccountBytecode, [
      "0x5FF137D4b0FDCD49DcA30c7CF57E578a026d2789",
      [owner, MANAGER],
    ]);
  const [account, mallory] = [await smartAccount(c.people.judy), await smartAccount(c.people.mallory)];
  await c.send(deployer, d.usdc, testTokenAbi, "mint", [account, 1000n * USDC]);
  await c.send(deployer, d.usdc, testTokenAbi, "mint", [mallory, 9_990_000n]);
  const now = Number((await pc.getBlock()).timestamp) + 1;
  const perms = [
    demoPermission(account, c.merchant, d.usdc, now, 30 * DAY, 1n),
    demoPermission(mallory, c.merchant, d.usdc, now, 7 * DAY, 2n),
    demoPermission(account, c.merchant, d.usdc, now, 30 * DAY, 3n),
  ];
  const call = (fn: string, args: unknown[]) => ({
    target: MANAGER,
    value: 0n,
    data: encodeFunctionData({ abi: spendPermissionManagerAbi, functionName: fn, args } as never),
  });
  // One after the other, so that the records list in this order.
  const approve = (owner: Address, p: DemoPermission) =>
    c.send(owner, p.account, testSmartAccountAbi as Abi, "executeBatch", [[call("approve", [p])]]);
  await test.setNextBlockTimestamp({ timestamp: BigInt(now) });
  await approve(c.people.judy, perms[0]!);
  await approve(c.people.mallory, perms[1]!);
  await approve(c.people.judy, perms[2]!);
  await c.send(c.merchant, MANAGER, spendPermissionManagerAbi as Abi, "spend", [perms[1], 9_990_000n]);
  return { account, perms };
}

/**
 * Day 30: the third permission is revoked by its account. The first one's second month is due: the keeper of the
 * running service (SPEND_PERMISSION_KEEPER_KEYS holds the merchant's key) charges it.
 */
async function spendPermissionsDayThirty(c: Conn, sp: { account: Address; perms: DemoPermission[] }) {
  const revoke = encodeFunctionData({ abi: spendPermissionManagerAbi, functionName: "revoke", args: [sp.perms[2]!] });
  await c.send(c.people.judy, sp.account, testSmartAccountAbi as Abi, "executeBatch", [
    [{ target: MANAGER, value: 0n, data: revoke }],
  ]);
}
