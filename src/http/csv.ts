/**
 * RFC 4180 CSV for the list routes: CRLF line ends, a field quoted (its quotes doubled) when it holds a comma, a
 * quote, CR or LF, and cells a spreadsheet would run as a formula (starting with `=`, `+`, `-`, `@`, tab or CR)
 * prefixed with a single quote `'`. Rows come in batches from any (async) iterator, so a writer over a keyset
 * stream keeps one batch in memory.
 */
import type postgres from "postgres";
import type { SqlField, SqlFragment } from "../domain/records";
import { concatSql, sqlLiteral, type ConcatPart } from "../db/render";

type Sql = postgres.Sql<{}>;

/**
 * One column: its header and how a row renders in it (null and undefined are empty cells); `sql`, when the column
 * can be rendered by Postgres (see {@link csvLineSql}), is the same value in SQL.
 */
export type CsvColumn<T> = {
  name: string;
  value: (row: T) => string | number | boolean | null | undefined;
  sql?: (sql: Sql) => Pick<SqlField, "kind" | "sql" | "notNull">;
};

/** Columns that are a record's own fields, by name and in that order. */
export function fieldColumns<T>(names: readonly (keyof T & string)[]): CsvColumn<T>[] {
  return names.map((name) => ({ name, value: (row: T) => row[name] as ReturnType<CsvColumn<T>["value"]> }));
}

/** The line end of RFC 4180. */
export const CRLF = "\r\n";

const NEEDS_QUOTES = /[",\r\n]/;
const FORMULA_START = /^[=+\-@\t\r]/;

/** One cell: formula-escaped, then quoted when RFC 4180 requires it. */
export function csvCell(value: string | number | boolean | null | undefined): string {
  if (value === null || value === undefined) return "";
  let s = String(value);
  if (FORMULA_START.test(s)) s = "'" + s;
  return NEEDS_QUOTES.test(s) ? `"${s.replaceAll('"', '""')}"` : s;
}

/** The header line of `columns`, CRLF included. */
export function csvHeader<T>(columns: readonly CsvColumn<T>[]): string {
  return columns.map((c) => csvCell(c.name)).join(",") + CRLF;
}

/** The lines of `rows`, each ending in CRLF. */
export function csvLines<T>(columns: readonly CsvColumn<T>[], rows: readonly T[]): string {
  let out = "";
  for (const row of rows) out += columns.map((c) => csvCell(c.value(row))).join(",") + CRLF;
  return out;
}

/** A whole CSV document (header and rows) of rows held in memory: a page. */
export function csvText<T>(columns: readonly CsvColumn<T>[], rows: readonly T[]): string {
  return csvHeader(columns) + csvLines(columns, rows);
}

/**
 * SQL of {@link csvCell} over an expression (a number is its text; `plain` text is never escaped, see SqlField):
 * formula cells prefixed with `'`, then quoted (quotes doubled) when they hold a comma, a quote, CR or LF.
 */
export function csvCellSql(sql: Sql, field: Pick<SqlField, "kind" | "sql" | "notNull">): SqlFragment {
  const v = field.sql;
  if (field.kind === "plain") return field.notNull ? v : sql`coalesce(${v}, '')`;
  if (field.kind === "number") return sql`coalesce(case when ${v} < 0 then '''' else '' end || (${v})::text, '')`;
  const formula = sql`left(${v}, 1) in ('=', '+', '-', '@', E'\\t', E'\\r')`;
  return sql`(case when ${v} is null then ''
    when ${v} ~ E'[",\\r\\n]' then '"' || (case when ${formula} then '''' else '' end) || replace(${v}, '"', '""') || '"'
    when ${formula} then '''' || ${v}
    else ${v} end)`;
}

/** SQL of one line of {@link csvLines}: every column's {@link csvCellSql}, comma-separated, CRLF-ended. */
export function csvLineSql<T>(sql: Sql, columns: readonly CsvColumn<T>[]): SqlFragment {
  const parts: ConcatPart[] = columns.flatMap((c, i) => {
    if (!c.sql) throw new Error(`CSV column ${c.name} has no SQL`);
    return [csvCellSql(sql, c.sql(sql)), i === columns.length - 1 ? CRLF : ","];
  });
  return concatSql(sql, parts);
}

/**
 * The CSV document of `batches` as text chunks: the header first, then one chunk per batch. Reads the next batch
 * only when the consumer asks for the next chunk, so memory holds one batch whatever the number of rows.
 */
export async function* csvChunks<T>(
  columns: readonly CsvColumn<T>[],
  batches: AsyncIterable<readonly T[]> | Iterable<readonly T[]>,
): AsyncGenerator<string> {
  yield csvHeader(columns);
  for await (const batch of batches) if (batch.length > 0) yield csvLines(columns, batch);
}

/**
 * An amount in token base units as an exact decimal in token units, bigint arithmetic only: trailing zeros of the
 * fraction are trimmed and a whole amount has no decimal point (1234500 with 6 decimals is "1.2345", 10000000 is
 * "10", 0 is "0"). Empty when the amount or the decimals are unknown.
 */
export function formatUnits(amount: string | null | undefined, decimals: number | null | undefined): string {
  if (amount === null || amount === undefined || decimals === null || decimals === undefined) return "";
  const v = BigInt(amount);
  const negative = v < 0n;
  const abs = negative ? -v : v;
  const unit = 10n ** BigInt(decimals);
  const whole = abs / unit;
  const frac = (abs % unit).toString().padStart(decimals, "0").replace(/0+$/, "");
  return `${negative ? "-" : ""}${whole}${frac ? `.${frac}` : ""}`;
}

/** 10^-d as numeric for d = 0…80 (its scale d), subscripted by decimals + 1: cheaper than building it per row. */
const UNITS = `{${Array.from({ length: 81 }, (_, d) => `1e-${d}`).join(",")}}`;

/**
 * SQL of {@link formatUnits} over a numeric `amount` and an integer `decimals`: the product with 10^-decimals is exact
 * (its scale is `decimals`), trim_scale drops the fraction's trailing zeros and numeric's text has no exponent. The
 * unit comes from a constant array for the usual decimals (0–80) and is parsed from `1e-<decimals>` beyond them.
 */
export function formatUnitsSql(sql: Sql, amount: SqlFragment, decimals: SqlFragment): SqlFragment {
  const unit = sql`coalesce((${sqlLiteral(sql, UNITS)}::numeric[])[(${decimals}) + 1], ('1e-' || ${decimals})::numeric)`;
  return sql`coalesce(trim_scale((${amount}) * ${unit})::text, '')`;
}
