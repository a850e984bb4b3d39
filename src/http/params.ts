/**
 * Path and query parameters shared by the `/v0` routes: one documented schema per parameter (fed to OpenAPI) and
 * one strict parser per parameter (the runtime check, with messages that name the parameter).
 *
 * Elysia's own query coercion is lenient in ways the API must not be (`chain_id=0x10` becomes 16, `limit=1e3`
 * becomes 1000, an optional enum gets a default injected), so routes declare their parameters with
 * {@link documented} — a schema Elysia passes through untouched — and call the parsers below.
 */
import { Type as t, type TSchema, type TString } from "@sinclair/typebox";
import { InvalidParameterError, MissingParameterError } from "./errors";

/** Raw query or path values as Elysia hands them over (a string, or null for undecodable path segments). */
export type RawParams = Record<string, string | null | undefined>;

/**
 * Wraps a JSON schema so Elysia documents it but does not validate or coerce it (the route's parser does).
 * Typed as a string: that is what every raw path and query value is.
 */
export function documented(schema: TSchema | Record<string, unknown>): TString {
  const { [Symbol.for("TypeBox.Kind")]: _kind, ...json } = schema as Record<string | symbol, unknown>;
  return t.Any(json as never) as unknown as TString;
}

const ADDRESS_RE = /^0x[0-9a-fA-F]{40}$/;
const UINT_RE = /^[0-9]+$/;
const MAX_UINT256 = (1n << 256n) - 1n;
const MAX_UINT32 = 4_294_967_295;

/** The value of `name`, or undefined when absent; a present-but-undecodable value is an invalid parameter. */
function raw(params: RawParams, name: string): string | undefined {
  const v = params[name];
  if (v === null) throw new InvalidParameterError(name, `${name} is not valid percent-encoded text`);
  return v;
}

/** A 0x + 40 hex address in any letter case, returned lowercase. */
export function parseAddress(params: RawParams, name: string): string {
  const v = raw(params, name);
  if (v === undefined) throw new MissingParameterError(name);
  if (!ADDRESS_RE.test(v))
    throw new InvalidParameterError(name, `${name} must be an address: 0x followed by 40 hex digits`);
  return v.toLowerCase();
}

/** A positive chain id (decimal, at most 2^53 - 1); `fallback` when absent. */
export function parseChainId(params: RawParams, fallback: number, name = "chain_id"): number {
  const v = raw(params, name);
  if (v === undefined) return fallback;
  const n = /^[1-9][0-9]{0,15}$/.test(v) ? Number(v) : NaN;
  if (!Number.isSafeInteger(n)) throw new InvalidParameterError(name, `${name} must be a positive decimal integer`);
  return n;
}

/** Page size 1–1000; undefined (no cap) when absent. */
export function parseLimit(params: RawParams, name = "limit"): number | undefined {
  const v = raw(params, name);
  if (v === undefined) return undefined;
  const n = /^[0-9]{1,4}$/.test(v) ? Number(v) : NaN;
  if (!(n >= 1 && n <= 1000)) throw new InvalidParameterError(name, `${name} must be an integer from 1 to 1000`);
  return n;
}

/** One of `values` (exact spelling); `fallback` when absent. */
export function parseEnum<const V extends string, F extends V | undefined>(
  params: RawParams,
  name: string,
  values: readonly V[],
  fallback: F,
): V | F {
  const v = raw(params, name);
  if (v === undefined) return fallback;
  if (!(values as readonly string[]).includes(v)) {
    throw new InvalidParameterError(name, `${name} must be one of ${values.join(", ")}`);
  }
  return v as V;
}

/** ISO 8601 extended format (`2026-11-20T10:00:00.000+02:00`); the offset may be `±hh`, `±hhmm` or `±hh:mm`. */
const DATE_TIME_RE =
  /^(\d{4})-(\d{2})-(\d{2})[Tt ](\d{2}):(\d{2})(?::(\d{2})(?:[.,](\d+))?)?(?:([Zz])|([+\- ])(\d{2})(?::?(\d{2}))?)$/;
/** ISO 8601 basic format (`20261120T100000Z`, `20261120T1200+0200`). */
const BASIC_DATE_TIME_RE =
  /^(\d{4})(\d{2})(\d{2})[Tt](\d{2})(\d{2})(?:(\d{2})(?:[.,](\d+))?)?(?:([Zz])|([+\- ])(\d{2})(\d{2})?)$/;

/**
 * An ISO 8601 date-time (extended or basic format) with or without seconds/fraction, `Z` or an offset. A space before the offset is read as
 * `+` (an unencoded `+` in a query string arrives as a space). Fractions finer than a millisecond round up, so
 * "at or after" never includes an earlier instant.
 */
export function parseSince(params: RawParams, name = "since"): Date | undefined {
  const v = raw(params, name);
  if (v === undefined) return undefined;
  const bad = () =>
    new InvalidParameterError(
      name,
      `${name} must be an ISO 8601 date-time such as 2026-11-20T10:00:00Z or 2026-11-20T12:00:00.000+02:00`,
    );
  const m = DATE_TIME_RE.exec(v) ?? BASIC_DATE_TIME_RE.exec(v);
  if (!m || v.length > 64) throw bad();
  const [, y, mo, d, h, mi, s = "0", frac = "", z, sign, oh, om = "00"] = m;
  const year = Number(y),
    month = Number(mo),
    day = Number(d),
    hour = Number(h),
    minute = Number(mi),
    second = Number(s);
  const daysInMonth = [
    31,
    year % 4 === 0 && (year % 100 !== 0 || year % 400 === 0) ? 29 : 28,
    31,
    30,
    31,
    30,
    31,
    31,
    30,
    31,
    30,
    31,
  ][month - 1];
  if (!daysInMonth || day < 1 || day > daysInMonth || hour > 23 || minute > 59 || second > 59) throw bad();
  let offsetMin = 0;
  if (!z) {
    if (Number(oh) > 23 || Number(om) > 59) throw bad();
    offsetMin = (sign === "-" ? -1 : 1) * (Number(oh) * 60 + Number(om));
  }
  // Milliseconds from the digits, not a float: any finer digit that is not zero rounds up.
  const ms = Number(frac.padEnd(3, "0").slice(0, 3)) + (/[1-9]/.test(frac.slice(3)) ? 1 : 0);
  // setUTCFullYear, unlike Date.UTC, does not map years 0–99 to 1900–1999.
  const date = new Date(0);
  date.setUTCFullYear(year, month - 1, day);
  date.setUTCHours(hour, minute, second, 0);
  const at = new Date(date.getTime() + ms - offsetMin * 60_000);
  // Postgres has no year 0 and postgres.js sends Dates as ISO text, which cannot name years past 9999.
  if (!(at.getTime() >= MIN_INSTANT && at.getTime() < MAX_INSTANT)) {
    throw new InvalidParameterError(
      name,
      `${name} must be a date-time from 0001-01-01T00:00:00Z to 9999-12-31T23:59:59Z`,
    );
  }
  return at;
}

/** First and past-the-last instants a date-time parameter may name (years 0001–9999, UTC). */
export const MIN_INSTANT = Date.UTC(2000, 0, 1) - 730_119 * 86_400_000;
export const MAX_INSTANT = Date.UTC(9999, 11, 31) + 86_400_000;

/** A decimal uint256 (leading zeros allowed), returned in canonical decimal. */
export function parseUint256(params: RawParams, name: string): string {
  const v = raw(params, name);
  if (v === undefined) throw new MissingParameterError(name);
  if (!UINT_RE.test(v) || v.length > 80 || BigInt(v) > MAX_UINT256) {
    throw new InvalidParameterError(name, `${name} must be a decimal integer from 0 to 2^256 - 1`);
  }
  return BigInt(v).toString();
}

/** Comma-separated uint32 plan ids, at most 100; duplicates dropped keeping the first occurrence. */
export function parsePlanIds(params: RawParams, name = "plan_ids"): string[] {
  const v = raw(params, name);
  if (v === undefined || v === "") throw new MissingParameterError(name);
  const parts = v.split(",");
  const out: string[] = [];
  for (const p of parts) {
    const n = /^[0-9]{1,10}$/.test(p) ? Number(p) : NaN;
    if (!(n <= MAX_UINT32)) {
      throw new InvalidParameterError(name, `${name} must be comma-separated decimal uint32 plan ids, e.g. 1,2`);
    }
    const canonical = String(n);
    if (!out.includes(canonical)) out.push(canonical);
  }
  if (out.length > 100) throw new InvalidParameterError(name, `${name} may name at most 100 plans`);
  return out;
}

/** A token symbol for the exact, case-insensitive `token` filter. */
export function parseToken(params: RawParams, name = "token"): string | undefined {
  const v = raw(params, name);
  if (v === undefined) return undefined;
  if (v.length < 1 || v.length > 64 || /[\u0000-\u001f\u007f]/.test(v)) {
    throw new InvalidParameterError(name, `${name} must be a token symbol of 1 to 64 printable characters`);
  }
  return v;
}

/** `<chain_id>:<tx_hash>:<log_index>` (an activity record's event_id). */
export function parseEventId(params: RawParams, name = "starting_after") {
  const v = raw(params, name);
  if (v === undefined) return undefined;
  const m = /^([1-9][0-9]{0,15}):(0x[0-9a-fA-F]{64}):(0|[1-9][0-9]{0,9})$/.exec(v);
  if (!m || Number(m[3]) > 2_147_483_647) {
    throw new InvalidParameterError(name, `${name} must be an event_id: <chain_id>:<tx_hash>:<log_index>`);
  }
  return { chainId: Number(m[1]), txHash: m[2].toLowerCase(), logIndex: Number(m[3]) };
}

/** `<chain_id>:<module>:<subscription_id>` (a subscription record's allocation_id). */
export function parseAllocationId(params: RawParams, name = "starting_after") {
  const v = raw(params, name);
  if (v === undefined) return undefined;
  // A spend permission's allocation id names its hash: `<chain_id>:<manager>:0x<64 hex>`.
  const m = /^([1-9][0-9]{0,15}):(0x[0-9a-fA-F]{40}):([0-9]{1,78}|0x[0-9a-fA-F]{64})$/.exec(v);
  if (!m || BigInt(m[3]) > MAX_UINT256) {
    throw new InvalidParameterError(name, `${name} must be an allocation_id: <chain_id>:<module>:<subscription_id>`);
  }
  return { chainId: Number(m[1]), module: m[2].toLowerCase(), subscriptionId: BigInt(m[3]).toString() };
}

/** Documented schemas of the shared parameters (OpenAPI only; the parsers above are the runtime check). */
export const ParamDocs = {
  merchant: documented(
    t.String({
      pattern: ADDRESS_RE.source,
      description: "Merchant wallet address (0x + 40 hex digits, any letter case).",
      examples: ["0x70997970c51812dc3a010c7d01b50e0d17dc79c8"],
    }),
  ),
  chainId: documented(
    t.Integer({
      minimum: 1,
      maximum: Number.MAX_SAFE_INTEGER,
      description: "Chain to read. Default: the indexer's configured chain. Must be a chain this service indexes.",
      examples: [31337],
    }),
  ),
  limit: documented(
    t.Integer({
      minimum: 1,
      maximum: 1000,
      description:
        "Page size, 1 to 1000. When omitted, every matching row is returned. When a page is cut by the limit, " +
        'a `Link: <url>; rel="next"` header names the next page.',
      examples: [100],
    }),
  ),
};
