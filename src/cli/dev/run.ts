/** The run part of `bun run dev`: anvil, the demo seed, the service on a fresh embedded database, the banner. */
import { rmSync } from "node:fs";
import { createPublicClient, http, type Address } from "viem";
import { createApiKey } from "../../auth/api-keys";
import { startAnvil, type Anvil } from "../../chain/anvil";
import { installMulticall3 } from "../../chain/multicall3";
import { loadConfig } from "../../common/config";
import { createLogger, type LogLevel } from "../../common/log";
import { createDb, type Db } from "../../db/client";
import { migrate } from "../../db/migrate";
import { startService, type Service } from "../../service";
import { createEndpoint } from "../../webhooks/endpoints";
import { startDemoReceiver, type DemoReceiver } from "./receiver";
import { demoAnvilArgs, seedDemo, subscribeNow, type Seeded } from "./seed";

/** anvil's well-known dev key #4 (mnemonic "test … junk"): the demo keeper. Never use it on a real chain. */
const DEV_KEEPER_KEY = "0x47e179ec197488593b187f80a00eb0da91f1b9d0b13f8733639f19c30a34926a";

/**
 * anvil's well-known dev key #1: the demo merchant, the spender of the demo's spend permissions. The keeper holds it
 * (SPEND_PERMISSION_KEEPER_KEYS) to charge them. Never use it on a real chain.
 */
const DEV_MERCHANT_KEY = "0x59c6995e998f97a5a0044966f0945389dc9e86dae88c7a8412f4603b6b78690d";

/** Variables of the caller's environment that dev sets itself (its own chain, database and roles). */
const OWN_VARIABLES =
  /^(DATABASE_URL|DATABASE_READ_URL|RPC_URL.*|PROCESSOR_ADDRESS.*|CHAIN_ID|CHAINS|START_BLOCK.*|SPEND_PERMISSION_.*|CONFIRMATIONS.*|POLL_INTERVAL_MS_.*|KEEPER_PRIVATE_KEY|ROLES|DATA_DIR|PORT|WEBHOOK_ALLOW_PRIVATE_URLS)$/;

/** Options for {@link runDev}. */
export type DevOptions = {
  /** API port (default: PORT, else 3000 when free, else any free port). */
  port?: number;
  /** anvil port (default: ANVIL_PORT, else 8545 when free, else any free port). */
  anvilPort?: number;
  dataDir?: string;
  logLevel?: LogLevel;
  /** Where the demo receiver's lines go (default: stdout). */
  print?: (line: string) => void;
  /** Chains to run, each its own anvil (chain ids 31337, 31338, …) with the demo on it (default 1). */
  chains?: number;
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
  /** Subscribes a new wallet now (the keeper charges it; the demo receiver prints the deliveries). */
  live: () => Promise<bigint>;
  stop: () => Promise<void>;
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

/** The explicit port, else `preferred` when free, else undefined (any free port). */
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

/** The host the banner's URLs name for a bound host: wildcard binds are reached through 127.0.0.1. */
function shownHost(host: string): string {
  return ["0.0.0.0", "::", ""].includes(host) ? "127.0.0.1" : host.includes(":") ? `[${host}]` : host;
}

/** The banner: the given lines between blank lines. Add a line to the list to show one more thing. */
export function formatBanner(lines: string[]): string {
  return ["", ...lines, ""].join("\n");
}

/** The service environment of dev: the caller's variables minus those dev owns, plus its chain and database. */
function devEnv(demos: Demo[], dataDir: string, apiPort: number, logLevel?: LogLevel) {
  const env: Record<string, string | undefined> = {};
  for (const [k, v] of Object.entries(process.env)) if (!OWN_VARIABLES.test(k)) env[k] = v;
  const host = process.env.HOST ?? "127.0.0.1";
  const [first] = demos as [Demo];
  const chains: Record<string, string> =
    demos.length === 1
      ? {
          RPC_URL: first.anvil.rpcUrl,
          PROCESSOR_ADDRESS: first.seeded.processor,
          START_BLOCK: first.seeded.startBlock.toString(),
          SPEND_PERMISSION_MANAGER: first.seeded.spendPermissionManager,
          SPEND_PERMISSION_SPENDERS: first.seeded.merchant,
        }
      : Object.fromEntries(
          demos.flatMap(({ anvil, seeded }) => [
            [`RPC_URL_${anvil.chainId}`, anvil.rpcUrl],
            [`PROCESSOR_ADDRESS_${anvil.chainId}`, seeded.processor],
            [`START_BLOCK_${anvil.chainId}`, seeded.startBlock.toString()],
            [`SPEND_PERMISSION_MANAGER_${anvil.chainId}`, seeded.spendPermissionManager],
            [`SPEND_PERMISSION_SPENDERS_${anvil.chainId}`, seeded.merchant],
          ]),
        );
  if (demos.length > 1) chains.CHAINS = demos.map((d) => d.anvil.chainId).join(",");
  return Object.assign(env, chains, {
    // SIWE messages name the host the banner's URLs print.
    SIWE_DOMAIN: process.env.SIWE_DOMAIN || `${shownHost(host)}:${apiPort}`,
    CHAIN_ID: String(first.anvil.chainId),
    CONFIRMATIONS: "0",
    KEEPER_PRIVATE_KEY: DEV_KEEPER_KEY,
    // Every demo chain's merchant is anvil's account #1: one value serves each chain's manager.
    SPEND_PERMISSION_KEEPER_KEYS: DEV_MERCHANT_KEY,
    ROLES: "api,indexer,keeper,webhooks",
    // The demo receiver listens on the loopback interface.
    WEBHOOK_ALLOW_PRIVATE_URLS: "1",
    DATA_DIR: dataDir,
    PORT: String(apiPort),
    HOST: host,
    LOG_LEVEL: logLevel ?? process.env.LOG_LEVEL ?? "warn",
    LOG_FORMAT: process.env.LOG_FORMAT || "pretty",
    // Renewal outlooks follow the demo closely (renewals.md §6).
    RENEWAL_CHECK_INTERVAL_S: process.env.RENEWAL_CHECK_INTERVAL_S || "10",
  });
}

/** One chain of the dev environment: its anvil and the demo seeded on it. */
type Demo = { anvil: Anvil; seeded: Seeded };

/** The banner's lines: what runs where, the demo merchant, its key and three commands to try. */
function bannerLines(x: {
  seconds: string;
  demos: Demo[];
  dataDir: string;
  url: string;
  key: string;
  webhook: { url: string; id: string };
}) {
  const { url } = x;
  const { seeded } = x.demos[0]!;
  const merchant = seeded.merchant.toLowerCase();
  const chains = x.demos.map((d) => `anvil ${d.anvil.rpcUrl} (chain ${d.anvil.chainId})`).join(", ");
  const auth = `-H "Authorization: Bearer ${x.key}"`;
  const module = seeded.modules.streaming.toLowerCase();
  return [
    `Dev environment ready in ${x.seconds} s: ${chains}, processor ${seeded.processor.toLowerCase()},`,
    `${seeded.subscribers} demo subscribers with ${seeded.subscriptions} subscriptions over ${seeded.historyDays} days` +
      `${x.demos.length > 1 ? " on each chain" : ""}, keeper, indexer, API and webhooks on ${x.dataDir}.`,
    "",
    `API: ${url}`,
    `Docs: ${url}/docs`,
    // The fragment never reaches the server: the page keeps the key in sessionStorage and clears the address bar.
    `Dashboard: ${url}/dashboard#key=${x.key}&merchant=${merchant}`,
    `Merchant: ${merchant}`,
    `API key: ${x.key}`,
    `Webhooks: endpoint ${x.webhook.id} → demo receiver ${x.webhook.url} (its deliveries print below)`,
    "",
    `curl -s ${auth} ${url}/v0/subscriptions/${merchant}`,
    `curl -s ${auth} "${url}/v0/activity/${merchant}?limit=10"`,
    `curl -s "${url}/v0/auth/check?module_address=${module}&wallet=${seeded.sampleWallet.toLowerCase()}&plan_ids=1,2"`,
    `curl -s ${auth} "${url}/v0/events/${merchant}?limit=5"`,
    `curl -s ${auth} "${url}/v0/stats/${merchant}/mrr?interval=month"`,
    ...x.demos.slice(1).map((d) => `curl -s ${auth} "${url}/v0/subscriptions/${merchant}?chain_id=${d.anvil.chainId}"`),
    `Gated API example: SUBS_URL=${url} MODULE=${module} PLANS=1,2 RPC_URL=${x.demos[0]!.anvil.rpcUrl} sh scripts/bun.sh examples/gated-api/server.ts`,
    "",
    "A new subscriber signs up now: the keeper charges it and the webhook deliveries arrive below.",
    "Ctrl-C stops everything.",
  ];
}

/** Starts anvil, seeds the demo, runs the service on a fresh embedded database and returns the banner. */
export async function runDev(opts: DevOptions = {}): Promise<DevEnvironment> {
  const started = performance.now();
  const dataDir = opts.dataDir ?? process.env.DEV_DATA_DIR ?? "./.data/dev";
  const anvilPort = await pickPort(opts.anvilPort, 8545);
  const apiPort = (await pickPort(opts.port, 3000)) || anyFreePort();
  rmSync(dataDir, { recursive: true, force: true });
  const anvils: Anvil[] = [];
  let db: Db | undefined;
  let service: Service | undefined;
  let receiver: DemoReceiver | undefined;
  // The embedded database initializes while the chain is seeded.
  const dbReady = createDb({ dataDir }).then(async (d) => {
    db = d;
    await migrate(d.sql);
    return d;
  });
  try {
    // Chain ids 31337, 31338, …: the first anvil on ANVIL_PORT (8545 when free), the others on any free port.
    const demos = await Promise.all(
      Array.from({ length: Math.max(1, opts.chains ?? 1) }, async (_, i) => {
        const args = [...demoAnvilArgs(), "--chain-id", String(31337 + i)];
        const anvil = await startAnvil({ port: i === 0 ? anvilPort : undefined, args });
        anvils.push(anvil);
        await installMulticall3(anvil.rpcUrl);
        return { anvil, seeded: await seedDemo(anvil.rpcUrl, anvil.chainId) };
      }),
    );
    const [{ anvil, seeded }] = demos as [Demo];
    const config = loadConfig(devEnv(demos, dataDir, apiPort, opts.logLevel));
    service = await startService(config, {
      db: await dbReady,
      log: createLogger(config.LOG_LEVEL, undefined, config.LOG_FORMAT),
    });
    for (const d of demos) {
      const head = await createPublicClient({ transport: http(d.anvil.rpcUrl), cacheTime: 0 }).getBlockNumber();
      await service.indexers.get(d.anvil.chainId)!.waitForBlock(head);
    }
    const { key } = await createApiKey(service.db.sql, { merchant: seeded.merchant, label: "bun run dev" });
    // Created after the history is indexed: the endpoint gets what happens from now on.
    const print = opts.print ?? ((line: string) => console.log(line));
    receiver = startDemoReceiver(print);
    const endpoint = await createEndpoint(
      service.db.sql,
      {
        merchant: seeded.merchant.toLowerCase(),
        url: receiver.url,
        eventTypes: ["*"],
        description: "bun run dev demo receiver",
      },
      config.WEBHOOK_SECRET_KEY,
    );
    receiver.secret = endpoint.secret;
    const url = service.url!;
    const seconds = ((performance.now() - started) / 1000).toFixed(1);
    const [s, r] = [service, receiver];
    let stopping: Promise<void> | undefined;
    const webhook = { url: receiver.url, id: endpoint.id };
    return {
      banner: formatBanner(bannerLines({ seconds, demos, dataDir, url, key, webhook })),
      live: () => subscribeNow(anvil.rpcUrl, anvil.chainId, seeded),
      url,
      merchant: seeded.merchant.toLowerCase() as Address,
      apiKey: key,
      rpcUrl: anvil.rpcUrl,
      anvilPort: anvil.port,
      processor: seeded.processor,
      stop: () =>
        (stopping ??= s
          .stop()
          .catch(() => {})
          .then(() => r.stop())
          .then(() => Promise.all(anvils.map((a) => a.stop())))
          .then(() => {})),
    };
  } catch (err) {
    await receiver?.stop().catch(() => {});
    if (service) await service.stop().catch(() => {});
    else await dbReady.then((d) => d.close()).catch(() => db?.close().catch(() => {}));
    await Promise.all(anvils.map((a) => a.stop().catch(() => {})));
    throw err;
  }
}
