/** The keeper's variables: defaults, parsing, and errors that name the variable. */
import { expect, test } from "bun:test";
import { parseGwei } from "viem";
import { ConfigError, loadConfig } from "../../src/common/config";

test("keeper defaults: attempts from the schedule (set by the role), daily recheck, 30 s deadline, 500 gwei cap", () => {
  const c = loadConfig({});
  expect(c.KEEPER_MAX_ATTEMPTS).toBeUndefined();
  expect(c.KEEPER_RECHECK_INTERVAL_S).toBe(86_400);
  expect(c.KEEPER_TX_DEADLINE_MS).toBe(30_000);
  expect(parseGwei(c.KEEPER_MAX_FEE_GWEI)).toBe(500_000_000_000n);
});

test("keeper variables parse, fractional gwei included", () => {
  const c = loadConfig({
    KEEPER_MAX_ATTEMPTS: "5",
    KEEPER_RECHECK_INTERVAL_S: "3600",
    KEEPER_TX_DEADLINE_MS: "12000",
    KEEPER_MAX_FEE_GWEI: "0.05",
  });
  expect([c.KEEPER_MAX_ATTEMPTS, c.KEEPER_RECHECK_INTERVAL_S, c.KEEPER_TX_DEADLINE_MS]).toEqual([5, 3600, 12_000]);
  expect(parseGwei(c.KEEPER_MAX_FEE_GWEI)).toBe(50_000_000n);
});

for (const [name, value] of [
  ["KEEPER_MAX_ATTEMPTS", "0"],
  ["KEEPER_RECHECK_INTERVAL_S", "1d"],
  ["KEEPER_TX_DEADLINE_MS", "50"],
  ["KEEPER_MAX_FEE_GWEI", "-1"],
  ["KEEPER_MAX_FEE_GWEI", "1e3"],
  ["KEEPER_MAX_FEE_GWEI", "0.0000000001"],
] as const) {
  test(`${name}=${JSON.stringify(value)} stops start-up naming the variable`, () => {
    expect(() => loadConfig({ [name]: value })).toThrow(ConfigError);
    expect(() => loadConfig({ [name]: value })).toThrow(name);
  });
}
