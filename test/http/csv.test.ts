/**
 * `format=csv` on the list routes: RFC 4180 read back with an independent parser, every cell equal to the JSON
 * record's field, the decimal columns exact, formula cells escaped; and the writer's own rules (quoting, formula
 * prefix, exact decimals) as properties.
 */
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import fc from "fast-check";
import { csvCell, csvText, formatUnits } from "../../src/http/csv";
import { ACTIVITY_CSV_COLUMNS } from "../../src/http/features/activity/model";
import { SUBSCRIPTION_CSV_COLUMNS } from "../../src/http/features/subscriptions/model";
import { CHAIN_A, CHAIN_B, M1, M2 } from "../../testkit/seed";
import { BIG, EVIL_SYMBOL, seedBigMerchant } from "../../testkit/bulk";
import { baseUnits, expectedCell, parseCsv, parseCsvObjects } from "../../testkit/csv";
import { startSeededApp, type SeededApp } from "../../testkit/app";

let s: SeededApp;
beforeAll(async () => {
  s = await startSeededApp();
  await seedBigMerchant(s.db.sql, { activity: 400, subscriptions: 60 });
}, 60_000);
afterAll(async () => {
  await s?.close();
});

describe("the writer", () => {
  test("quotes what RFC 4180 requires and prefixes formula cells with a single quote", () => {
    expect(csvCell("plain")).toBe("plain");
    expect(csvCell(null)).toBe("");
    expect(csvCell(undefined)).toBe("");
    expect(csvCell(6)).toBe("6");
    expect(csvCell(false)).toBe("false");
    expect(csvCell("a,b")).toBe('"a,b"');
    expect(csvCell('say "hi"')).toBe('"say ""hi"""');
    expect(csvCell("two\nlines")).toBe('"two\nlines"');
    expect(csvCell("cr\rhere")).toBe('"cr\rhere"');
    expect(csvCell("=1+2")).toBe("'=1+2");
    expect(csvCell("+1")).toBe("'+1");
    expect(csvCell("-1")).toBe("'-1");
    expect(csvCell("@SUM(A1)")).toBe("'@SUM(A1)");
    expect(csvCell("\tx")).toBe("'\tx");
    expect(csvCell("\rx")).toBe('"\'\rx"');
    expect(csvCell('=HYPERLINK("u"),')).toBe(`"'=HYPERLINK(""u""),"`);
    expect(csvCell("a=b")).toBe("a=b");
  });

  const tricky = fc.string({ unit: fc.constantFrom(",", '"', "\r", "\n", "=", "+", "-", "@", "\t", "'", "a", " ") });

  test("any table of strings reads back cell for cell (formula cells with their quote)", () => {
    const cols = [0, 1, 2].map((k) => ({ name: `c${k}`, value: (r: string[]) => r[k] }));
    fc.assert(
      fc.property(fc.array(fc.tuple(tricky, tricky, fc.string({ unit: "binary" })), { maxLength: 20 }), (rows) => {
        const text = csvText(cols, rows);
        expect(text.endsWith("\r\n")).toBe(true);
        const back = parseCsv(text);
        expect(back[0]).toEqual(["c0", "c1", "c2"]);
        expect(back.slice(1)).toEqual(rows.map((r) => r.map(expectedCell)));
      }),
      { numRuns: 300 },
    );
  });

  test("decimals are exact, trailing zeros trimmed, no decimal point on whole amounts", () => {
    expect(formatUnits("1234500", 6)).toBe("1.2345");
    expect(formatUnits("10000000", 6)).toBe("10");
    expect(formatUnits("0", 6)).toBe("0");
    expect(formatUnits("1", 18)).toBe("0.000000000000000001");
    expect(formatUnits("123456789012345678901234567890", 18)).toBe("123456789012.34567890123456789");
    expect(formatUnits("42", 0)).toBe("42");
    expect(formatUnits("42", null)).toBe("");
    expect(formatUnits(null, 6)).toBe("");
    const max = (1n << 256n) - 1n;
    expect(formatUnits(max.toString(), 77)).toBe(
      "1.15792089237316195423570985008687907853269984665640564039457584007913129639935",
    );
    fc.assert(
      fc.property(fc.bigInt({ min: 0n, max }), fc.integer({ min: 0, max: 80 }), (amount, decimals) => {
        const text = formatUnits(amount.toString(), decimals);
        expect(baseUnits(text, decimals)).toBe(amount);
      }),
      { numRuns: 1000 },
    );
  });
});

/** The JSON list and the CSV list of `path` (no limit), and the CSV response. */
async function both(path: string) {
  const sep = path.includes("?") ? "&" : "?";
  const json = await s.get(path);
  const csv = await s.get(`${path}${sep}format=csv`);
  expect(json.status).toBe(200);
  expect(csv.status).toBe(200);
  expect(typeof csv.body).toBe("string");
  return { json: json.body as Record<string, unknown>[], csv, parsed: parseCsvObjects(csv.body as string) };
}

/** Every JSON field equals its cell; `decimalOf` names the decimal column of each amount field. */
function sameRows(
  json: Record<string, unknown>[],
  csv: Record<string, string>[],
  decimalOf: Record<string, string>,
): void {
  expect(csv.length).toBe(json.length);
  json.forEach((record, k) => {
    const row = csv[k]!;
    for (const [field, value] of Object.entries(record)) expect(row[field]).toBe(expectedCell(value));
    for (const [field, column] of Object.entries(decimalOf)) {
      const decimals = record.token_decimals as number | null | undefined;
      const amount = record[field] as string | null;
      if (amount === null || decimals === null || decimals === undefined) expect(row[column]).toBe("");
      else expect(baseUnits(row[column]!, decimals)).toBe(BigInt(amount));
    }
  });
}

describe("format=csv on the activity routes", () => {
  const decimals = { amount_charged: "amount_charged_decimal", fee_paid: "fee_paid_decimal" };

  test("activity, payments and failures: the JSON rows cell for cell, decimals exact, as an attachment", async () => {
    for (const [route, merchant] of [
      ["activity", M1],
      ["activity", BIG],
      ["payments", M1],
      ["failures", BIG],
      ["activity", M2],
    ] as const) {
      const { json, csv, parsed } = await both(`/v0/${route}/${merchant}`);
      expect(csv.headers.get("content-type")).toBe("text/csv; charset=utf-8");
      expect(csv.headers.get("content-disposition")).toBe(`attachment; filename="${route}-${merchant}-${CHAIN_A}.csv"`);
      expect(csv.headers.get("x-indexed-block")).not.toBeNull();
      expect(parsed.header).toEqual(ACTIVITY_CSV_COLUMNS.map((c) => c.name));
      expect(parsed.header.slice(0, 14)).toEqual(Object.keys(json[0]!));
      expect(json.length).toBeGreaterThan(4);
      sameRows(json, parsed.rows, decimals);
    }
  });

  test("a 18-decimal amount above 2^64 and a formula token symbol", async () => {
    const { json, parsed } = await both(`/v0/activity/${M1}?type=CHARGE&token=weth`);
    expect(json.length).toBeGreaterThan(0);
    const big = parsed.rows.find((r) => r.amount_charged === "123456789012345678901234567890")!;
    expect(big.amount_charged_decimal).toBe("123456789012.34567890123456789");
    expect(big.fee_paid_decimal).toBe("3086419725.308641972530864197");
    const evil = await both(`/v0/activity/${BIG}`);
    const withSymbol = evil.parsed.rows.filter((r, k) => evil.json[k]!.currency === EVIL_SYMBOL);
    expect(withSymbol.length).toBeGreaterThan(10);
    for (const row of withSymbol) expect(row.currency).toBe("'" + EVIL_SYMBOL);
    // The raw text holds the symbol quoted (comma, quote and line break inside), never a bare leading "=".
    expect(evil.csv.body as string).toContain(`"'=HYPERLINK(""http://x"",1),\n"`);
    expect((evil.csv.body as string).split("\r\n").some((line) => /(^|,)=/.test(line))).toBe(false);
    sameRows(evil.json, evil.parsed.rows, decimals);
    // No metadata: empty decimals.
    const none = parsed.rows.concat((await both(`/v0/activity/${M1}?type=FAIL`)).parsed.rows);
    expect(none.some((r) => r.token_decimals === "" && r.amount_charged_decimal === "")).toBe(true);
  });

  test("the same filters and order as JSON, also with a limit (Link kept) and on other chains", async () => {
    for (const q of ["order=desc&type=REFILL", "since=2099-06-01T00:00:00Z", `chain_id=${CHAIN_B}`, "limit=7"]) {
      const { json, csv, parsed } = await both(`/v0/activity/${M1}?${q}`);
      sameRows(json, parsed.rows, decimals);
      if (q === "limit=7") {
        expect(parsed.rows.length).toBe(7);
        expect(csv.headers.get("link")).toContain("format=csv&starting_after=");
      }
    }
  });

  test("cached pages keep the formats apart", async () => {
    const path = `/v0/activity/${M1}?limit=3`;
    for (let k = 0; k < 2; k++) {
      const json = await s.get(path);
      const csv = await s.get(`${path}&format=csv`);
      expect(Array.isArray(json.body)).toBe(true);
      expect(json.headers.get("content-type")).toContain("application/json");
      expect(csv.headers.get("content-type")).toBe("text/csv; charset=utf-8");
      sameRows(json.body, parseCsvObjects(csv.body).rows, decimals);
    }
  });

  test("a format other than json or csv is a 400 invalid_parameter on format", async () => {
    for (const path of [
      `/v0/activity/${M1}?format=xml`,
      `/v0/payments/${M1}?format=CSV`,
      `/v0/failures/${M1}?format=`,
      `/v0/subscriptions/${M1}?format=tsv`,
    ]) {
      const res = await s.get(path);
      expect(res.status).toBe(400);
      expect(res.body.error).toMatchObject({ code: "invalid_parameter", param: "format" });
    }
    expect((await s.get(`/v0/activity/${M1}?format=json`)).body).toEqual((await s.get(`/v0/activity/${M1}`)).body);
  });
});

describe("format=csv on the subscriptions list", () => {
  test("the JSON rows cell for cell, total_spent_decimal exact, as an attachment", async () => {
    for (const merchant of [M1, BIG]) {
      for (const q of ["", "?status=ACTIVE", "?limit=5"]) {
        const { json, csv, parsed } = await both(`/v0/subscriptions/${merchant}${q}`);
        expect(csv.headers.get("content-type")).toBe("text/csv; charset=utf-8");
        expect(csv.headers.get("content-disposition")).toBe(
          `attachment; filename="subscriptions-${merchant}-${CHAIN_A}.csv"`,
        );
        expect(parsed.header).toEqual(SUBSCRIPTION_CSV_COLUMNS.map((c) => c.name));
        // Every scalar field of the record is a column; the nested `renewal` outlook is not (GET /v0/renewals lists it),
        // nor the nested `spend_permission` (null on these module records).
        const nested = (k: string) => k === "renewal" || k === "spend_permission";
        expect(parsed.header.slice(0, 14)).toEqual(Object.keys(json[0]!).filter((k) => !nested(k)));
        expect(parsed.rows.length).toBe(json.length);
        json.forEach((record, k) => {
          const row = parsed.rows[k]!;
          for (const [field, value] of Object.entries(record)) {
            if (!nested(field)) expect(row[field]).toBe(expectedCell(value));
          }
        });
      }
    }
    // Decimals from the plan's token: USDC 6, WETH 18, none, the formula token 2 (plans 1-4 of the big merchant).
    const { parsed } = await both(`/v0/subscriptions/${BIG}`);
    const decimalsOfPlan = { "1": 6, "2": 18, "3": null, "4": 2 } as Record<string, number | null>;
    for (const row of parsed.rows) {
      const decimals = decimalsOfPlan[row.plan_id!.split(":")[2]!];
      if (decimals === null) expect(row.total_spent_decimal).toBe("");
      else expect(baseUnits(row.total_spent_decimal!, decimals!)).toBe(BigInt(row.total_spent!));
    }
    expect(parsed.rows.some((r) => r.total_spent_decimal!.includes("."))).toBe(true);
  });
});
