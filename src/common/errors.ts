/** Options every error of ours takes. */
export type AppErrorOptions = {
  /** The error this one wraps. */
  cause?: unknown;
  /** Whether trying the same thing again later may succeed (a timeout, a lagging node), default false. */
  retryable?: boolean;
  /** Structured facts for the log (never secrets). */
  fields?: Record<string, unknown>;
};

/** Base class of the service's errors: a message, the cause it wraps, log fields and whether it is retryable. */
export class AppError extends Error {
  readonly retryable: boolean;
  readonly fields: Record<string, unknown>;

  constructor(message: string, opts: AppErrorOptions = {}) {
    super(message, opts.cause === undefined ? undefined : { cause: opts.cause });
    this.name = new.target.name;
    this.retryable = opts.retryable ?? false;
    this.fields = opts.fields ?? {};
  }
}

/** `Name: message` of any thrown value, short and single-line, for logs and status fields. */
export function describeError(err: unknown, max = 500): string {
  const e = err as { shortMessage?: string; message?: string; name?: string };
  return `${e?.name ?? "Error"}: ${e?.shortMessage ?? e?.message ?? String(err)}`.replace(/\s+/g, " ").slice(0, max);
}
