import { AppError } from "./errors";
import { OptionalKind, Type as T, type Static, type TSchema } from "@sinclair/typebox";
import { Value } from "@sinclair/typebox/value";
import { privateKeyToAccount } from "viem/accounts";

/** Thrown when an environment variable is missing or malformed; the message names it. */
export class ConfigError extends AppError {}

const Address = T.String({ pattern: "^0x[0-9a-fA-F]{40}$", description: "0x + 40 hex" });
const PrivateKey = T.String({ pattern: "^0x[0-9a-fA-F]{64}$", description: "0x + 64 hex" });
const Url = T.String({ pattern: "^(https?|wss?)://", description: "an http(s) or ws(s) URL" });
const PgUrl = T.String({ pattern: "^postgres(ql)?://", description: "a postgres:// URL" });
const Uint = (min = 0) => T.Integer({ minimum: min, description: `an integer >= ${min}` });
const Spenders = T.String({
  pattern: "^\\s*(\\*|0x[0-9a-fA-F]{40}(\\s*,\\s*0x[0-9a-fA-F]{40})*)\\s*$",
  description: "* or addresses (0x + 40 hex), comma-separated",
});
const PrivateKeys = T.String({
  pattern: "^\\s*0x[0-9a-fA-F]{64}(\\s*,\\s*0x[0-9a-fA-F]{64})*\\s*$",
  description: "private keys (0x + 64 hex), comma-separated",
});
const Role = T.Union([T.Literal("api"), T.Literal("indexer"), T.Literal("keeper"), T.Literal("webhooks")]);

/** Every variable the service reads, with its schema and default. */
const EnvSchema = {
  DATABASE_URL: T.Optional(PgUrl),
  DATABASE_READ_URL: T.Optional(PgUrl),
  DATA_DIR: T.String({ default: "./.data", minLength: 1 }),
  RPC_URL: T.Optional(Url),
  CHAIN_ID: T.Optional(Uint(1)),
  CHAINS: T.Optional(
    T.Array(T.Integer({ minimum: 1 }), { minItems: 1, description: "chain ids, comma-separated, e.g. 8453,10" }),
  ),
  PROCESSOR_ADDRESS: T.Optional(Address),
  START_BLOCK: Uint(0),
  CONFIRMATIONS: Uint(0),
  POLL_INTERVAL_MS: Uint(10),
  KEEPER_PRIVATE_KEY: T.Optional(PrivateKey),
  KEEPER_RETRY_SCHEDULE: T.String({
    default: "3600,21600,86400",
    pattern: "^\\d+(,\\d+)*$",
    description: "seconds, comma-separated, e.g. 3600,21600,86400",
  }),
  ADMIN_API_KEY: T.Optional(T.String({ minLength: 16, description: "at least 16 characters" })),
  SIWE_DOMAIN: T.Optional(
    T.String({
      pattern: "^(\\[[0-9a-fA-F:.]+\\]|[A-Za-z0-9]([A-Za-z0-9.-]*[A-Za-z0-9])?)(:[0-9]{1,5})?$",
      description: "a host name with an optional port, e.g. api.example.com or 127.0.0.1:3000 (no scheme, no path)",
    }),
  ),
  /** `1`: a production API may take SIWE messages' domain from the request's Host (behind a proxy that sets it). */
  SIWE_TRUST_HOST: T.Union([T.Literal("0"), T.Literal("1")], { description: "0 or 1" }),
  SESSION_TTL_S: Uint(60),
  PORT: T.Integer({ minimum: 0, maximum: 65535, description: "a port number" }),
  HOST: T.String({ default: "0.0.0.0" }),
  METRICS_PORT: T.Optional(T.Integer({ minimum: 1, maximum: 65535, description: "a port number other than PORT" })),
  METRICS_HOST: T.String({ minLength: 1, description: "an address to bind, e.g. 127.0.0.1 or fly-local-6pn" }),
  ROLES: T.Array(Role, { minItems: 1, description: "api, indexer, keeper, webhooks (comma-separated)" }),
  READY_MAX_LAG_BLOCKS: Uint(0),
  RATE_LIMIT_PER_MINUTE: Uint(1),
  RATE_LIMIT_PER_KEY_PER_MINUTE: Uint(1),
  /** One bucket per merchant over all its keys and sessions, shared by the API processes (src/http/merchant-limit.ts). */
  RATE_LIMIT_PER_MERCHANT_PER_MINUTE: Uint(1),
  TRUSTED_PROXY_HOPS: T.Integer({ minimum: 0, maximum: 16, description: "an integer from 0 to 16" }),
  CLIENT_IP_HEADER: T.Optional(
    T.String({ pattern: "^[A-Za-z0-9!#$%&'*+.^_`|~-]{1,64}$", description: "an HTTP header name, e.g. Fly-Client-IP" }),
  ),
  /** The `newHeads` subscription of RPC_URL's chain (src/chain/ws.ts); unset: the head is polled. */
  RPC_WS_URL: T.Optional(T.String({ pattern: "^wss?://", description: "a ws:// or wss:// URL" })),
  RPC_TIMEOUT_MS: Uint(100),
  RPC_CU_PER_SECOND: Uint(0),
  RPC_CU_WEIGHTS: T.String({
    pattern: "^\\s*([A-Za-z0-9_*]+\\s*=\\s*\\d+(\\.\\d+)?\\s*(,\\s*|$))*$",
    description: "method=units, comma-separated, e.g. eth_getLogs=60,*=20",
  }),
  RPC_MAX_BATCH: Uint(1),
  ONCHAIN_CHECK_CONCURRENCY: T.Integer({ minimum: 1, default: 32, description: "an integer >= 1" }),
  LOG_LEVEL: T.Union([T.Literal("debug"), T.Literal("info"), T.Literal("warn"), T.Literal("error")]),
  LOG_FORMAT: T.Optional(T.Union([T.Literal("json"), T.Literal("pretty")])),
  KEEPER_MAX_ATTEMPTS: T.Optional(Uint(1)),
  KEEPER_RECHECK_INTERVAL_S: Uint(1),
  KEEPER_TX_DEADLINE_MS: Uint(100),
  KEEPER_MAX_FEE_GWEI: T.String({ pattern: "^\\d+(\\.\\d{1,9})?$", description: "gwei, a decimal number" }),
  WEBHOOK_TIMEOUT_MS: Uint(100),
  WEBHOOK_RETRY_SCHEDULE: T.String({ pattern: "^\\d+(,\\d+)*$", description: "seconds, comma-separated" }),
  WEBHOOK_DISABLE_AFTER_S: Uint(1),
  WEBHOOK_CONCURRENCY_PER_ENDPOINT: Uint(1),
  WEBHOOK_CONCURRENCY: Uint(1),
  WEBHOOK_POLL_INTERVAL_MS: Uint(10),
  WEBHOOK_ALLOW_PRIVATE_URLS: T.Union([T.Literal("0"), T.Literal("1")], { description: "0 or 1" }),
  WEBHOOK_SECRET_KEY: T.Optional(T.String({ minLength: 16, description: "at least 16 characters" })),
  RENEWAL_HORIZON_S: Uint(1),
  RENEWAL_NOTICE_S: Uint(0),
  RENEWAL_CHECK_INTERVAL_S: Uint(1),
  RENEWAL_RPC_CONCURRENCY: Uint(1),
  BACKFILL_DEFER_INDEXES: T.Union([T.Literal("0"), T.Literal("1")], { description: "0 or 1" }),
  SPEND_PERMISSION_MANAGER: T.Optional(Address),
  SPEND_PERMISSION_SPENDERS: T.Optional(Spenders),
  SPEND_PERMISSION_START_BLOCK: T.Optional(Uint(0)),
  SPEND_PERMISSION_GRACE_S: Uint(0),
  SPEND_PERMISSION_KEEPER_KEYS: T.Optional(PrivateKeys),
  ENTRYPOINT_ADDRESSES: T.Array(Address, { minItems: 1, description: "addresses, comma-separated" }),
  NATIVE_TOKEN_SYMBOL: T.Optional(T.String({ pattern: "^[A-Za-z0-9.]{1,16}$", description: "a symbol, e.g. ETH" })),
  /** `production`: start-up warns about what is unsafe in production (webhook secrets stored in clear). */
  NODE_ENV: T.Optional(T.String()),
} satisfies Record<string, TSchema>;

const defaults: Record<string, string> = {
  START_BLOCK: "0",
  CONFIRMATIONS: "0",
  POLL_INTERVAL_MS: "1000",
  SIWE_TRUST_HOST: "0",
  SESSION_TTL_S: "86400",
  PORT: "3000",
  // Loopback: metrics are for the operator's scraper, never the public; fly.toml binds the private network.
  METRICS_HOST: "127.0.0.1",
  ROLES: "api,indexer,keeper,webhooks",
  READY_MAX_LAG_BLOCKS: "20",
  RATE_LIMIT_PER_MINUTE: "6000",
  RATE_LIMIT_PER_KEY_PER_MINUTE: "6000",
  RATE_LIMIT_PER_MERCHANT_PER_MINUTE: "30000",
  TRUSTED_PROXY_HOPS: "0",
  RPC_TIMEOUT_MS: "5000",
  // Alchemy's free tier; 0 leaves only the pause on a 429.
  RPC_CU_PER_SECOND: "330",
  RPC_CU_WEIGHTS: "",
  RPC_MAX_BATCH: "100",
  LOG_LEVEL: "info",
  KEEPER_RECHECK_INTERVAL_S: "86400",
  KEEPER_TX_DEADLINE_MS: "30000",
  KEEPER_MAX_FEE_GWEI: "500",
  WEBHOOK_TIMEOUT_MS: "10000",
  WEBHOOK_RETRY_SCHEDULE: "5,300,1800,7200,18000,36000,36000,86400,86400",
  WEBHOOK_DISABLE_AFTER_S: "432000",
  WEBHOOK_CONCURRENCY_PER_ENDPOINT: "4",
  WEBHOOK_CONCURRENCY: "64",
  WEBHOOK_POLL_INTERVAL_MS: "1000",
  WEBHOOK_ALLOW_PRIVATE_URLS: "0",
  RENEWAL_HORIZON_S: "604800",
  RENEWAL_NOTICE_S: "259200",
  RENEWAL_CHECK_INTERVAL_S: "900",
  RENEWAL_RPC_CONCURRENCY: "4",
  BACKFILL_DEFER_INDEXES: "1",
  SPEND_PERMISSION_GRACE_S: "86400",
  // EntryPoint v0.6 (verified from Coinbase Smart Wallet) and v0.7.
  ENTRYPOINT_ADDRESSES: "0x5FF137D4b0FDCD49DcA30c7CF57E578a026d2789,0x0000000071727De22E5E9d8BAf0edAc6f37da032",
};

type Env = { [K in keyof typeof EnvSchema]: Static<(typeof EnvSchema)[K]> };

/** One indexed chain: its RPC, processor and indexing settings (per-chain variables, else the single ones). */
export type ChainConfig = {
  /** Known from CHAINS or CHAIN_ID; read from the RPC when only RPC_URL names the chain. */
  chainId?: number;
  rpcUrl: string;
  /** The protocol's processor (lowercase); null on a chain that indexes only Spend Permissions. */
  processor: string | null;
  startBlock: number;
  confirmations: number;
  pollIntervalMs: number;
  /** The variable that gave the RPC URL, for error messages. */
  rpcVariable: string;
  /** Base Spend Permissions as a second source of this chain, when SPEND_PERMISSION_MANAGER is set. */
  spendPermissions?: SpendPermissionSource;
};

/** The Spend Permission source of one chain (`SPEND_PERMISSION_*`, `ENTRYPOINT_ADDRESSES`, `NATIVE_TOKEN_SYMBOL`). */
export type SpendPermissionSource = {
  /** The manager, lowercase. */
  manager: string;
  /** The merchants' spender addresses (lowercase, sorted, deduplicated), or "*" for every spender. */
  spenders: string[] | "*";
  startBlock: number;
  graceS: number;
  /** EntryPoints trusted to tell who revoked (lowercase). */
  entryPoints: string[];
  /** Symbol of the native currency; undefined: the chain's own, else ETH. */
  nativeSymbol?: string;
  /** Spender private keys the keeper charges permissions with (secret; each one's address is a spender). */
  keeperKeys?: string[];
};

/** The parsed configuration of one process. */
export type Config = Env & {
  /**
   * The chains this deployment indexes (and the keeper charges): each chain of CHAINS, or the one chain of
   * RPC_URL with PROCESSOR_ADDRESS and/or SPEND_PERMISSION_MANAGER. Empty when no chain is configured (an API-only
   * process).
   */
  indexed: ChainConfig[];
  /** Extra RPC endpoints for `onchain` checks, by chain id (from `RPC_URL_<chainId>`). */
  extraRpcUrls: Record<number, string>;
  /** Keeper retry delays after a failed charge, in seconds. */
  retrySchedule: number[];
  /** Where a chain's Multicall3 lives when not at the canonical address (`MULTICALL_ADDRESS_<chainId>`), lowercase. */
  multicallAddresses: Record<number, string>;
};

// Values that may hold credentials (URLs with passwords, keys) are never echoed in errors.
const SECRET =
  /^(DATABASE_URL|DATABASE_READ_URL|RPC_URL.*|RPC_WS_URL|KEEPER_PRIVATE_KEY|SPEND_PERMISSION_KEEPER_KEYS(_\d+)?|ADMIN_API_KEY|WEBHOOK_SECRET_KEY)$/;

function parseOne(name: string, schema: TSchema, raw: string | undefined): unknown {
  if (raw === undefined || raw === "") {
    if (defaults[name] !== undefined) raw = defaults[name];
    else if ("default" in schema) return schema.default;
    else if (OptionalKind in schema) return undefined;
    else throw new ConfigError(`${name} is required`);
  }
  let value: unknown = raw;
  if (schema.type === "array") {
    const items = raw!
      .split(",")
      .map((s) => s.trim())
      .filter(Boolean);
    value = schema.items?.type === "integer" ? items.map((v) => (/^\d+$/.test(v) ? Number(v) : v)) : items;
  } else if (schema.type === "integer") value = /^-?\d+$/.test(raw!) ? Number(raw) : raw;
  if (!Value.Check(schema, value)) {
    const shown = SECRET.test(name) ? name : `${name}=${JSON.stringify(raw)}`;
    // A union of literals (LOG_LEVEL) has no type or description of its own: its allowed values say it.
    const literals = (schema.anyOf as { const?: unknown }[] | undefined)
      ?.map((s) => s.const)
      .filter((c) => c !== undefined);
    const expected =
      schema.description ?? schema.type ?? (literals?.length ? `one of ${literals.join(", ")}` : "a valid value");
    throw new ConfigError(`${shown} is invalid: expected ${expected}`);
  }
  return value;
}

/** Parses the environment once; throws ConfigError naming the first bad variable. */
export function loadConfig(env: Record<string, string | undefined> = process.env): Config {
  const out: Record<string, unknown> = {};
  for (const [name, schema] of Object.entries(EnvSchema)) out[name] = parseOne(name, schema, env[name]);
  const extraRpcUrls: Record<number, string> = {};
  for (const [name, raw] of Object.entries(env)) {
    const m = /^RPC_URL_(\d+)$/.exec(name);
    if (!m || !raw) continue;
    extraRpcUrls[Number(m[1])] = parseOne(name, Url, raw) as string;
  }
  const multicallAddresses: Record<number, string> = {};
  for (const [name, raw] of Object.entries(env)) {
    const m = /^MULTICALL_ADDRESS_(\d+)$/.exec(name);
    if (m && raw) multicallAddresses[Number(m[1])] = (parseOne(name, Address, raw) as string).toLowerCase();
  }
  const cfg = out as Env;
  if (cfg.CLIENT_IP_HEADER && cfg.TRUSTED_PROXY_HOPS > 0) {
    throw new ConfigError("CLIENT_IP_HEADER and TRUSTED_PROXY_HOPS exclude each other: set one way to find the client");
  }
  if (cfg.DATABASE_READ_URL && !cfg.DATABASE_URL) {
    throw new ConfigError(
      "DATABASE_READ_URL needs DATABASE_URL: the replica serves reads, the primary everything else",
    );
  }
  if (cfg.METRICS_PORT !== undefined && cfg.METRICS_PORT === cfg.PORT) {
    throw new ConfigError("METRICS_PORT must differ from PORT: metrics are never served on the public API port");
  }
  if (cfg.PROCESSOR_ADDRESS) cfg.PROCESSOR_ADDRESS = cfg.PROCESSOR_ADDRESS.toLowerCase();
  const indexed = indexedChains(cfg, env, extraRpcUrls);
  if (cfg.CHAINS && cfg.CHAIN_ID === undefined) cfg.CHAIN_ID = cfg.CHAINS[0];
  return {
    ...cfg,
    indexed,
    extraRpcUrls,
    multicallAddresses,
    retrySchedule: cfg.KEEPER_RETRY_SCHEDULE.split(",").map(Number),
  };
}

/**
 * The indexed chains: with CHAINS, each id's `RPC_URL_<id>`, `PROCESSOR_ADDRESS_<id>`, `START_BLOCK_<id>`,
 * `CONFIRMATIONS_<id>` and `POLL_INTERVAL_MS_<id>`, falling back to the single-chain variable (RPC_URL only for the
 * default chain); without CHAINS, the one chain of RPC_URL with PROCESSOR_ADDRESS and/or SPEND_PERMISSION_MANAGER.
 * A chain needs at least one source: the processor, or a Spend Permission manager (a permission-only chain).
 */
function indexedChains(cfg: Env, env: Record<string, string | undefined>, rpcUrls: Record<number, string>) {
  if (!cfg.CHAINS) {
    const spendPermissions = spendPermissionSource(cfg, env, undefined, cfg.START_BLOCK);
    // RPC_URL alone (no source) serves an API process's on-chain checks: nothing to index.
    if (!cfg.RPC_URL || (!cfg.PROCESSOR_ADDRESS && !spendPermissions)) return [];
    const chain: ChainConfig = {
      chainId: cfg.CHAIN_ID,
      rpcUrl: cfg.RPC_URL,
      processor: cfg.PROCESSOR_ADDRESS ?? null,
      startBlock: cfg.START_BLOCK,
      confirmations: cfg.CONFIRMATIONS,
      pollIntervalMs: cfg.POLL_INTERVAL_MS,
      rpcVariable: "RPC_URL",
      spendPermissions,
    };
    return [chain];
  }
  if (new Set(cfg.CHAINS).size !== cfg.CHAINS.length) throw new ConfigError("CHAINS names a chain twice");
  const defaultId = cfg.CHAIN_ID ?? cfg.CHAINS[0]!;
  if (!cfg.CHAINS.includes(defaultId)) throw new ConfigError(`CHAIN_ID=${defaultId} is not one of CHAINS`);
  return cfg.CHAINS.map((id): ChainConfig => {
    const own = (name: string, schema: TSchema) => {
      const raw = env[`${name}_${id}`];
      return raw === undefined || raw === "" ? undefined : parseOne(`${name}_${id}`, schema, raw);
    };
    const rpcUrl = rpcUrls[id] ?? (id === defaultId ? cfg.RPC_URL : undefined);
    if (!rpcUrl) throw new ConfigError(`RPC_URL_${id} is required: CHAINS names chain ${id}`);
    const processor = (own("PROCESSOR_ADDRESS", Address) as string | undefined) ?? cfg.PROCESSOR_ADDRESS;
    const startBlock = (own("START_BLOCK", Uint(0)) as number | undefined) ?? cfg.START_BLOCK;
    const spendPermissions = spendPermissionSource(cfg, env, id, startBlock);
    if (!processor && !spendPermissions) {
      throw new ConfigError(
        `PROCESSOR_ADDRESS_${id} or SPEND_PERMISSION_MANAGER_${id} is required: CHAINS names chain ${id}, ` +
          "and a chain needs at least one source",
      );
    }
    return {
      chainId: id,
      rpcUrl,
      processor: processor?.toLowerCase() ?? null,
      startBlock,
      confirmations: (own("CONFIRMATIONS", Uint(0)) as number | undefined) ?? cfg.CONFIRMATIONS,
      pollIntervalMs: (own("POLL_INTERVAL_MS", Uint(10)) as number | undefined) ?? cfg.POLL_INTERVAL_MS,
      rpcVariable: rpcUrls[id] ? `RPC_URL_${id}` : "RPC_URL",
      spendPermissions,
    };
  });
}

/**
 * The Spend Permission source of a chain: each `SPEND_PERMISSION_*`, `ENTRYPOINT_ADDRESSES` and `NATIVE_TOKEN_SYMBOL`
 * variable read with the `_<chainId>` suffix first, else without it; undefined when no manager is configured.
 */
function spendPermissionSource(
  cfg: Env,
  env: Record<string, string | undefined>,
  id: number | undefined,
  chainStartBlock: number,
): SpendPermissionSource | undefined {
  const read = <V>(name: keyof Env & string, schema: TSchema): { value: V; name: string } => {
    const raw = id === undefined ? undefined : env[`${name}_${id}`];
    if (raw === undefined || raw === "") return { value: cfg[name] as V, name };
    return { value: parseOne(`${name}_${id}`, schema, raw) as V, name: `${name}_${id}` };
  };
  const manager = read<string | undefined>("SPEND_PERMISSION_MANAGER", Address);
  const spenders = read<string | undefined>("SPEND_PERMISSION_SPENDERS", Spenders);
  const keys = read<string | undefined>("SPEND_PERMISSION_KEEPER_KEYS", PrivateKeys);
  if (!manager.value) {
    for (const v of [spenders, keys]) if (v.value) throw new ConfigError(`${v.name} needs SPEND_PERMISSION_MANAGER`);
    return undefined;
  }
  if (!spenders.value) {
    throw new ConfigError(
      `SPEND_PERMISSION_SPENDERS is required with ${manager.name}: the merchants' spender addresses, or *`,
    );
  }
  const start = read<number | undefined>("SPEND_PERMISSION_START_BLOCK", Uint(0)).value;
  const entryPoints = read<string[]>("ENTRYPOINT_ADDRESSES", EnvSchema.ENTRYPOINT_ADDRESSES).value;
  const spenderList =
    spenders.value.trim() === "*"
      ? "*"
      : [...new Set(spenders.value.split(",").map((s) => s.trim().toLowerCase()))].sort();
  const keeperKeys = [...new Set((keys.value ?? "").split(",").map((k) => k.trim().toLowerCase()))].filter(Boolean);
  // Errors name the variable and the key's address, never the key.
  for (const key of keeperKeys) {
    const address = privateKeyToAccount(key as `0x${string}`).address.toLowerCase();
    if (spenderList !== "*" && !spenderList.includes(address))
      throw new ConfigError(`${keys.name}: ${address} is not one of ${spenders.name}; the keeper spends as a spender`);
    if (cfg.KEEPER_PRIVATE_KEY?.toLowerCase() === key)
      throw new ConfigError(`${keys.name} repeats KEEPER_PRIVATE_KEY (${address}): one key sends for one keeper`);
  }
  return {
    manager: manager.value.toLowerCase(),
    spenders: spenderList,
    startBlock: start ?? chainStartBlock,
    graceS: read<number>("SPEND_PERMISSION_GRACE_S", Uint(0)).value,
    entryPoints: entryPoints.map((e) => e.toLowerCase()),
    nativeSymbol: read<string | undefined>("NATIVE_TOKEN_SYMBOL", EnvSchema.NATIVE_TOKEN_SYMBOL).value,
    keeperKeys,
  };
}

/** Checks what the indexer and keeper roles need beyond the schema: at least one chain to index. */
export function requireChain(cfg: Config): void {
  if (cfg.indexed.length > 0) return;
  if (!cfg.RPC_URL) throw new ConfigError("RPC_URL is required (or CHAINS with RPC_URL_<id> for each chain)");
  throw new ConfigError(
    "PROCESSOR_ADDRESS or SPEND_PERMISSION_MANAGER is required: a chain needs at least one source to index",
  );
}

/** Checks what the configured roles need beyond the schema (the indexer and keeper roles: a chain to index). */
export function requireRoleSettings(cfg: Config): void {
  if (cfg.ROLES.includes("indexer") || cfg.ROLES.includes("keeper")) requireChain(cfg);
  if (cfg.ROLES.includes("api")) requireSiweDomain(cfg);
}

/**
 * In production (NODE_ENV=production) an api role needs SIWE_DOMAIN, unless SIWE_TRUST_HOST=1 says the Host header
 * is set by a trusted proxy (Auth.js's AUTH_TRUST_HOST rule): otherwise a message signed for another site, relayed
 * with that site's Host, would open a session here.
 */
export function requireSiweDomain(cfg: Pick<Config, "NODE_ENV" | "SIWE_DOMAIN" | "SIWE_TRUST_HOST">): void {
  if (cfg.NODE_ENV !== "production" || cfg.SIWE_DOMAIN || cfg.SIWE_TRUST_HOST === "1") return;
  throw new ConfigError(
    "SIWE_DOMAIN is required in production (NODE_ENV=production): set it to the public host of this API, or set " +
      "SIWE_TRUST_HOST=1 when a trusted proxy sets the Host header",
  );
}

/**
 * The warning an api role without SIWE_DOMAIN logs at start, or undefined when it is set. service.md makes the
 * request's host the default domain SIWE messages must name, so the service starts without it; but a Host header is
 * the caller's word, so a site that had a wallet sign a message for its own domain could relay it here.
 */
export function siweDomainWarning(cfg: Pick<Config, "SIWE_DOMAIN">): string | undefined {
  if (cfg.SIWE_DOMAIN) return undefined;
  return (
    "SIWE_DOMAIN is not set: SIWE messages must name the request's Host, which the caller chooses; set it to the " +
    "public host of this API (e.g. api.example.com) so a message signed for another site is refused"
  );
}
