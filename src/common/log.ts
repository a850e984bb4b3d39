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

/** How records are written: JSON lines (machines) or one short coloured line (a person at a terminal). */
export type LogFormat = "json" | "pretty";

/** LOG_FORMAT when set; otherwise pretty on a terminal and JSON lines when stdout is a pipe or file. */
export function resolveLogFormat(configured?: LogFormat, isTty = Boolean(process.stdout.isTTY)): LogFormat {
  return configured ?? (isTty ? "pretty" : "json");
}

const COLOR: Record<LogLevel, string> = { debug: "\x1b[90m", info: "\x1b[36m", warn: "\x1b[33m", error: "\x1b[31m" };
const DIM = "\x1b[2m";
const RESET = "\x1b[0m";
const BARE = /^[^\s"=[{][^\s"=]*$/;

/** A field value as `k=v` shows it: a string bare unless it has spaces or quotes or looks like JSON; else JSON. */
function prettyValue(v: unknown): string {
  if (typeof v === "string") return BARE.test(v) ? v : JSON.stringify(v);
  if (v === undefined) return "undefined";
  return typeof v === "object" && v !== null ? JSON.stringify(v) : String(v);
}

/** One record as a terminal line: `12:00:01.042 INFO  message k=v k=v` (ANSI colours unless `color` is false). */
export function prettyLine(record: Record<string, unknown>, color = true): string {
  const { time, level, msg, ...fields } = record as { time: string; level: LogLevel; msg: string };
  const paint = (code: string, text: string) => (color ? `${code}${text}${RESET}` : text);
  const clock = paint(DIM, String(time).slice(11, 23));
  const lvl = paint(COLOR[level] ?? "", level.toUpperCase().padEnd(5));
  const kv = Object.entries(fields).map(([k, v]) => `${paint(DIM, `${k}=`)}${prettyValue(v)}`);
  return [clock, lvl, msg, ...kv].join(" ");
}

/**
 * A logger writing to stdout at or above `level`: JSON lines, or pretty lines (`format`). Both forms are built from
 * the same scrubbed record, so credential-looking fields are redacted in either.
 */
export function createLogger(
  level: LogLevel = "info",
  write: (line: string) => void = (line) => process.stdout.write(line + "\n"),
  format: LogFormat = "json",
): Logger {
  const min = rank[level];
  const color = format === "pretty" && !process.env.NO_COLOR;
  return (lvl, msg, fields) => {
    if (rank[lvl] < min) return;
    const extra = fields ? (clean(fields) as Record<string, unknown>) : {};
    const record = { time: new Date().toISOString(), level: lvl, msg: scrubString(msg), ...extra };
    write(format === "pretty" ? prettyLine(record, color) : JSON.stringify(record));
  };
}

/** A logger that drops everything (tests). */
export const silentLogger: Logger = () => {};
