/**
 * `bun run sp:forget --chain <id> --spender 0x…`: deletes everything the index holds for one Spend Permission spender
 * of a chain (its permissions, charges, logs, webhook events and deliveries, outlooks, claims, MRR movements, stats
 * rollups; customers who also have module subscriptions of the same address get their MRR folded again at the
 * indexer's next start) in one transaction, and takes it out of the chain's recorded spender set, so the indexer
 * starts again with the spender removed from SPEND_PERMISSION_SPENDERS (spend-permissions spec §6.4). Reaches the
 * database like the other commands: DATABASE_URL, else the embedded PGlite in DATA_DIR.
 *
 * Refused (exit 2, one line, nothing changed): bad arguments; the spender still named by this environment's
 * SPEND_PERMISSION_SPENDERS for that chain (or `*`); a running service holding the embedded database, or an indexer of
 * the chain holding its lock; a chain without the source, one indexing every spender, or a spender it does not index.
 * Any other failure: exit 1.
 */
import { isAddress } from "viem";
import { ConfigError, loadConfig, type Config } from "../common/config";
import { ForgetRefusedError, forgetSpender } from "../indexer/spend-permission-forget";
import { CommandError, openLocal } from "./common";

const USAGE = "usage: bun run sp:forget --chain <chain id> --spender 0x…";

/** A refusal or bad input: one line on stderr, exit 2. */
class Refused extends Error {}

/** Parses `--chain <id> --spender 0x…` (also `--name=value`); throws Refused. */
export function parseForgetArgs(argv: string[]): { chainId: number; spender: string } | "help" {
  if (argv.length === 1 && ["help", "--help", "-h"].includes(argv[0]!)) return "help";
  const flags: Record<string, string> = {};
  for (let i = 0; i < argv.length; i++) {
    const arg = argv[i]!;
    const m = /^--(chain|spender)(?:=(.*))?$/.exec(arg);
    if (!m) throw new Refused(`unexpected argument ${arg} (${USAGE})`);
    const value = m[2] ?? argv[++i];
    if (value === undefined) throw new Refused(`--${m[1]} needs a value (${USAGE})`);
    if (flags[m[1]!] !== undefined) throw new Refused(`--${m[1]} is given twice`);
    flags[m[1]!] = value;
  }
  if (flags.chain === undefined || flags.spender === undefined)
    throw new Refused(`--chain and --spender are required (${USAGE})`);
  if (!/^[1-9]\d{0,15}$/.test(flags.chain))
    throw new Refused(`--chain ${JSON.stringify(flags.chain)} is not a chain id`);
  const spender = flags.spender.trim();
  if (!/^0x[0-9a-fA-F]{40}$/.test(spender) || !isAddress(spender, { strict: false })) {
    throw new Refused(`--spender ${JSON.stringify(flags.spender)} is not an address (0x + 40 hex)`);
  }
  return { chainId: Number(flags.chain), spender: spender.toLowerCase() };
}

/** Refuses a spender this environment still configures for the chain: the indexer would index it again. */
function refuseConfigured(config: Config, chainId: number, spender: string): void {
  for (const c of config.indexed) {
    const id = c.chainId ?? config.CHAIN_ID;
    const sp = c.spendPermissions;
    if ((id !== undefined && id !== chainId) || !sp) continue;
    if (sp.spenders === "*" || sp.spenders.includes(spender)) {
      const which =
        sp.spenders === "*" ? "SPEND_PERMISSION_SPENDERS is *" : `SPEND_PERMISSION_SPENDERS names ${spender}`;
      throw new Refused(`${which} for chain ${chainId}: remove the spender from the configuration first`);
    }
  }
}

async function main(argv: string[]): Promise<number> {
  const parsed = parseForgetArgs(argv);
  if (parsed === "help") {
    console.log(USAGE);
    return 0;
  }
  const { chainId, spender } = parsed;
  refuseConfigured(loadConfig(process.env), chainId, spender);
  const local = await openLocal().catch((err) => {
    // The embedded database held by a process without the api role (see openLocal).
    throw err instanceof CommandError ? new Refused(err.message) : err;
  });
  if (local.kind === "control") {
    throw new Refused(`a running service holds the embedded database at ${local.control.url}: stop it first`);
  }
  try {
    const r = await forgetSpender(local.db.sql, chainId, spender);
    console.log(
      `forgot spender ${spender} on chain ${chainId}: ${r.permissions} permissions, ${r.charges} charges, ` +
        `${r.logs} logs, ${r.events} webhook events (${r.deliveries} deliveries), ${r.movements} MRR movements; ` +
        `spenders left: ${r.spenders.length ? r.spenders.join(",") : "none"}` +
        (r.refolded > 0
          ? `; the MRR of ${r.refolded} customers with module subscriptions of ${spender} is folded again when the ` +
            `indexer next starts`
          : ""),
    );
    return 0;
  } finally {
    await local.db.close();
  }
}

if (import.meta.main) {
  main(process.argv.slice(2)).then(
    (code) => process.exit(code),
    (err) => {
      const e = err as Error;
      if (err instanceof Refused || err instanceof ForgetRefusedError) {
        console.error(`sp:forget refused: ${e.message}`);
        process.exit(2);
      }
      console.error(err instanceof ConfigError ? e.message : `sp:forget failed: ${e.message ?? String(err)}`);
      process.exit(1);
    },
  );
}
