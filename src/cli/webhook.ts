/**
 * `bun run webhook`: manages merchants' webhook endpoints from the command line, with the rules of the API
 * (webhooks.md §3). Reaches the database like `bun run apikey`: DATABASE_URL, else the embedded PGlite in DATA_DIR,
 * or the running service that holds it (its local control routes).
 *
 *   bun run webhook create --merchant 0x… --url https://… [--events a,b] [--description text] [--json]
 *   bun run webhook list [--merchant 0x…] [--json]
 *   bun run webhook delete <id>
 *   bun run webhook test <id> [--json]
 *
 * Bad input or a failure: a message on stderr and exit code 1.
 */
import { InvalidMerchantError, normalizeMerchant } from "../auth/api-keys";
import { ApiError } from "../http/errors";
import { createFromBody } from "../webhooks/input";
import { EndpointLimitError, InvalidFieldError } from "../webhooks/errors";
import { dispatcherConfig } from "../webhooks/dispatcher";
import {
  deleteEndpoint,
  endpointMerchant,
  listAllEndpoints,
  type DeliveryObject,
  type EndpointObject,
} from "../webhooks/endpoints";
import { sendTest } from "../webhooks/test-delivery";
import { callControl, checkAllowed, CommandError, openLocal, parseFlags, runCli, UsageError } from "./common";

const USAGE = `usage:
  bun run webhook create --merchant 0x… --url https://… [--events a,b] [--description text] [--json]
  bun run webhook list [--merchant 0x…] [--json]
  bun run webhook delete <id>
  bun run webhook test <id> [--json]`;

/** A parsed command line. */
export type WebhookCommand =
  | { cmd: "create"; merchant: string; url: string; events?: string[]; description?: string; json: boolean }
  | { cmd: "list"; merchant?: string; json: boolean }
  | { cmd: "delete"; id: string }
  | { cmd: "test"; id: string; json: boolean }
  | { cmd: "help" };

/** Parses the arguments (without touching the database); throws UsageError. */
export function parseWebhookArgs(argv: string[]): WebhookCommand {
  const [cmd, ...rest] = argv;
  if (cmd === undefined || cmd === "help" || cmd === "--help" || cmd === "-h") return { cmd: "help" };
  const { flags, positional } = parseFlags(rest, ["merchant", "url", "events", "description"], ["json"]);
  checkAllowed(cmd, flags, {
    create: ["merchant", "url", "events", "description", "json"],
    list: ["merchant", "json"],
    delete: [],
    test: ["json"],
  });
  const merchant = flags.merchant as string | undefined;
  try {
    if (merchant !== undefined) normalizeMerchant(merchant);
  } catch (err) {
    throw new UsageError((err as Error).message);
  }
  const json = flags.json === true;
  if (cmd === "create") {
    if (positional.length) throw new UsageError(`unexpected argument ${positional[0]}`);
    if (merchant === undefined) throw new UsageError("create needs --merchant 0x… (the merchant address)");
    if (flags.url === undefined) throw new UsageError("create needs --url (where deliveries are sent)");
    const events =
      flags.events === undefined
        ? undefined
        : String(flags.events)
            .split(",")
            .map((s) => s.trim());
    const description = flags.description as string | undefined;
    return { cmd, merchant, url: flags.url as string, events, description, json };
  }
  if (cmd === "delete" || cmd === "test") {
    if (positional.length !== 1)
      throw new UsageError(`${cmd} needs exactly one endpoint id (see \`bun run webhook list\`)`);
    return cmd === "delete" ? { cmd, id: positional[0]! } : { cmd, id: positional[0]!, json };
  }
  if (positional.length) throw new UsageError(`unexpected argument ${positional[0]}`);
  return { cmd: "list", merchant, json };
}

type Created = EndpointObject & { secret: string };
type Listed = EndpointObject & { merchant: string };

/** The operations, through the running service or on the database itself. */
type Store = {
  create: (body: Record<string, unknown>) => Promise<Created>;
  list: (merchant?: string) => Promise<Listed[]>;
  delete: (id: string) => Promise<void>;
  test: (id: string) => Promise<DeliveryObject>;
  close: () => Promise<void>;
};

async function openStore(): Promise<Store> {
  const local = await openLocal();
  if (local.kind === "control") {
    const info = local.control;
    const path = (id: string) => `/webhook-endpoints/${encodeURIComponent(id)}`;
    return {
      create: (body) => callControl<Created>(info, "POST", "/webhook-endpoints", body),
      list: (merchant) =>
        callControl<Listed[]>(info, "GET", `/webhook-endpoints${merchant ? `?merchant=${merchant}` : ""}`),
      delete: async (id) => void (await callControl(info, "DELETE", path(id))),
      test: (id) => callControl<DeliveryObject>(info, "POST", `${path(id)}/test`),
      close: async () => {},
    };
  }
  const { sql } = local.db;
  const config = dispatcherConfig(local.config);
  const notFound = (id: string) => new CommandError(`no webhook endpoint with id ${id}`);
  return {
    create: (body) => createFromBody(sql, body.merchant as string, body, config, ["merchant"]),
    list: (merchant) => listAllEndpoints(sql, merchant ?? null),
    delete: async (id) => {
      if (!(await deleteEndpoint(sql, null, id))) throw notFound(id);
    },
    test: async (id) => {
      const merchant = await endpointMerchant(sql, id);
      if (!merchant) throw notFound(id);
      const [first] = await sql<{ chain_id: number }[]>`select chain_id from chains order by chain_id limit 1`;
      return sendTest(sql, { id, merchant, chainId: local.config.CHAIN_ID ?? first?.chain_id ?? 0 }, config);
    },
    close: () => local.db.close(),
  };
}

async function run(command: Exclude<WebhookCommand, { cmd: "help" }>, store: Store): Promise<void> {
  if (command.cmd === "create") {
    const created = await store.create({
      merchant: normalizeMerchant(command.merchant),
      url: command.url,
      ...(command.events ? { event_types: command.events } : {}),
      ...(command.description !== undefined ? { description: command.description } : {}),
    });
    if (command.json) console.log(JSON.stringify(created));
    else {
      console.log(`created webhook endpoint ${created.id} for ${command.merchant.toLowerCase()} → ${created.url}`);
      console.log(`events: ${created.event_types.join(", ")}`);
      console.log(`signing secret (shown only now, store it safely): ${created.secret}`);
    }
  } else if (command.cmd === "list") {
    const list = await store.list(command.merchant && normalizeMerchant(command.merchant));
    if (command.json) console.log(JSON.stringify(list));
    else if (list.length === 0) console.log("no webhook endpoints");
    else {
      for (const e of list) {
        const state = e.enabled ? "enabled" : `disabled (${e.disabled_reason ?? "by the merchant"})`;
        console.log(`${e.id}  ${e.merchant}  ${e.url}  ${e.event_types.join(",")}  ${state}  created ${e.created_at}`);
      }
    }
  } else if (command.cmd === "delete") {
    await store.delete(command.id);
    console.log(`deleted webhook endpoint ${command.id} (its pending deliveries are cancelled)`);
  } else {
    const attempt = await store.test(command.id);
    if (command.json) console.log(JSON.stringify(attempt));
    else {
      const outcome =
        attempt.response_status === null ? (attempt.error ?? "no response") : `HTTP ${attempt.response_status}`;
      console.log(
        `test delivery ${attempt.id} (${attempt.event_id}): ${attempt.status}, ${outcome}, ${attempt.duration_ms} ms`,
      );
    }
    if (attempt.status !== "succeeded") process.exitCode = 1;
  }
}

if (import.meta.main) {
  await runCli({
    name: "webhook",
    usage: USAGE,
    parse: parseWebhookArgs,
    open: openStore,
    run,
    known: [ApiError, InvalidMerchantError, InvalidFieldError, EndpointLimitError],
  });
}
