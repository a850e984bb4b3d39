/** The run part of `bun run dev`: anvil, the demo seed, the service on a fresh embedded database, the banner. */
import { rmSync } from "node:fs";
import { createPublicClient, http, type Address } from "viem";
import { createApiKey } from "../../auth/api-keys";
import { startAnvil, type Anvil } from "../../chain/anvil";
import { loadConfig } from "../../common/config";
import { createLogger, type LogLevel } from "../../common/log";
import { createDb, type Db } from "../../db/client";
import { migrate } from "../../db/migrate";
import { startService, type Service } from "../../service";
import { seedDemo, type Seeded } from "./seed";

/** anvil's well-known dev key #4 (mnemonic "test … junk"): the demo keeper. Never use it on a real chain. */
const DEV_KEEPER_KEY = "0x47e179ec197488593b187f80a00eb0da91f1b9d0b13f8733639f19c30a34926a";

/** Variables of the caller's environment that dev sets itself (its own chain, database and roles). */
const OWN_VARIABLES =
  /^(DATABASE_URL|DATABASE_READ_URL|RPC_URL.*|PROCESSOR_ADDRESS|CHAIN_ID|START_BLOCK|CONFIRMATIONS|KEEPER_PRIVATE_KEY|ROLES|DATA_DIR|PORT)$/;

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
function devEnv(anvil: Anvil, seeded: Seeded, dataDir: string, apiPort: number, logLevel?: LogLevel) {
  const env: Record<string, string | undefined> = {};
  for (const [k, v] of Object.entries(process.env)) if (!OWN_VARIABLES.test(k)) env[k] = v;
  const host = process.env.HOST ?? "127.0.0.1";
  return Object.assign(env, {
    // SIWE messages name the host the banner's URLs print.
    SIWE_DOMAIN: process.env.SIWE_DOMAIN || `${shownHost(host)}:${apiPort}`,
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
    LOG_LEVEL: logLevel ?? process.env.LOG_LEVEL ?? "warn",
  });
}

/** The banner's lines: what runs where, the demo merchant, its key and three commands to try. */
function bannerLines(x: { seconds: string; anvil: Anvil; seeded: Seeded; dataDir: string; url: string; key: string }) {
  const { anvil, seeded, url } = x;
  const merchant = seeded.merchant.toLowerCase();
  const auth = `-H "Authorization: Bearer ${x.key}"`;
  const module = seeded.modules.streaming.toLowerCase();
  return [
    `Dev environment ready in ${x.seconds} s: anvil ${anvil.rpcUrl} (chain ${anvil.chainId}), processor ${seeded.processor.toLowerCase()},`,
    `${seeded.subscribers} demo subscribers with ${seeded.subscriptions} subscriptions, keeper + indexer + API on ${x.dataDir}.`,
    "",
    `API: ${url}`,
    `Docs: ${url}/docs`,
    // The fragment never reaches the server: the page keeps the key in sessionStorage and clears the address bar.
    `Dashboard: ${url}/dashboard#key=${x.key}&merchant=${merchant}`,
    `Merchant: ${merchant}`,
    `API key: ${x.key}`,
    "",
    `curl -s ${auth} ${url}/v0/subscriptions/${merchant}`,
    `curl -s ${auth} "${url}/v0/activity/${merchant}?limit=10"`,
    `curl -s "${url}/v0/auth/check?module_address=${module}&wallet=${seeded.sampleWallet.toLowerCase()}&plan_ids=1,2"`,
    "",
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
    const config = loadConfig(devEnv(anvil, seeded, dataDir, apiPort, opts.logLevel));
    service = await startService(config, { db: await dbReady, log: createLogger(config.LOG_LEVEL) });
    const head = await createPublicClient({ transport: http(anvil.rpcUrl), cacheTime: 0 }).getBlockNumber();
    await service.indexer!.waitForBlock(head);
    const { key } = await createApiKey(service.db.sql, { merchant: seeded.merchant, label: "bun run dev" });
    const url = service.url!;
    const seconds = ((performance.now() - started) / 1000).toFixed(1);
    const [a, s] = [anvil, service];
    let stopping: Promise<void> | undefined;
    return {
      banner: formatBanner(bannerLines({ seconds, anvil, seeded, dataDir, url, key })),
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
          .then(() => a.stop())),
    };
  } catch (err) {
    if (service) await service.stop().catch(() => {});
    else await dbReady.then((d) => d.close()).catch(() => db?.close().catch(() => {}));
    await anvil?.stop().catch(() => {});
    throw err;
  }
}
