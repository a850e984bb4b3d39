/**
 * `bun run dev`: the whole system on one machine with nothing to configure. Starts anvil (port 8545 when free),
 * deploys the protocol and demo tokens, seeds a demo merchant with two modules, six plans and four months of history
 * ending now (growth, renewals, plan changes, cancellations, failed renewals and recoveries, a blocked subscriber) and
 * twenty subscribers whose histories cover every status, activity type and failure reason (dev/seed.ts), then runs
 * indexer, keeper and API on a fresh embedded database (./.data/dev) and prints the URLs, the merchant and an API
 * key (dev/run.ts).
 *
 * Env/flags: PORT / --port (API, default 3000 or any free port), ANVIL_PORT / --anvil-port, --chains N (1 to 4
 * anvils with chain ids 31337, 31338, …, the demo on each, indexed by one process), LOG_LEVEL (default warn),
 * DEV_DATA_DIR (default ./.data/dev). Ctrl-C stops everything it started, anvil included.
 */
import { ConfigError } from "../common/config";
import { exitOnSignals, startErrorMessage } from "../service/process";
import { runDev, type DevEnvironment } from "./dev/run";

export { runDev, formatBanner, type DevEnvironment, type DevOptions } from "./dev/run";
export { demoAnvilArgs, seedDemo, type Seeded } from "./dev/seed";

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

/** `--chains N`: 1 to 4 chains. */
function chainsArg(raw: string | undefined): number | undefined {
  if (raw === undefined) return undefined;
  if (!/^[1-4]$/.test(raw)) throw new ConfigError(`--chains=${JSON.stringify(raw)} must be 1 to 4`);
  return Number(raw);
}

/** Runs dev from the command line: prints the banner, stops everything on Ctrl-C / SIGTERM. */
async function main(argv: string[]) {
  let env: DevEnvironment;
  try {
    env = await runDev({
      port: portArg(flag(argv, "port") ?? process.env.PORT, "PORT"),
      anvilPort: portArg(flag(argv, "anvil-port") ?? process.env.ANVIL_PORT, "ANVIL_PORT"),
      chains: chainsArg(flag(argv, "chains")),
    });
  } catch (err) {
    console.error(startErrorMessage(err).replace(/^start failed/, "dev failed"));
    process.exit(1);
  }
  process.stdout.write(env.banner + "\n");
  env.live().catch((err) => console.error(`the live demo subscription failed: ${(err as Error).message}`));
  exitOnSignals(
    env.stop,
    () => console.log("stopping…"),
    (err) => console.error(`stop failed: ${(err as Error).message}`),
  );
}

if (import.meta.main) await main(process.argv.slice(2));
