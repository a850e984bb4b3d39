/** The keeper's variables: defaults, parsing, and errors that name the variable. */
import { describe, expect, test } from "bun:test";
import { parseGwei } from "viem";
import { ConfigError, loadConfig } from "../../src/common/config";
import { accounts, keys } from "../../testkit/accounts";

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

describe("SPEND_PERMISSION_KEEPER_KEYS", () => {
  const base = { RPC_URL: "http://127.0.0.1:8545", PROCESSOR_ADDRESS: "0x" + "1".repeat(40) };
  const manager = { SPEND_PERMISSION_MANAGER: "0xf85210B21cC50302F477BA56686d2019dC9b67Ad" };
  const merchant = accounts.merchant.address.toLowerCase();
  const merchant2 = accounts.merchant2.address.toLowerCase();
  const spOf = (env: Record<string, string>) =>
    loadConfig({ ...base, ...manager, ...env }).indexed[0]!.spendPermissions!;

  test("unset: no keys; set: each key once, for spenders of the list or of *", () => {
    expect(spOf({ SPEND_PERMISSION_SPENDERS: merchant }).keeperKeys).toEqual([]);
    const sp = spOf({
      SPEND_PERMISSION_SPENDERS: `${merchant},${merchant2}`,
      SPEND_PERMISSION_KEEPER_KEYS: ` ${keys.merchant}, ${keys.merchant2.toUpperCase().replace("0X", "0x")},${keys.merchant}`,
    });
    expect(sp.keeperKeys).toEqual([keys.merchant, keys.merchant2]);
    expect(spOf({ SPEND_PERMISSION_SPENDERS: "*", SPEND_PERMISSION_KEEPER_KEYS: keys.merchant }).keeperKeys).toEqual([
      keys.merchant,
    ]);
  });

  test("the _<chainId> suffix wins for its chain", () => {
    const c = loadConfig({
      CHAINS: "8453,10",
      RPC_URL_8453: "https://base.example",
      RPC_URL_10: "https://op.example",
      PROCESSOR_ADDRESS: "0x" + "1".repeat(40),
      ...manager,
      SPEND_PERMISSION_SPENDERS: `${merchant},${merchant2}`,
      SPEND_PERMISSION_KEEPER_KEYS: keys.merchant,
      SPEND_PERMISSION_KEEPER_KEYS_10: keys.merchant2,
    });
    expect(c.indexed.map((x) => x.spendPermissions!.keeperKeys)).toEqual([[keys.merchant], [keys.merchant2]]);
  });

  test("a key that is no configured spender stops start-up naming the variable and the address, never the key", () => {
    const run = () => spOf({ SPEND_PERMISSION_SPENDERS: merchant2, SPEND_PERMISSION_KEEPER_KEYS: keys.merchant });
    expect(run).toThrow(ConfigError);
    expect(run).toThrow(`SPEND_PERMISSION_KEEPER_KEYS: ${merchant} is not one of SPEND_PERMISSION_SPENDERS`);
    const message = (() => {
      try {
        run();
      } catch (err) {
        return String(err);
      }
    })();
    expect(message).not.toContain(keys.merchant.slice(2));
  });

  test("a malformed value names the variable (with its suffix) and never echoes it", () => {
    for (const [name, value] of [
      ["SPEND_PERMISSION_KEEPER_KEYS", `${keys.merchant},0x12`],
      ["SPEND_PERMISSION_KEEPER_KEYS_31337", keys.merchant.slice(0, 60)],
    ] as const) {
      const env = { CHAIN_ID: "31337", CHAINS: "31337", SPEND_PERMISSION_SPENDERS: merchant, [name]: value };
      let message = "";
      try {
        spOf(env);
      } catch (err) {
        expect(err).toBeInstanceOf(ConfigError);
        message = String(err);
      }
      expect(message).toContain(`${name} is invalid`);
      expect(message).not.toContain(value.slice(2, 40));
    }
  });

  test("keys without a manager, or the module keeper's own key, are refused", () => {
    expect(() => loadConfig({ ...base, SPEND_PERMISSION_KEEPER_KEYS: keys.merchant })).toThrow(
      "SPEND_PERMISSION_KEEPER_KEYS needs SPEND_PERMISSION_MANAGER",
    );
    expect(() =>
      spOf({
        SPEND_PERMISSION_SPENDERS: "*",
        SPEND_PERMISSION_KEEPER_KEYS: keys.keeper,
        KEEPER_PRIVATE_KEY: keys.keeper,
      }),
    ).toThrow(/SPEND_PERMISSION_KEEPER_KEYS repeats KEEPER_PRIVATE_KEY/);
  });
});
