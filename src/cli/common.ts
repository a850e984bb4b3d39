/** What the operator commands share: flag parsing, their two error kinds, and where the database is reached. */
import { AppError } from "../common/errors";
import { ConfigError, loadConfig, type Config } from "../common/config";
import { createDb, DataDirInUseError, type Db } from "../db/client";
import { readControlFile, type ControlInfo } from "../db/control-file";
import { migrate } from "../db/migrate";

/** Bad command-line input: printed with the usage text. */
export class UsageError extends AppError {}

/** A command that ran but could not do its job (printed without the usage text). */
export class CommandError extends AppError {}

/** `--name value`, `--name=value` and boolean `--name` flags, plus positional arguments. */
export function parseFlags(
  args: string[],
  valued: readonly string[],
  boolean: readonly string[],
): { flags: Record<string, string | true>; positional: string[] } {
  const flags: Record<string, string | true> = {};
  const positional: string[] = [];
  for (let i = 0; i < args.length; i++) {
    const arg = args[i]!;
    if (!arg.startsWith("--")) {
      positional.push(arg);
      continue;
    }
    const eq = arg.indexOf("=");
    const name = arg.slice(2, eq < 0 ? undefined : eq);
    if (boolean.includes(name) && eq < 0) flags[name] = true;
    else if (valued.includes(name)) {
      const value = eq < 0 ? args[++i] : arg.slice(eq + 1);
      if (value === undefined || (eq < 0 && value.startsWith("--"))) throw new UsageError(`--${name} needs a value`);
      flags[name] = value;
    } else throw new UsageError(`unknown option ${arg}`);
  }
  return { flags, positional };
}

/** Rejects flags that `cmd` does not take. */
export function checkAllowed(cmd: string, flags: Record<string, unknown>, allowed: Record<string, string[]>): void {
  if (!(cmd in allowed)) throw new UsageError(`unknown command ${JSON.stringify(cmd)}`);
  for (const name of Object.keys(flags)) {
    if (!allowed[cmd]!.includes(name)) throw new UsageError(`${cmd} takes no --${name}`);
  }
}

/** The running service that holds the embedded database, or the database itself (migrated first). */
export type Local = { kind: "control"; control: ControlInfo; config: Config } | { kind: "db"; db: Db; config: Config };

/** Opens the database like the service does, or finds the service that holds the embedded one. */
export async function openLocal(): Promise<Local> {
  const config = loadConfig(process.env);
  if (!config.DATABASE_URL) {
    // Without an explicit DATA_DIR, a running `bun run dev` (./.data/dev) is found too.
    const dirs = process.env.DATA_DIR ? [config.DATA_DIR] : [config.DATA_DIR, "./.data/dev"];
    for (const dir of dirs) {
      const control = readControlFile(dir);
      if (control) return { kind: "control", control, config };
    }
  }
  let db: Db;
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
  return { kind: "db", db, config };
}

/** Calls a running service's control routes; a 4xx/5xx becomes a CommandError with the service's message. */
export async function callControl<T>(info: ControlInfo, method: string, path: string, body?: unknown): Promise<T> {
  const res = await fetch(`${info.url}/internal${path}`, {
    method,
    headers: { authorization: `Bearer ${info.token}`, "content-type": "application/json" },
    body: body === undefined ? undefined : JSON.stringify(body),
  }).catch((err) => {
    throw new CommandError(`the running service at ${info.url} did not answer: ${(err as Error).message}`);
  });
  const json = (await res.json().catch(() => null)) as { error?: { message?: string } } | null;
  if (res.status >= 400)
    throw new CommandError(json?.error?.message ?? `HTTP ${res.status}`, { fields: { status: res.status } });
  return json as T;
}

/** A command: its usage, how it parses argv, where it works (a store with `close`) and what it does there. */
export type Command<C extends { cmd: string }, S extends { close: () => Promise<void> }> = {
  name: string;
  usage: string;
  parse: (argv: string[]) => C | { cmd: "help" };
  open: () => Promise<S>;
  run: (command: C, store: S) => Promise<void>;
  /** Error classes whose message is shown as it is. */
  known?: Function[];
};

/**
 * Runs a command from argv: `help` prints the usage; known errors print their message and exit 1; anything else is
 * `<name> failed: …`.
 */
export async function runCli<C extends { cmd: string }, S extends { close: () => Promise<void> }>(
  c: Command<C, S>,
  argv = process.argv.slice(2),
): Promise<void> {
  try {
    const command = c.parse(argv);
    if (command.cmd === "help") {
      console.log(c.usage);
      return;
    }
    const store = await c.open();
    try {
      await c.run(command as C, store);
    } finally {
      await store.close();
    }
  } catch (err) {
    const e = err as Error;
    if (err instanceof UsageError) console.error(`${e.message}\n${c.usage}`);
    else if ([CommandError, ConfigError, ...(c.known ?? [])].some((k) => err instanceof (k as new () => unknown))) {
      console.error(e.message);
    } else console.error(`${c.name} failed: ${e.message ?? String(err)}`);
    process.exit(1);
  }
}
