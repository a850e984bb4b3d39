/** The token quarantine of the renewal loop: N failing passes in a row, then left out for a while, then tried again. */
import { expect, test } from "bun:test";
import { createTokenQuarantine } from "../../src/renewals/quarantine";

test("a token rejected N passes in a row is quarantined once, for forS seconds; a pass that reads it fine resets its streak", () => {
  let now = 1_000;
  const q = createTokenQuarantine({ afterPasses: 3, forS: 60, now: () => now });
  const bad = new Set(["0xbad"]);
  expect(q.record(["0xbad", "0xgood"], bad)).toEqual([]);
  expect(q.record(["0xbad", "0xgood"], bad)).toEqual([]);
  // A pass that reads it fine: the streak starts again.
  expect(q.record(["0xbad"], new Set())).toEqual([]);
  expect(q.record(["0xbad"], bad)).toEqual([]);
  expect(q.record(["0xbad"], bad)).toEqual([]);
  expect(q.has("0xbad")).toBe(false);
  expect(q.record(["0xbad"], bad)).toEqual(["0xbad"]);
  expect(q.has("0xbad")).toBe(true);
  expect(q.has("0xgood")).toBe(false);
  expect(q.size()).toBe(1);
  // A pass that does not read a token (no wallet of it due) leaves its streak and quarantine as they are.
  expect(q.record(["0xgood"], new Set())).toEqual([]);
  expect(q.has("0xbad")).toBe(true);
  // After forS it is tried again, and quarantined again only after another full streak.
  now += 61;
  expect(q.has("0xbad")).toBe(false);
  expect(q.size()).toBe(0);
  expect(q.record(["0xbad"], bad)).toEqual([]);
  expect(q.record(["0xbad"], bad)).toEqual([]);
  expect(q.record(["0xbad"], bad)).toEqual(["0xbad"]);
});
