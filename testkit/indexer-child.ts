/** Spawns testkit/run-indexer.ts and follows its JSON lines. */
import { join } from "node:path";

/** A running indexer process. */
export type Child = {
  proc: ReturnType<typeof Bun.spawn>;
  lines: Record<string, unknown>[];
  /** Resolves with the first line (seen so far or later) matching `pred`. */
  waitFor: (pred: (line: Record<string, unknown>) => boolean, timeoutMs?: number) => Promise<Record<string, unknown>>;
  /** Latest status line. */
  status: () => { leader: boolean; indexedBlock: string | null; lastError: string | null } | null;
  kill: (signal: "SIGKILL" | "SIGTERM") => Promise<void>;
};

const script = join(import.meta.dir, "run-indexer.ts");

/**
 * The environment of an indexer process over `chain` that backfills in batches of at most `maxRange` blocks (so a
 * kill lands inside one of many transactions), into a Postgres database or a PGlite data directory.
 */
export function backfillEnv(
  chain: { rpcUrl: string; processor: string; startBlock: bigint; chainId: number },
  maxRange: number,
  store: { url: string } | { dir: string },
): Record<string, string> {
  return {
    RPC_URL: chain.rpcUrl,
    PROCESSOR_ADDRESS: chain.processor,
    START_BLOCK: chain.startBlock.toString(),
    CHAIN_ID: String(chain.chainId),
    POLL_INTERVAL_MS: "20",
    INITIAL_RANGE: "1",
    MAX_RANGE: String(maxRange),
    ...("url" in store ? { DATABASE_URL: store.url } : { PGLITE_DIR: store.dir }),
  };
}

/** Starts the indexer process with `env` on top of the current environment. */
export function spawnIndexer(env: Record<string, string>): Child {
  const proc = Bun.spawn(["bun", "run", script], {
    env: { ...process.env, ...env },
    stdout: "pipe",
    stderr: "inherit",
  });
  const lines: Record<string, unknown>[] = [];
  let waiters: (() => void)[] = [];
  void (async () => {
    const decoder = new TextDecoder();
    let buf = "";
    for await (const chunk of proc.stdout as ReadableStream<Uint8Array>) {
      buf += decoder.decode(chunk, { stream: true });
      let i: number;
      while ((i = buf.indexOf("\n")) >= 0) {
        const text = buf.slice(0, i);
        buf = buf.slice(i + 1);
        try {
          lines.push(JSON.parse(text));
        } catch {
          lines.push({ text });
        }
      }
      const ws = waiters;
      waiters = [];
      for (const w of ws) w();
    }
  })();
  return {
    proc,
    lines,
    waitFor: async (pred, timeoutMs = 30_000) => {
      const deadline = Date.now() + timeoutMs;
      let seen = 0;
      for (;;) {
        for (; seen < lines.length; seen++) if (pred(lines[seen]!)) return lines[seen]!;
        if (proc.exitCode !== null) throw new Error(`indexer process exited with ${proc.exitCode}`);
        if (Date.now() > deadline) throw new Error("timed out waiting for the indexer process");
        await new Promise<void>((r) => {
          waiters.push(r);
          setTimeout(r, 50);
        });
      }
    },
    status: () => {
      for (let i = lines.length - 1; i >= 0; i--) if (lines[i]!.status) return lines[i]!.status as never;
      return null;
    },
    kill: async (signal) => {
      proc.kill(signal);
      await proc.exited;
    },
  };
}
