/**
 * Records rendered as text by Postgres: a row's JSON (or CSV line) built in the query, so the client decodes one
 * column instead of one per field and serializes nothing. The fields come from the record's one definition in SQL
 * (src/domain/records.ts); tests hold each rendering equal to its TypeScript twin.
 */
import type postgres from "postgres";
import type { SqlField, SqlFragment } from "../domain/records";

type Sql = postgres.Sql<{}>;

/** A SQL string literal of `text` (for text decided by the code, never by input). */
export function sqlLiteral(sql: Sql, text: string): SqlFragment {
  return sql.unsafe(`'${text.replaceAll("'", "''")}'`) as unknown as SqlFragment;
}

/** A part of a {@link concatSql}: literal text, or a SQL text expression. */
export type ConcatPart = string | SqlFragment;

/**
 * SQL of `parts` joined with `||` (null if an expression part is null), adjacent literals merged into one, as a
 * balanced tree: `(a || b) || (c || d)` copies each part about log2(n) times where the chain `a || b || c || d`
 * copies the growing text at every step (a record's 20-odd parts: the rendering costs 10–15 % less).
 */
export function concatSql(sql: Sql, parts: readonly ConcatPart[]): SqlFragment {
  const merged: ConcatPart[] = [];
  for (const part of parts) {
    const last = merged[merged.length - 1];
    if (typeof part === "string" && typeof last === "string") merged[merged.length - 1] = last + part;
    else if (part !== "") merged.push(part);
  }
  if (merged.length === 0) return sqlLiteral(sql, "");
  const tree = (from: number, to: number): SqlFragment => {
    if (to - from === 1) {
      const part = merged[from]!;
      return typeof part === "string" ? sqlLiteral(sql, part) : sql`(${part})`;
    }
    const mid = (from + to) >> 1;
    return sql`(${tree(from, mid)} || ${tree(mid, to)})`;
  };
  return tree(0, merged.length);
}

/**
 * SQL text of `JSON.stringify` of the object of `fields`, keys in their order: a string escaped by `to_json` (the same
 * escapes as JSON.stringify for any text Postgres can hold), a `plain` string quoted as it is (its quotes joined to the
 * keys around it when it is never null), a number as its text, null as `null`.
 */
export function jsonObjectSql(sql: Sql, fields: readonly SqlField[]): SqlFragment {
  const parts: ConcatPart[] = [];
  fields.forEach((f, i) => {
    const key = `${i === 0 ? "{" : ","}${JSON.stringify(f.name)}:`;
    if (f.kind === "plain" && f.notNull) parts.push(`${key}"`, f.sql, '"');
    else
      parts.push(
        key,
        f.kind === "number"
          ? sql`coalesce(${f.sql}::text, 'null')`
          : f.kind === "plain"
            ? sql`coalesce('"' || ${f.sql} || '"', 'null')`
            : sql`coalesce(to_json(${f.sql})::text, 'null')`,
      );
  });
  parts.push("}");
  return concatSql(sql, parts);
}
