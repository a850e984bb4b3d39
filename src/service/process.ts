/** The process side of start-up, kept free of the service's modules so `bun start` loads it first. */
import { ConfigError } from "../common/config";

/**
 * Runs `stop` on the first SIGTERM/SIGINT, then exits 0 (1 if stopping failed). A terminal's Ctrl-C reaches the
 * whole process group and `bun run` forwards it too, so the same signal often arrives twice: only a signal more
 * than 2 s after the first one forces an immediate exit (code 1).
 */
export function exitOnSignals(
  stop: () => Promise<unknown>,
  onSignal: (signal: string) => void = () => {},
  onError: (err: unknown) => void = () => {},
): void {
  let firstAt = 0;
  const handle = (signal: string) => {
    if (firstAt) {
      if (Date.now() - firstAt > 2_000) process.exit(1);
      return;
    }
    firstAt = Date.now();
    onSignal(signal);
    stop().then(
      () => process.exit(0),
      (err) => {
        onError(err);
        process.exit(1);
      },
    );
  };
  process.on("SIGTERM", () => handle("SIGTERM"));
  process.on("SIGINT", () => handle("SIGINT"));
}

/** Message of a start-up error, without stack traces or connection secrets. */
export function startErrorMessage(err: unknown): string {
  if (err instanceof ConfigError) return err.message;
  const e = err as { shortMessage?: string; message?: string; name?: string };
  const text = e?.shortMessage ?? e?.message ?? String(err);
  return `start failed: ${text.replace(/(\/\/[^:/@\s]+:)[^@\s]+@/g, "$1***@")}`;
}
