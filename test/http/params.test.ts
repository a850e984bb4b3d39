import { describe, expect, test } from "bun:test";
import {
  parseAllocationId,
  parseChainId,
  parseEventId,
  parseLimit,
  parsePlanIds,
  parseSince,
  parseUint256,
} from "../../src/http/params";
import { InvalidParameterError, MissingParameterError } from "../../src/http/errors";

describe("parseSince", () => {
  const since = (v: string) => parseSince({ since: v })!.toISOString();

  test("Z, offsets, with and without seconds and fractions", () => {
    expect(since("2026-11-20T10:00:00Z")).toBe("2026-11-20T10:00:00.000Z");
    expect(since("2026-11-20T10:00:00.123Z")).toBe("2026-11-20T10:00:00.123Z");
    expect(since("2026-11-20T10:00Z")).toBe("2026-11-20T10:00:00.000Z");
    expect(since("2026-11-20T12:00:00+02:00")).toBe("2026-11-20T10:00:00.000Z");
    expect(since("2026-11-20T12:00:00+0200")).toBe("2026-11-20T10:00:00.000Z");
    expect(since("2026-11-20T04:30:00-05:30")).toBe("2026-11-20T10:00:00.000Z");
    expect(since("2026-11-20t10:00:00z")).toBe("2026-11-20T10:00:00.000Z");
    // An unencoded + arrives as a space.
    expect(since("2026-11-20T12:00:00 02:00")).toBe("2026-11-20T10:00:00.000Z");
    // service.md: "any ISO 8601 date-time": an hour-only offset, and the basic format.
    expect(since("2026-11-20T12:00:00+02")).toBe("2026-11-20T10:00:00.000Z");
    expect(since("2026-11-20T07:00:00.250-03")).toBe("2026-11-20T10:00:00.250Z");
    expect(since("20261120T100000Z")).toBe("2026-11-20T10:00:00.000Z");
    expect(since("20261120T120000.5+0200")).toBe("2026-11-20T10:00:00.500Z");
    expect(since("20261120T1200+02")).toBe("2026-11-20T10:00:00.000Z");
    for (const bad of ["2026-11-20T10:00:00", "20261120T100000", "2026-1120T10:00:00Z", "20261120T10:00:00Z"]) {
      expect(() => parseSince({ since: bad }), bad).toThrow(InvalidParameterError);
    }
  });

  test("fractions finer than a millisecond round up, so 'at or after' never reaches back", () => {
    expect(since("2026-11-20T10:00:00.0001Z")).toBe("2026-11-20T10:00:00.001Z");
    expect(since("2026-11-20T10:00:00.999999Z")).toBe("2026-11-20T10:00:01.000Z");
    expect(since("2026-11-20T10:00:00.5Z")).toBe("2026-11-20T10:00:00.500Z");
    // Any number of digits (ISO 8601 sets no limit), read as digits: no float rounding.
    expect(since("2026-12-26T00:30:24.0000000000000000000001Z")).toBe("2026-12-26T00:30:24.001Z");
    expect(since("2026-11-20T10:00:00.557000000000Z")).toBe("2026-11-20T10:00:00.557Z");
    expect(since("2026-11-20T10:00:00.5570000000001Z")).toBe("2026-11-20T10:00:00.558Z");
    expect(since("2026-11-20T10:00:00.999Z")).toBe("2026-11-20T10:00:00.999Z");
  });

  test("calendar checks: leap years, month lengths, years before 100", () => {
    expect(since("2024-02-29T00:00:00Z")).toBe("2024-02-29T00:00:00.000Z");
    expect(since("2000-02-29T00:00:00Z")).toBe("2000-02-29T00:00:00.000Z");
    expect(since("0050-01-01T00:00:00Z")).toBe("0050-01-01T00:00:00.000Z");
    for (const bad of [
      "2023-02-29T00:00:00Z",
      "1900-02-29T00:00:00Z",
      "2026-04-31T00:00:00Z",
      "2026-00-10T00:00:00Z",
      "2026-01-00T00:00:00Z",
      "2026-01-01T24:00:00Z",
      "2026-01-01T00:00:60Z",
      "2026-01-01T00:00:00+24:00",
    ]) {
      expect(() => parseSince({ since: bad })).toThrow(InvalidParameterError);
    }
  });

  test("absent is undefined", () => {
    expect(parseSince({})).toBeUndefined();
  });
});

describe("other parsers", () => {
  test("chain ids are positive safe integers in plain decimal", () => {
    expect(parseChainId({}, 31337)).toBe(31337);
    expect(parseChainId({ chain_id: "8453" }, 1)).toBe(8453);
    expect(parseChainId({ chain_id: "9007199254740991" }, 1)).toBe(9007199254740991);
    for (const v of ["0", "01", "9007199254740992", "1e3", "0x1", " 1", ""]) {
      expect(() => parseChainId({ chain_id: v }, 1)).toThrow(InvalidParameterError);
    }
  });

  test("limit is 1..1000", () => {
    expect(parseLimit({})).toBeUndefined();
    expect(parseLimit({ limit: "1" })).toBe(1);
    expect(parseLimit({ limit: "1000" })).toBe(1000);
    expect(parseLimit({ limit: "0010" })).toBe(10);
    for (const v of ["0", "1001", "1.5", "-1", ""])
      expect(() => parseLimit({ limit: v })).toThrow(InvalidParameterError);
  });

  test("uint256 ids are canonical decimals within range", () => {
    const max = ((1n << 256n) - 1n).toString();
    expect(parseUint256({ id: max }, "id")).toBe(max);
    expect(parseUint256({ id: "000123" }, "id")).toBe("123");
    expect(() => parseUint256({ id: (1n << 256n).toString() }, "id")).toThrow(InvalidParameterError);
    expect(() => parseUint256({}, "id")).toThrow(MissingParameterError);
    expect(() => parseUint256({ id: null }, "id")).toThrow(InvalidParameterError);
  });

  test("plan ids: uint32, deduplicated keeping first occurrence, at most 100", () => {
    expect(parsePlanIds({ plan_ids: "4294967295,0,7,0" })).toEqual(["4294967295", "0", "7"]);
    expect(parsePlanIds({ plan_ids: Array.from({ length: 150 }, () => "1").join(",") })).toEqual(["1"]);
    expect(() => parsePlanIds({ plan_ids: "4294967296" })).toThrow(InvalidParameterError);
    expect(() => parsePlanIds({ plan_ids: Array.from({ length: 101 }, (_, i) => i).join(",") })).toThrow(/at most 100/);
    expect(() => parsePlanIds({})).toThrow(MissingParameterError);
  });

  test("cursors are parsed into their parts, lowercased", () => {
    const hash = "0x" + "AB".repeat(32);
    expect(parseEventId({ starting_after: `10:${hash}:7` })).toEqual({
      chainId: 10,
      txHash: hash.toLowerCase(),
      logIndex: 7,
    });
    const mod = "0x" + "CD".repeat(20);
    expect(parseAllocationId({ starting_after: `10:${mod}:0099` })).toEqual({
      chainId: 10,
      module: mod.toLowerCase(),
      subscriptionId: "99",
    });
  });
});
