/** Log levels, least to most severe. */
export type LogLevel = "debug" | "info" | "warn" | "error";

/** Writes one structured JSON line: `log("info", "indexed", { block: "12" })`. */
export type Logger = (level: LogLevel, msg: string, fields?: Record<string, unknown>) => void;

const rank: Record<LogLevel, number> = { debug: 10, info: 20, warn: 30, error: 40 };

// Field names whose values are credentials: never written, whatever their type.
const SECRET_KEY = /(private_?key|secret|password|passwd|api_?key|^key$|authorization|cookie|session_?token|bearer)/i;

// Secrets with no recognizable shape (the admin key), masked wherever they appear: see maskInLogs.
const literals = new Set<string>();

/** Masks this exact value in every log line from now on (a configured secret that no pattern would find). */
export function maskInLogs(value: string | undefined): void {
  if (value && value.length >= 8) literals.add(value);
}

/** Masks credentials inside a free-text value: configured secrets, URL passwords, bearer tokens and prefixed keys. */
function scrubString(s: string): string {
  for (const l of literals) s = s.replaceAll(l, "***");
  return s
    .replace(/(\b[a-z][a-z0-9+.-]*:\/\/[^:/@\s]+:)[^@\s]+@/gi, "$1***@")
    .replace(/(bearer\s+)[^\s"']+/gi, "$1***")
    .replace(/\b(sk|sess|ctl)_[A-Za-z0-9_-]{8,}/g, "$1_***")
    .replace(/\bwhsec_[A-Za-z0-9+/=_-]{8,}/g, "whsec_***");
}

/** Makes a value safe and JSON-serializable: bigint as string, errors as message, secrets redacted. */
function clean(value: unknown, depth = 0): unknown {
  if (value === null || value === undefined) return value;
  if (typeof value === "bigint") return value.toString();
  if (typeof value === "string") return scrubString(value);
  if (typeof value !== "object") return value;
  if (value instanceof Error) {
    const e = value as Error & { shortMessage?: string; code?: unknown };
    return scrubString(e.shortMessage ?? e.message);
  }
  if (value instanceof Date) return value.toISOString();
  if (depth > 4) return "[…]";
  if (Array.isArray(value)) return value.map((v) => clean(v, depth + 1));
  const out: Record<string, unknown> = {};
  for (const [k, v] of Object.entries(value)) out[k] = SECRET_KEY.test(k) ? "[redacted]" : clean(v, depth + 1);
  return out;
}

/** A logger writing JSON lines to stdout at or above `level`; credential-looking fields are redacted. */
export function createLogger(
  level: LogLevel = "info",
  write: (line: string) => void = (line) => process.stdout.write(line + "\n"),
): Logger {
  const min = rank[level];
  return (lvl, msg, fields) => {
    if (rank[lvl] < min) return;
    const extra = fields ? (clean(fields) as Record<string, unknown>) : {};
    write(JSON.stringify({ time: new Date().toISOString(), level: lvl, msg: scrubString(msg), ...extra }));
  };
}

/** A logger that drops everything (tests). */
export const silentLogger: Logger = () => {};
