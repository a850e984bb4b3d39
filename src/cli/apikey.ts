/**
 * `bun run apikey`: manages merchant API keys in the service's database (DATABASE_URL, else the embedded PGlite in
 * DATA_DIR, migrated first like the service does). The embedded database admits one process: while a service (or
 * `bun run dev`, in ./.data/dev) holds it, the command goes through that service's local control endpoint.
 *
 *   bun run apikey create --merchant 0x… [--label text] [--json]   prints the new key once
 *   bun run apikey revoke <id>
 *   bun run apikey list [--merchant 0x…] [--json]
 *
 * Bad input or a failure: a message on stderr and exit code 1.
 */
import { AppError } from "../common/errors";
import { ConfigError, loadConfig } from "../common/config";
import { createDb, DataDirInUseError } from "../db/client";
import { readControlFile, type ControlInfo } from "../db/control-file";
import { migrate } from "../db/migrate";
import {
  createApiKey,
  type ApiKeyInfo,
  type CreatedApiKey,
  InvalidLabelError,
  InvalidMerchantError,
  listApiKeys,
  normalizeMerchant,
  revokeApiKey,
} from "../auth/api-keys";

class UsageError extends AppError {}

/** A command that ran but could not do its job (printed without the usage text). */
class CommandError extends AppError {}

const USAGE = `usage:
  bun run apikey create --merchant 0x… [--label text] [--json]
  bun run apikey revoke <id>
  bun run apikey list [--merchant 0x…] [--json]`;

/** A parsed command line. */
export type ApiKeyCommand =
  | { cmd: "create"; merchant: string; label?: string; json: boolean }
  | { cmd: "revoke"; id: string }
  | { cmd: "list"; merchant?: string; json: boolean }
  | { cmd: "help" };

/** Parses and validates the arguments (without touching the database); throws UsageError. */
export function parseApiKeyArgs(argv: string[]): ApiKeyCommand {
  const [cmd, ...rest] = argv;
  if (cmd === undefined || cmd === "help" || cmd === "--help" || cmd === "-h") return { cmd: "help" };
  const flags: Record<string, string | true> = {};
  const positional: string[] = [];
  const valued = new Set(["merchant", "label"]);
  const boolean = new Set(["json"]);
  for (let i = 0; i < rest.length; i++) {
    const arg = rest[i]!;
    if (!arg.startsWith("--")) {
      positional.push(arg);
      continue;
    }
    const eq = arg.indexOf("=");
    const name = arg.slice(2, eq < 0 ? undefined : eq);
    if (boolean.has(name) && eq < 0) flags[name] = true;
    else if (valued.has(name)) {
      const value = eq < 0 ? rest[++i] : arg.slice(eq + 1);
      if (value === undefined || (eq < 0 && value.startsWith("--"))) throw new UsageError(`--${name} needs a value`);
      flags[name] = value;
    } else throw new UsageError(`unknown option ${arg}`);
  }
  const allowed: Record<string, string[]> = {
    create: ["merchant", "label", "json"],
    revoke: [],
    list: ["merchant", "json"],
  };
  if (!(cmd in allowed)) throw new UsageError(`unknown command ${JSON.stringify(cmd)}`);
  for (const name of Object.keys(flags)) {
    if (!allowed[cmd]!.includes(name)) throw new UsageError(`${cmd} takes no --${name}`);
  }
  const merchant = flags.merchant as string | undefined;
  try {
    if (merchant !== undefined) normalizeMerchant(merchant);
  } catch (err) {
    throw new UsageError((err as Error).message);
  }
  if (cmd === "create") {
    if (positional.length) throw new UsageError(`unexpected argument ${positional[0]}`);
    if (merchant === undefined) throw new UsageError("create needs --merchant 0x… (the merchant address)");
    return { cmd, merchant, label: flags.label as string | undefined, json: flags.json === true };
  }
  if (cmd === "revoke") {
    if (positional.length !== 1) throw new UsageError("revoke needs exactly one key id (see `bun run apikey list`)");
    return { cmd, id: positional[0]! };
  }
  if (positional.length) throw new UsageError(`unexpected argument ${positional[0]}`);
  return { cmd: "list", merchant, json: flags.json === true };
}

/** Where keys are managed: the database itself, or the running service that holds the embedded one. */
type KeyStore = {
  create: (merchant: string, label?: string) => Promise<CreatedApiKey>;
  revoke: (id: string) => Promise<boolean>;
  list: (merchant?: string) => Promise<ApiKeyInfo[]>;
  close: () => Promise<void>;
};

/** Calls a running service's control routes (src/api/control). */
function controlStore(info: ControlInfo): KeyStore {
  const call = async (method: string, path: string, body?: unknown) => {
    const res = await fetch(`${info.url}/internal/api-keys${path}`, {
      method,
      headers: { authorization: `Bearer ${info.token}`, "content-type": "application/json" },
      body: body === undefined ? undefined : JSON.stringify(body),
    }).catch((err) => {
      throw new CommandError(`the running service at ${info.url} did not answer: ${(err as Error).message}`);
    });
    const json = (await res.json().catch(() => null)) as { error?: { message?: string } } | null;
    return { status: res.status, json };
  };
  const ok = <T>(r: { status: number; json: unknown }): T => {
    if (r.status >= 400) {
      throw new CommandError((r.json as { error?: { message?: string } })?.error?.message ?? `HTTP ${r.status}`);
    }
    return r.json as T;
  };
  return {
    create: async (merchant, label) => ok<CreatedApiKey>(await call("POST", "", { merchant, label })),
    revoke: async (id) => {
      const r = await call("POST", `/${encodeURIComponent(id)}/revoke`);
      if (r.status === 404) return false;
      ok(r);
      return true;
    },
    list: async (merchant) =>
      ok<ApiKeyInfo[]>(await call("GET", merchant ? `?merchant=${encodeURIComponent(merchant)}` : "")),
    close: async () => {},
  };
}

/** Opens the database like the service does, or finds the service that holds the embedded one. */
async function openStore(): Promise<KeyStore> {
  const config = loadConfig(process.env);
  if (!config.DATABASE_URL) {
    // Without an explicit DATA_DIR, a running `bun run dev` (./.data/dev) is found too.
    const dirs = process.env.DATA_DIR ? [config.DATA_DIR] : [config.DATA_DIR, "./.data/dev"];
    for (const dir of dirs) {
      const info = readControlFile(dir);
      if (info) return controlStore(info);
    }
  }
  let db;
  try {
    db = await createDb(config.DATABASE_URL ? { url: config.DATABASE_URL, max: 1 } : { dataDir: config.DATA_DIR });
  } catch (err) {
    if (err instanceof DataDirInUseError) {
      throw new CommandError(`${err.message} (a process without the api role holds it: stop it, or use its HTTP API)`);
    }
    throw err;
  }
  try {
    await migrate(db.sql);
  } catch (err) {
    await db.close();
    throw err;
  }
  const sql = db.sql;
  return {
    create: (merchant, label) => createApiKey(sql, { merchant, label }),
    revoke: (id) => revokeApiKey(sql, id),
    list: (merchant) => listApiKeys(sql, merchant),
    close: () => db.close(),
  };
}

async function run(command: Exclude<ApiKeyCommand, { cmd: "help" }>, store: KeyStore): Promise<void> {
  if (command.cmd === "create") {
    const created = await store.create(command.merchant, command.label);
    if (command.json) console.log(JSON.stringify({ id: created.id, key: created.key, merchant: created.merchant }));
    else {
      console.log(`created API key ${created.id} for merchant ${created.merchant}`);
      console.log(`key (shown only now, store it safely): ${created.key}`);
    }
  } else if (command.cmd === "revoke") {
    if (!(await store.revoke(command.id))) throw new CommandError(`no active API key with id ${command.id}`);
    console.log(`revoked API key ${command.id}`);
  } else {
    const keys = await store.list(command.merchant);
    if (command.json) console.log(JSON.stringify(keys));
    else if (keys.length === 0) console.log("no API keys");
    else {
      for (const k of keys) {
        const state = k.revoked_at ? `revoked ${k.revoked_at}` : "active";
        const used = k.last_used_at ? `last used ${k.last_used_at}` : "never used";
        const label = k.label ? ` "${k.label}"` : "";
        console.log(`${k.id}  ${k.merchant}  ${k.prefix}…  ${state}  created ${k.created_at}  ${used}${label}`);
      }
    }
  }
}

async function main(): Promise<void> {
  const command = parseApiKeyArgs(process.argv.slice(2));
  if (command.cmd === "help") {
    console.log(USAGE);
    return;
  }
  const store = await openStore();
  try {
    await run(command, store);
  } finally {
    await store.close();
  }
}

if (import.meta.main) {
  try {
    await main();
  } catch (err) {
    const e = err as Error;
    if (err instanceof UsageError) console.error(`${e.message}\n${USAGE}`);
    else if ([CommandError, ConfigError, InvalidLabelError, InvalidMerchantError].some((c) => err instanceof c)) {
      console.error(e.message);
    } else console.error(`apikey failed: ${e.message ?? String(err)}`);
    process.exit(1);
  }
}
