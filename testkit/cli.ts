/** Helpers for tests that run the service as a child process. */
import { spawn, type Subprocess } from "bun";
import { join } from "node:path";

/** Repository root. */
export const root = join(import.meta.dir, "..");

/** A free loopback TCP port. */
export async function freePort(): Promise<number> {
  const server = Bun.serve({ port: 0, hostname: "127.0.0.1", fetch: () => new Response() });
  const port = server.port!;
  await server.stop(true);
  return port;
}

/** Whether something accepts TCP connections on a loopback port. */
export async function portOpen(port: number): Promise<boolean> {
  try {
    const socket = await Bun.connect({ hostname: "127.0.0.1", port, socket: { data() {} } });
    socket.end();
    return true;
  } catch {
    return false;
  }
}

/** Polls `fn` until it returns a truthy value, or throws after `timeoutMs` with `what` in the message. */
export async function until<T>(
  what: string,
  fn: () => Promise<T | undefined | null | false>,
  timeoutMs = 20_000,
): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  let last: unknown;
  while (Date.now() < deadline) {
    try {
      const v = await fn();
      if (v) return v;
    } catch (err) {
      last = err;
    }
    await Bun.sleep(50);
  }
  throw new Error(`timed out waiting for ${what}${last ? `: ${String(last)}` : ""}`);
}

/**
 * Waits until each of `loops` (a keeper, an indexer: anything counting its poll passes) has finished `n` more passes
 * than now: "several polls later" as a count, not a sleep.
 */
export async function morePasses(n: number, ...loops: { passes: () => number }[]): Promise<void> {
  const from = loops.map((l) => l.passes());
  await until(`${n} more poll passes`, async () => loops.every((l, i) => l.passes() >= from[i]! + n));
}

/** A child process whose stdout and stderr are collected as text while it runs. */
export type Child = {
  proc: Subprocess<"ignore", "pipe", "pipe">;
  output: () => string;
  /** Resolves with the output once `pattern` appears in it (rejects if the process exits first). */
  waitFor: (pattern: RegExp, timeoutMs?: number) => Promise<RegExpMatchArray>;
  exited: Promise<number>;
};

/** Spawns `bun run <script>` from the repository root with exactly `env` (plus PATH and HOME). */
export function spawnBun(args: string[], env: Record<string, string>): Child {
  return spawnCommand(["bun", "run", ...args], env);
}

/** Spawns `cmd` from the repository root with exactly `env` (plus PATH and HOME), collecting its output. */
export function spawnCommand(cmd: string[], env: Record<string, string>): Child {
  const proc = spawn(cmd, {
    cwd: root,
    env: { PATH: process.env.PATH ?? "", HOME: process.env.HOME ?? "/tmp", ...env },
    stdin: "ignore",
    stdout: "pipe",
    stderr: "pipe",
  });
  let text = "";
  const pump = async (stream: ReadableStream<Uint8Array>) => {
    const decoder = new TextDecoder();
    for await (const chunk of stream) text += decoder.decode(chunk, { stream: true });
  };
  const pumped = Promise.all([pump(proc.stdout), pump(proc.stderr)]);
  const exited = proc.exited.then(async (code) => {
    await pumped;
    return code;
  });
  let done = false;
  exited.then(() => (done = true));
  return {
    proc,
    output: () => text,
    exited,
    waitFor: async (pattern, timeoutMs = 30_000) => {
      const deadline = Date.now() + timeoutMs;
      while (Date.now() < deadline) {
        const m = text.match(pattern);
        if (m) return m;
        if (done) throw new Error(`process exited before ${pattern} appeared; output:\n${text}`);
        await Bun.sleep(25);
      }
      throw new Error(`timed out waiting for ${pattern}; output:\n${text}`);
    },
  };
}

/** Runs `bun run <script> …args` from the repository root to completion with exactly `env` (plus PATH and HOME). */
export async function runCommand(
  script: string,
  env: Record<string, string | undefined>,
  ...args: string[]
): Promise<{ code: number; stdout: string; stderr: string }> {
  const proc = spawn([process.execPath, "run", script, ...args], {
    cwd: root,
    env: { PATH: process.env.PATH ?? "", HOME: process.env.HOME ?? "/tmp", ...env },
    stdout: "pipe",
    stderr: "pipe",
  });
  const [stdout, stderr, code] = await Promise.all([
    new Response(proc.stdout).text(),
    new Response(proc.stderr).text(),
    proc.exited,
  ]);
  return { code, stdout, stderr };
}

/** JSON log lines of a child's output. */
export function jsonLines(text: string): Record<string, unknown>[] {
  return text
    .split("\n")
    .filter((l) => l.startsWith("{"))
    .flatMap((l) => {
      try {
        return [JSON.parse(l) as Record<string, unknown>];
      } catch {
        return [];
      }
    });
}
