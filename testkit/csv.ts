/**
 * A strict RFC 4180 reader for the tests (independent of src/http/csv.ts): CRLF records, quoted fields with doubled
 * quotes; anything else (a bare LF, a quote inside an unquoted field, text after a closing quote) throws.
 */
export function parseCsv(text: string): string[][] {
  const rows: string[][] = [];
  let row: string[] = [];
  let i = 0;
  const fail = (why: string) => {
    throw new Error(`invalid CSV at ${i}: ${why}`);
  };
  while (i < text.length) {
    let field = "";
    if (text[i] === '"') {
      i++;
      for (;;) {
        if (i >= text.length) fail("unterminated quoted field");
        if (text[i] === '"') {
          if (text[i + 1] === '"') {
            field += '"';
            i += 2;
          } else {
            i++;
            break;
          }
        } else field += text[i++];
      }
    } else {
      while (i < text.length && text[i] !== "," && text[i] !== "\r" && text[i] !== "\n") {
        if (text[i] === '"') fail("quote in an unquoted field");
        field += text[i++];
      }
    }
    row.push(field);
    if (text[i] === ",") {
      i++;
      continue;
    }
    if (text.startsWith("\r\n", i)) {
      i += 2;
      rows.push(row);
      row = [];
      continue;
    }
    fail(i >= text.length ? "the last record has no CRLF" : `unexpected ${JSON.stringify(text[i])}`);
  }
  if (row.length) fail("unterminated record");
  return rows;
}

/** The CSV as objects keyed by its header row. */
export function parseCsvObjects(text: string): { header: string[]; rows: Record<string, string>[] } {
  const [header, ...rest] = parseCsv(text);
  return {
    header: header ?? [],
    rows: rest.map((r) => {
      if (r.length !== header!.length) throw new Error(`a record has ${r.length} fields, the header ${header!.length}`);
      return Object.fromEntries(header!.map((h, k) => [h, r[k]!]));
    }),
  };
}

/** What a cell of the service's CSV holds for a JSON value: empty for null, the text with formulas quoted. */
export function expectedCell(v: unknown): string {
  if (v === null || v === undefined) return "";
  const s = String(v);
  return /^[=+\-@\t\r]/.test(s) ? "'" + s : s;
}

/** The base units of a decimal in token units (the inverse of the CSV's decimal columns), by string arithmetic. */
export function baseUnits(decimal: string, decimals: number): bigint {
  const m = /^(\d+)(?:\.(\d+))?$/.exec(decimal);
  if (!m) throw new Error(`not a decimal: ${decimal}`);
  const frac = m[2] ?? "";
  if (frac.length > decimals) throw new Error(`${decimal} has more than ${decimals} decimals`);
  if (frac.endsWith("0")) throw new Error(`${decimal} has a trailing zero`);
  return BigInt(m[1] + frac.padEnd(decimals, "0"));
}
