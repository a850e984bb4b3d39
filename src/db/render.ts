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

/**
 * SQL text of `JSON.stringify` of the object of `fields`, keys in their order: a string escaped by `to_json` (the same
 * escapes as JSON.stringify for any text Postgres can hold), a `plain` string quoted as it is, a number as its text,
 * null as `null`.
 */
export function jsonObjectSql(sql: Sql, fields: readonly SqlField[]): SqlFragment {
  const parts = fields.map((f, i) => {
    const key = sqlLiteral(sql, `${i === 0 ? "{" : ","}${JSON.stringify(f.name)}:`);
    const value =
      f.kind === "number"
        ? sql`coalesce(${f.sql}::text, 'null')`
        : f.kind === "plain"
          ? sql`coalesce('"' || ${f.sql} || '"', 'null')`
          : sql`coalesce(to_json(${f.sql})::text, 'null')`;
    return sql`${key} || ${value} ||`;
  });
  return sql`(${parts} '}')`;
}
