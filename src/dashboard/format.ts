/** Formatting of amounts (exact, from base-unit decimal strings), addresses and dates. */

/** `base` (decimal string of token base units) as a decimal with thousands separators, exact to the last digit. */
export function formatUnits(base: string, decimals: number | null): string {
  if (decimals === null) return groupThousands(base);
  let n = BigInt(base);
  const neg = n < 0n;
  if (neg) n = -n;
  const scale = 10n ** BigInt(decimals);
  const whole = groupThousands((n / scale).toString());
  let frac = decimals > 0 ? (n % scale).toString().padStart(decimals, "0").replace(/0+$/, "") : "";
  if (frac.length < 2 && decimals >= 2) frac = frac.padEnd(2, "0");
  return (neg ? "−" : "") + whole + (frac ? "." + frac : "");
}

function groupThousands(digits: string): string {
  return digits.replace(/\B(?=(\d{3})+(?!\d))/g, ",");
}

/** Rounds base units half up to `keep` fractional digits of a `decimals`-digit token (display only). */
function roundUnits(base: string, decimals: number, keep: number): string {
  if (decimals <= keep) return base;
  const step = 10n ** BigInt(decimals - keep);
  const n = BigInt(base);
  const half = n < 0n ? -step / 2n : step / 2n;
  return (((n + half) / step) * step).toString();
}

/**
 * An amount with its symbol, "1,234.50 USDC", shown to at most 4 fractional digits (the exact value goes in a
 * title by the callers that need it); raw base units when the token has no metadata.
 */
export function formatAmount(base: string, decimals: number | null, symbol: string | null): string {
  if (decimals === null) return `${groupThousands(base)} units`;
  const rounded = roundUnits(base, decimals, 4);
  return `${rounded === base ? "" : "≈ "}${formatUnits(rounded, decimals)} ${symbol ?? ""}`.trim();
}

/** The exact amount with every digit: "75.405088062622309194 DAI". */
export function formatExact(base: string, decimals: number | null, symbol: string | null): string {
  if (decimals === null) return `${groupThousands(base)} units`;
  return `${formatUnits(base, decimals)} ${symbol ?? ""}`.trim();
}

/** A base-unit amount as a float of whole tokens (charts only: never for displayed totals). */
export function toFloat(base: string, decimals: number | null): number {
  const d = decimals ?? 0;
  const n = BigInt(base);
  const scale = 10n ** BigInt(d);
  return Number(n / scale) + Number(n % scale) / 10 ** d;
}

/** 0x1234…abcd */
export function shortHex(hex: string, head = 6, tail = 4): string {
  return hex.length <= head + tail + 1 ? hex : `${hex.slice(0, head)}…${hex.slice(-tail)}`;
}

const dateFmt = new Intl.DateTimeFormat("en-US", { year: "numeric", month: "short", day: "numeric", timeZone: "UTC" });
const dateTimeFmt = new Intl.DateTimeFormat("en-US", {
  year: "numeric",
  month: "short",
  day: "numeric",
  hour: "2-digit",
  minute: "2-digit",
  timeZone: "UTC",
  hour12: false,
});

/** "Nov 20, 2026" (UTC). */
export function formatDate(iso: string): string {
  return dateFmt.format(new Date(iso));
}

/** "Nov 20, 2026, 10:00 UTC". */
export function formatDateTime(iso: string | null): string {
  return iso === null ? "—" : `${dateTimeFmt.format(new Date(iso))} UTC`;
}

/** "3 s", "5 min", "2 h", "4 d". */
export function formatAge(ms: number): string {
  const s = Math.max(0, Math.round(ms / 1000));
  if (s < 60) return `${s} s`;
  if (s < 3600) return `${Math.floor(s / 60)} min`;
  if (s < 86_400) return `${Math.floor(s / 3600)} h`;
  return `${Math.floor(s / 86_400)} d`;
}
