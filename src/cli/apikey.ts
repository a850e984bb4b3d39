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
import {
  ApiKeyLimitError,
  createApiKey,
  type ApiKeyInfo,
  type CreatedApiKey,
  InvalidLabelError,
  InvalidMerchantError,
  listApiKeys,
  normalizeMerchant,
  revokeApiKey,
} from "../auth/api-keys";
import { callControl, checkAllowed, CommandError, openLocal, parseFlags, runCli, UsageError } from "./common";

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
  const { flags, positional } = parseFlags(rest, ["merchant", "label"], ["json"]);
  checkAllowed(cmd, flags, { create: ["merchant", "label", "json"], revoke: [], list: ["merchant", "json"] });
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

/** Key management through the running service's control routes, or on the database itself. */
async function openStore(): Promise<KeyStore> {
  const local = await openLocal();
  if (local.kind === "control") {
    const info = local.control;
    return {
      create: (merchant, label) => callControl<CreatedApiKey>(info, "POST", "/api-keys", { merchant, label }),
      revoke: async (id) => {
        try {
          await callControl(info, "POST", `/api-keys/${encodeURIComponent(id)}/revoke`);
          return true;
        } catch (err) {
          if (err instanceof CommandError && err.fields.status === 404) return false;
          throw err;
        }
      },
      list: (merchant) =>
        callControl<ApiKeyInfo[]>(
          info,
          "GET",
          merchant ? `/api-keys?merchant=${encodeURIComponent(merchant)}` : "/api-keys",
        ),
      close: async () => {},
    };
  }
  const { sql } = local.db;
  return {
    create: (merchant, label) => createApiKey(sql, { merchant, label }),
    revoke: (id) => revokeApiKey(sql, id),
    list: (merchant) => listApiKeys(sql, merchant),
    close: () => local.db.close(),
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

if (import.meta.main) {
  await runCli({
    name: "apikey",
    usage: USAGE,
    parse: parseApiKeyArgs,
    open: openStore,
    run,
    known: [InvalidLabelError, InvalidMerchantError, ApiKeyLimitError],
  });
}
