/**
 * `bun run apikey`: manages merchant API keys in the service's database (DATABASE_URL, else the embedded PGlite in
 * DATA_DIR, migrated first like the service does).
 *
 *   bun run apikey create --merchant 0x… [--label text] [--json]   prints the new key once
 *   bun run apikey revoke <id>
 *   bun run apikey list [--merchant 0x…] [--json]
 *
 * Bad input or a failure: a message on stderr and exit code 1.
 */
import { ConfigError, loadConfig } from "../config";
import { createDb, type Db } from "../db/client";
import { migrate } from "../db/migrate";
import {
  createApiKey,
  InvalidLabelError,
  InvalidMerchantError,
  listApiKeys,
  normalizeMerchant,
  revokeApiKey,
} from "../auth/api-keys";

class UsageError extends Error {}

/** A command that ran but could not do its job (printed without the usage text). */
class CommandError extends Error {}

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

async function openDb(): Promise<Db> {
  const config = loadConfig(process.env);
  const db = await createDb(config.DATABASE_URL ? { url: config.DATABASE_URL, max: 1 } : { dataDir: config.DATA_DIR });
  try {
    await migrate(db.sql);
  } catch (err) {
    await db.close();
    throw err;
  }
  return db;
}

async function run(command: Exclude<ApiKeyCommand, { cmd: "help" }>, db: Db): Promise<void> {
  if (command.cmd === "create") {
    const created = await createApiKey(db.sql, { merchant: command.merchant, label: command.label });
    if (command.json) console.log(JSON.stringify({ id: created.id, key: created.key, merchant: created.merchant }));
    else {
      console.log(`created API key ${created.id} for merchant ${created.merchant}`);
      console.log(`key (shown only now, store it safely): ${created.key}`);
    }
  } else if (command.cmd === "revoke") {
    if (!(await revokeApiKey(db.sql, command.id))) throw new CommandError(`no active API key with id ${command.id}`);
    console.log(`revoked API key ${command.id}`);
  } else {
    const keys = await listApiKeys(db.sql, command.merchant);
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
  const db = await openDb();
  try {
    await run(command, db);
  } finally {
    await db.close();
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
