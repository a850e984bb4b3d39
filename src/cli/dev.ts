/**
 * `bun run dev`: the whole system on one machine with nothing to configure. Starts anvil (port 8545 when free),
 * deploys the protocol and demo tokens, seeds a demo merchant with two modules, four plans and twenty subscribers
 * whose histories cover every status, activity type and failure reason, then runs indexer, keeper and API on a
 * fresh embedded database (./.data/dev) and prints the URLs, the merchant and an API key.
 *
 * Env/flags: PORT / --port (API, default 3000 or any free port), ANVIL_PORT / --anvil-port, LOG_LEVEL (default warn),
 * DEV_DATA_DIR (default ./.data/dev). Ctrl-C stops everything it started, anvil included.
 */
import { rmSync } from "node:fs";
import {
  createPublicClient,
  createTestClient,
  createWalletClient,
  http,
  maxUint256,
  parseEventLogs,
  type Abi,
  type Address,
  type Chain,
  type Hash,
  type PublicClient,
  type TransactionReceipt,
} from "viem";
import { startAnvil, type Anvil } from "../chain/anvil";
import { ConfigError, loadConfig } from "../common/config";
import { chainDefinition } from "../chain/define";
import { subscriptionModuleAbi, subscriptionProcessorAbi, testTokenAbi } from "../chain/abis";
import { createModule, deployProtocol, deployToken, type DeployWallet } from "../chain/deploy";
import { createApiKey } from "../auth/api-keys";
import { createDb, type Db } from "../db/client";
import { migrate } from "../db/migrate";
import { createLogger, type LogLevel } from "../common/log";
import { exitOnSignals, startService, startErrorMessage, type Service } from "../service";

/** anvil's well-known dev key #4 (mnemonic "test … junk"): the demo keeper. Never use it on a real chain. */
const DEV_KEEPER_KEY = "0x47e179ec197488593b187f80a00eb0da91f1b9d0b13f8733639f19c30a34926a";
const DAY = 86_400;
const USDC = 10n ** 6n;
const DAI = 10n ** 18n;

/** Options for {@link runDev}. */
export type DevOptions = {
  /** API port (default: PORT, else 3000 when free, else any free port). */
  port?: number;
  /** anvil port (default: ANVIL_PORT, else 8545 when free, else any free port). */
  anvilPort?: number;
  dataDir?: string;
  logLevel?: LogLevel;
};

/** The running dev environment. */
export type DevEnvironment = {
  banner: string;
  url: string;
  merchant: Address;
  apiKey: string;
  rpcUrl: string;
  anvilPort: number;
  processor: Address;
  stop: () => Promise<void>;
};

/** What the demo put on chain. */
type Seeded = {
  processor: Address;
  startBlock: bigint;
  merchant: Address;
  modules: { streaming: Address; pro: Address };
  sampleWallet: Address;
  subscribers: number;
  subscriptions: number;
};

async function portFree(port: number): Promise<boolean> {
  try {
    const server = Bun.listen({ hostname: "127.0.0.1", port, socket: { data() {} } });
    server.stop(true);
    return true;
  } catch {
    return false;
  }
}

async function pickPort(explicit: number | undefined, preferred: number): Promise<number | undefined> {
  if (explicit !== undefined) return explicit;
  return (await portFree(preferred)) ? preferred : undefined;
}

/** A port free on the loopback interface now (the API's port must be known before start: SIWE_DOMAIN names it). */
function anyFreePort(): number {
  const server = Bun.listen({ hostname: "127.0.0.1", port: 0, socket: { data() {} } });
  const port = server.port;
  server.stop(true);
  return port;
}

/** Reads `--name value` or `--name=value` from argv. */
function flag(argv: string[], name: string): string | undefined {
  for (let i = 0; i < argv.length; i++) {
    if (argv[i] === `--${name}`) return argv[i + 1];
    if (argv[i]!.startsWith(`--${name}=`)) return argv[i]!.slice(name.length + 3);
  }
  return undefined;
}

function portArg(raw: string | undefined, name: string): number | undefined {
  if (raw === undefined || raw === "") return undefined;
  if (!/^\d+$/.test(raw) || Number(raw) > 65535) throw new ConfigError(`${name}=${JSON.stringify(raw)} is not a port`);
  return Number(raw);
}

/**
 * Seeds the demo on a fresh anvil. Accounts are anvil's unlocked dev accounts (no keys needed):
 * #0 deployer, #1 merchant, #4 keeper, and twenty subscribers from #2, #3, #5, #7, #9 and #10–#24.
 */
export async function seedDemo(rpcUrl: string, chainId: number): Promise<Seeded> {
  const chain: Chain = chainDefinition(chainId, rpcUrl, "anvil");
  const transport = http(rpcUrl, { retryCount: 0 });
  const pc = createPublicClient({ chain, transport, cacheTime: 0, pollingInterval: 5 }) as PublicClient;
  const test = createTestClient({ chain, transport, mode: "anvil" });
  const all = await createWalletClient({ chain, transport }).getAddresses();
  if (all.length < 25) throw new Error(`anvil has ${all.length} accounts, the demo needs 25`);
  const [deployer, merchant, , , keeper] = all as [Address, Address, Address, Address, Address];
  const wallet = (account: Address) =>
    createWalletClient({ chain, transport, account, pollingInterval: 5 }) as DeployWallet;

  // anvil hands out nonces per request: concurrent sends from one account collide, so each account has a queue.
  const queues = new Map<Address, Promise<unknown>>();
  function send(
    from: Address,
    address: Address,
    abi: Abi,
    functionName: string,
    args: unknown[],
  ): Promise<TransactionReceipt> {
    const run = async () => {
      const hash: Hash = await wallet(from).writeContract({ address, abi, functionName, args } as never);
      const receipt = await pc.waitForTransactionReceipt({ hash, pollingInterval: 5 });
      if (receipt.status !== "success") throw new Error(`demo seeding: ${functionName} from ${from} reverted`);
      return receipt;
    };
    const result = (queues.get(from) ?? Promise.resolve()).then(run, run);
    queues.set(
      from,
      result.catch(() => {}),
    );
    return result;
  }

  // Protocol, tokens, merchant modules and plans.
  const { processor, startBlock } = await deployProtocol({
    walletClient: wallet(deployer),
    publicClient: pc,
    feeBps: 100,
    feeRecipient: deployer,
  });
  const proc = (from: Address, fn: string, args: unknown[]) =>
    send(from, processor, subscriptionProcessorAbi, fn, args);
  // One account's transactions go one at a time (see `send`); the deployer's and the merchant's run side by side.
  const tokens = (async () => {
    const usdc = await deployToken(wallet(deployer), pc, { name: "USD Coin (demo)", symbol: "USDC", decimals: 6 });
    const dai = await deployToken(wallet(deployer), pc, { name: "Dai (demo)", symbol: "DAI", decimals: 18 });
    const busd = await deployToken(wallet(deployer), pc, {
      name: "Broken USD (transferFrom returns false)",
      symbol: "BUSD",
      decimals: 6,
      kind: "false",
    });
    await proc(deployer, "setKeeper", [keeper, true]);
    return { usdc, dai, busd };
  })();
  const streaming = await createModule(wallet(merchant), pc, processor);
  const pro = await createModule(wallet(merchant), pc, processor);
  const { usdc, dai, busd } = await tokens;
  const mod = (from: Address, module: Address, fn: string, args: unknown[]) =>
    send(from, module, subscriptionModuleAbi, fn, args);
  // Streaming: 1 = monthly in USDC, 2 = yearly in DAI. Pro: 1 = weekly in DAI, 2 = monthly in BUSD.
  await Promise.all([
    mod(merchant, streaming, "createPlan", [1, usdc, 9_990_000n, 30 * DAY, 3 * DAY]),
    mod(merchant, streaming, "createPlan", [2, dai, 99n * DAI, 365 * DAY, 7 * DAY]),
    mod(merchant, pro, "createPlan", [1, dai, 5n * DAI, 7 * DAY, 2 * DAY]),
    mod(merchant, pro, "createPlan", [2, busd, 20n * USDC, 30 * DAY, 3 * DAY]),
  ]);

  const token = (from: Address, address: Address, fn: string, args: unknown[]) =>
    send(from, address, testTokenAbi, fn, args);
  const fund = async (who: Address, t: Address, amount: bigint, approve: bigint | null = maxUint256) => {
    await token(who, t, "mint", [who, amount]);
    if (approve !== null) await token(who, t, "approve", [processor, approve]);
  };
  const subscribe = async (who: Address, module: Address, planId: number, maxExecutions = 0, allowanceExpiry = 0n) => {
    const r = await mod(who, module, "subscribe", [planId, maxExecutions, allowanceExpiry]);
    const [ev] = parseEventLogs({ abi: subscriptionModuleAbi, eventName: "SubscriptionCreated", logs: r.logs });
    if (!ev) throw new Error("demo seeding: subscribe emitted no SubscriptionCreated");
    return ev.args.subscriptionId;
  };
  const charge = (module: Address, id: bigint, by: Address = keeper) => proc(by, "charge", [module, id]);

  const subs = [all[2], all[3], all[5], all[7], all[9], ...all.slice(10, 25)] as Address[];
  const [
    alice,
    bob,
    carol,
    dave,
    erin,
    frank,
    grace,
    heidi,
    ivan,
    judy,
    mallory,
    niaj,
    olivia,
    peggy,
    rupert,
    sybil,
    trent,
    victor,
    walter,
    yolanda,
  ] = subs as [
    Address,
    Address,
    Address,
    Address,
    Address,
    Address,
    Address,
    Address,
    Address,
    Address,
    Address,
    Address,
    Address,
    Address,
    Address,
    Address,
    Address,
    Address,
    Address,
    Address,
  ];

  // Day 0: subscriptions that get their first charge now.
  const t0 = (await pc.getBlock({ blockTag: "latest" })).timestamp;
  const [
    idAlice,
    idBob,
    idCarol,
    idDave,
    idErin,
    idFrank,
    idJudy,
    idMallory,
    idNiaj,
    idPeggy,
    idRupert,
    idSybil,
    idTrent,
    idVictor,
    idWalter,
    idYolandaA,
    idYolandaB,
  ] = await Promise.all([
    fund(alice, usdc, 100n * USDC).then(() => subscribe(alice, streaming, 1)),
    fund(bob, dai, 500n * DAI).then(() => subscribe(bob, streaming, 2)),
    // carol pays from prepaid credit: she approves just the refill, so charges never touch her wallet.
    fund(carol, dai, 20n * DAI, 20n * DAI).then(async () => {
      const id = await subscribe(carol, pro, 1);
      await proc(carol, "refill", [pro, id, 20n * DAI]);
      return id;
    }),
    fund(dave, usdc, 100n * USDC).then(() => subscribe(dave, streaming, 1)),
    fund(erin, usdc, 100n * USDC).then(() => subscribe(erin, streaming, 1)),
    fund(frank, dai, 100n * DAI).then(() => subscribe(frank, pro, 1)),
    // judy's allowance expires after a day: her renewal fails with AllowanceExpired.
    fund(judy, usdc, 100n * USDC).then(() => subscribe(judy, streaming, 1, 0, t0 + BigInt(DAY))),
    // mallory holds exactly one payment: her renewal fails with InsufficientBalance.
    fund(mallory, dai, 5n * DAI).then(() => subscribe(mallory, pro, 1)),
    fund(niaj, dai, 100n * DAI).then(() => subscribe(niaj, pro, 1)),
    // peggy allows a single execution.
    fund(peggy, dai, 100n * DAI).then(() => subscribe(peggy, pro, 1, 1)),
    fund(rupert, dai, 500n * DAI).then(() => subscribe(rupert, streaming, 2)),
    fund(sybil, usdc, 100n * USDC).then(() => subscribe(sybil, streaming, 1)),
    fund(trent, dai, 100n * DAI).then(() => subscribe(trent, pro, 1)),
    fund(victor, dai, 500n * DAI).then(() => subscribe(victor, streaming, 2)),
    fund(walter, usdc, 100n * USDC).then(() => subscribe(walter, streaming, 1)),
    fund(yolanda, usdc, 100n * USDC).then(() => subscribe(yolanda, streaming, 1)),
    fund(yolanda, dai, 500n * DAI).then(() => subscribe(yolanda, streaming, 2)),
  ]);
  await Promise.all([
    ...[idAlice, idDave, idErin, idJudy, idSybil, idWalter, idYolandaA].map((id) => charge(streaming, id)),
    ...[idBob, idRupert, idVictor, idYolandaB].map((id) => charge(streaming, id)),
    ...[idCarol, idFrank, idMallory, idNiaj, idPeggy, idTrent].map((id) => charge(pro, id)),
  ]);

  // Day 0, later: pauses, cancels, blocks, a revoked allowance, a refill that is withdrawn again.
  await Promise.all([
    mod(dave, streaming, "pause", [idDave]),
    mod(erin, streaming, "cancel", [idErin]),
    mod(merchant, pro, "blockSubscriber", [frank]),
    token(niaj, dai, "approve", [processor, 0n]),
    mod(merchant, streaming, "pause", [idRupert]).then(() => mod(merchant, streaming, "resume", [idRupert])),
    mod(sybil, streaming, "cancel", [idSybil]),
    mod(merchant, streaming, "blockSubscriber", [victor]).then(() =>
      mod(merchant, streaming, "unblockSubscriber", [victor]),
    ),
    proc(walter, "refill", [streaming, idWalter, 9_990_000n]).then(() =>
      proc(walter, "withdrawCredit", [streaming, idWalter]),
    ),
  ]);

  // Day 30 + 1 h: monthly renewals are due, weekly plans without a renewal have lapsed.
  await test.increaseTime({ seconds: 30 * DAY + 3600 });
  await test.mine({ blocks: 1 });
  const [idSybil2, idGrace, idHeidi, idIvan, idOlivia] = await Promise.all([
    subscribe(sybil, streaming, 1),
    // Failing first charges keep these PENDING: no allowance, no balance, a token whose transferFrom fails.
    subscribe(grace, streaming, 1),
    token(heidi, usdc, "approve", [processor, maxUint256]).then(() => subscribe(heidi, streaming, 1)),
    fund(ivan, busd, 100n * USDC).then(() => subscribe(ivan, pro, 2)),
    fund(olivia, dai, 100n * DAI).then(() => subscribe(olivia, pro, 1)),
  ]);
  await mod(olivia, pro, "pause", [idOlivia]);
  await Promise.all([
    ...[idAlice, idJudy, idWalter, idYolandaA, idSybil2, idGrace, idHeidi].map((id) => charge(streaming, id)),
    ...[idCarol, idMallory, idNiaj, idIvan].map((id) => charge(pro, id)),
    // The merchant may charge its own subscriptions: this record's keeper_address is the merchant.
    charge(pro, idTrent, merchant),
  ]);

  return {
    processor,
    startBlock,
    merchant,
    modules: { streaming, pro },
    sampleWallet: yolanda,
    subscribers: subs.length,
    subscriptions: 22,
  };
}

/** Starts anvil, seeds the demo, runs the service on a fresh embedded database and returns the banner. */
export async function runDev(opts: DevOptions = {}): Promise<DevEnvironment> {
  const started = performance.now();
  const dataDir = opts.dataDir ?? process.env.DEV_DATA_DIR ?? "./.data/dev";
  const anvilPort = await pickPort(opts.anvilPort, 8545);
  const apiPort = (await pickPort(opts.port, 3000)) || anyFreePort();
  rmSync(dataDir, { recursive: true, force: true });

  let anvil: Anvil | undefined;
  let db: Db | undefined;
  let service: Service | undefined;
  // The embedded database initializes while the chain is seeded.
  const dbReady = createDb({ dataDir }).then(async (d) => {
    db = d;
    await migrate(d.sql);
    return d;
  });
  try {
    anvil = await startAnvil({ port: anvilPort, args: ["--accounts", "25"] });
    const seeded = await seedDemo(anvil.rpcUrl, anvil.chainId);
    const env: Record<string, string | undefined> = {};
    for (const [k, v] of Object.entries(process.env)) {
      if (
        !/^(DATABASE_URL|DATABASE_READ_URL|RPC_URL.*|PROCESSOR_ADDRESS|CHAIN_ID|START_BLOCK|CONFIRMATIONS|KEEPER_PRIVATE_KEY|ROLES|DATA_DIR|PORT)$/.test(
          k,
        )
      )
        env[k] = v;
    }
    const host = process.env.HOST ?? "127.0.0.1";
    const shownHost = ["0.0.0.0", "::", ""].includes(host) ? "127.0.0.1" : host.includes(":") ? `[${host}]` : host;
    Object.assign(env, {
      // SIWE messages name the host the banner's URLs print.
      SIWE_DOMAIN: process.env.SIWE_DOMAIN || `${shownHost}:${apiPort}`,
      RPC_URL: anvil.rpcUrl,
      CHAIN_ID: String(anvil.chainId),
      PROCESSOR_ADDRESS: seeded.processor,
      START_BLOCK: seeded.startBlock.toString(),
      CONFIRMATIONS: "0",
      KEEPER_PRIVATE_KEY: DEV_KEEPER_KEY,
      ROLES: "api,indexer,keeper",
      DATA_DIR: dataDir,
      PORT: String(apiPort),
      HOST: host,
      LOG_LEVEL: opts.logLevel ?? process.env.LOG_LEVEL ?? "warn",
    });
    const config = loadConfig(env);
    service = await startService(config, { db: await dbReady, log: createLogger(config.LOG_LEVEL) });
    const head = await createPublicClient({ transport: http(anvil.rpcUrl), cacheTime: 0 }).getBlockNumber();
    await service.indexer!.waitForBlock(head);
    const { key } = await createApiKey(service.db.sql, { merchant: seeded.merchant, label: "bun run dev" });
    const url = service.url!;
    const merchant = seeded.merchant.toLowerCase() as Address;
    const auth = `-H "Authorization: Bearer ${key}"`;
    const seconds = ((performance.now() - started) / 1000).toFixed(1);
    const banner = [
      "",
      `Dev environment ready in ${seconds} s: anvil ${anvil.rpcUrl} (chain ${anvil.chainId}), processor ${seeded.processor.toLowerCase()},`,
      `${seeded.subscribers} demo subscribers with ${seeded.subscriptions} subscriptions, keeper + indexer + API on ${dataDir}.`,
      "",
      `API: ${url}`,
      `Docs: ${url}/docs`,
      // The fragment never reaches the server: the page keeps the key in sessionStorage and clears the address bar.
      `Dashboard: ${url}/dashboard#key=${key}&merchant=${merchant}`,
      `Merchant: ${merchant}`,
      `API key: ${key}`,
      "",
      `curl -s ${auth} ${url}/v0/subscriptions/${merchant}`,
      `curl -s ${auth} "${url}/v0/activity/${merchant}?limit=10"`,
      `curl -s "${url}/v0/auth/check?module_address=${seeded.modules.streaming.toLowerCase()}&wallet=${seeded.sampleWallet.toLowerCase()}&plan_ids=1,2"`,
      "",
      "Ctrl-C stops everything.",
      "",
    ].join("\n");
    const a = anvil;
    const s = service;
    let stopping: Promise<void> | undefined;
    return {
      banner,
      url,
      merchant,
      apiKey: key,
      rpcUrl: anvil.rpcUrl,
      anvilPort: anvil.port,
      processor: seeded.processor,
      stop: () =>
        (stopping ??= (async () => {
          await s.stop().catch(() => {});
          await a.stop();
        })()),
    };
  } catch (err) {
    if (service) await service.stop().catch(() => {});
    else await dbReady.then((d) => d.close()).catch(() => db?.close().catch(() => {}));
    await anvil?.stop().catch(() => {});
    throw err;
  }
}

if (import.meta.main) {
  const argv = process.argv.slice(2);
  let env: DevEnvironment;
  try {
    env = await runDev({
      port: portArg(flag(argv, "port") ?? process.env.PORT, "PORT"),
      anvilPort: portArg(flag(argv, "anvil-port") ?? process.env.ANVIL_PORT, "ANVIL_PORT"),
    });
  } catch (err) {
    console.error(startErrorMessage(err).replace(/^start failed/, "dev failed"));
    process.exit(1);
  }
  process.stdout.write(env.banner);
  exitOnSignals(
    env.stop,
    () => console.log("stopping…"),
    (err) => console.error(`stop failed: ${(err as Error).message}`),
  );
}
