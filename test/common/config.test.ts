import { describe, expect, test } from "bun:test";
import { ConfigError, loadConfig, requireChain, siweDomainWarning } from "../../src/common/config";

describe("loadConfig", () => {
  test("defaults match service.md", () => {
    const c = loadConfig({});
    expect(c.DATABASE_URL).toBeUndefined();
    expect(c.DATA_DIR).toBe("./.data");
    expect(c.START_BLOCK).toBe(0);
    expect(c.CONFIRMATIONS).toBe(0);
    expect(c.POLL_INTERVAL_MS).toBe(1000);
    expect(c.PORT).toBe(3000);
    expect(c.ROLES).toEqual(["api", "indexer", "keeper", "webhooks"]);
    expect(c.KEEPER_PRIVATE_KEY).toBeUndefined();
    expect(c.retrySchedule).toEqual([3600, 21600, 86400]);
    expect(c.extraRpcUrls).toEqual({});
    expect(c.METRICS_HOST).toBe("127.0.0.1");
  });

  test("parses every typed value and lowercases the processor address", () => {
    const c = loadConfig({
      PORT: "8080",
      ROLES: "api, keeper",
      CONFIRMATIONS: "12",
      CHAIN_ID: "8453",
      PROCESSOR_ADDRESS: "0xAbCdEf0000000000000000000000000000000001",
      RPC_URL_10: "https://op.example",
      RPC_URL_8453: "https://base.example",
      KEEPER_RETRY_SCHEDULE: "60,120",
    });
    expect(c.PORT).toBe(8080);
    expect(c.ROLES).toEqual(["api", "keeper"]);
    expect(c.CONFIRMATIONS).toBe(12);
    expect(c.CHAIN_ID).toBe(8453);
    expect(c.PROCESSOR_ADDRESS).toBe("0xabcdef0000000000000000000000000000000001");
    expect(c.extraRpcUrls).toEqual({ 10: "https://op.example", 8453: "https://base.example" });
    expect(c.retrySchedule).toEqual([60, 120]);
  });

  const bad: [string, string][] = [
    ["PORT", "abc"],
    ["PORT", "70000"],
    ["ROLES", "api,web"],
    ["ROLES", ","],
    ["CONFIRMATIONS", "-1"],
    ["START_BLOCK", "1.5"],
    ["POLL_INTERVAL_MS", "0"],
    ["CHAIN_ID", "0"],
    ["PROCESSOR_ADDRESS", "0x12"],
    ["KEEPER_PRIVATE_KEY", "0x1234"],
    ["ADMIN_API_KEY", "short"],
    ["RPC_URL", "localhost:8545"],
    ["RPC_URL_5", "nope"],
    ["DATABASE_URL", "mysql://x"],
    ["LOG_LEVEL", "verbose"],
    ["KEEPER_RETRY_SCHEDULE", "1h,6h"],
    ["TRUSTED_PROXY_HOPS", "-1"],
    ["TRUSTED_PROXY_HOPS", "two"],
    ["TRUSTED_PROXY_HOPS", "17"],
    ["CLIENT_IP_HEADER", "Fly Client IP"],
    ["CLIENT_IP_HEADER", "X-Ip:"],
    ["SIWE_DOMAIN", "https://api.example.com"],
    ["SIWE_DOMAIN", "api.example.com/login"],
    ["SIWE_DOMAIN", "api.example.com:port"],
    ["RPC_WS_URL", "https://base.example/v2/key"],
  ];
  test.each(bad)("%s=%p stops start-up with a message naming the variable", (name, value) => {
    expect(() => loadConfig({ [name]: value })).toThrow(ConfigError);
    expect(() => loadConfig({ [name]: value })).toThrow(name);
  });

  // The message says what a good value looks like, never only a JSON-schema type ("expected string").
  test.each(bad)("%s=%p: the message says what is expected", (name, value) => {
    expect(() => loadConfig({ [name]: value })).not.toThrow(/expected (string|integer|number|array|a valid value)$/);
  });

  test("secret values are never echoed in errors", () => {
    const secret = "postgres://user:hunter2-secret@db:5432/x";
    // The error is taken out of the try first: an assertion inside a catch would also catch a missing error.
    const thrown = (env: Record<string, string>): unknown => {
      try {
        loadConfig(env);
      } catch (err) {
        return err;
      }
      return undefined;
    };
    const badUrl = thrown({ DATABASE_URL: secret.replace("postgres", "mysql") });
    expect(badUrl).toBeInstanceOf(ConfigError);
    expect(String(badUrl)).toContain("DATABASE_URL");
    expect(String(badUrl)).not.toContain("hunter2");
    const shortKey = thrown({ ADMIN_API_KEY: "tiny-secret" });
    expect(shortKey).toBeInstanceOf(ConfigError);
    expect(String(shortKey)).toContain("ADMIN_API_KEY");
    expect(String(shortKey)).not.toContain("tiny-secret");
    // Providers put the key in the WebSocket URL's path.
    const wsUrl = thrown({ RPC_WS_URL: "https://base.example/v2/hunter2-key" });
    expect(String(wsUrl)).toContain("RPC_WS_URL");
    expect(String(wsUrl)).not.toContain("hunter2");
  });

  test("client address and SIWE settings: defaults, valid values, and the two proxy settings exclude each other", () => {
    const c = loadConfig({});
    expect(c.TRUSTED_PROXY_HOPS).toBe(0);
    expect(c.CLIENT_IP_HEADER).toBeUndefined();
    expect(c.SIWE_DOMAIN).toBeUndefined();
    const set = loadConfig({
      TRUSTED_PROXY_HOPS: "2",
      SIWE_DOMAIN: "127.0.0.1:3000",
    });
    expect(set.TRUSTED_PROXY_HOPS).toBe(2);
    expect(set.SIWE_DOMAIN).toBe("127.0.0.1:3000");
    expect(loadConfig({ CLIENT_IP_HEADER: "Fly-Client-IP" }).CLIENT_IP_HEADER).toBe("Fly-Client-IP");
    expect(loadConfig({ SIWE_DOMAIN: "[::1]:3000" }).SIWE_DOMAIN).toBe("[::1]:3000");
    expect(() => loadConfig({ CLIENT_IP_HEADER: "Fly-Client-IP", TRUSTED_PROXY_HOPS: "1" })).toThrow(
      "CLIENT_IP_HEADER and TRUSTED_PROXY_HOPS",
    );
  });

  test("SIWE_DOMAIN is optional (service.md: the request's host by default); without it start-up warns naming it", () => {
    expect(siweDomainWarning(loadConfig({}))).toContain("SIWE_DOMAIN is not set");
    expect(siweDomainWarning(loadConfig({ SIWE_DOMAIN: "api.example.com" }))).toBeUndefined();
  });

  test("requireChain names what the indexer and keeper need", () => {
    expect(() => requireChain(loadConfig({}))).toThrow("RPC_URL is required");
    expect(() => requireChain(loadConfig({ RPC_URL: "http://127.0.0.1:8545" }))).toThrow(
      "PROCESSOR_ADDRESS or SPEND_PERMISSION_MANAGER is required",
    );
    const ok = loadConfig({ RPC_URL: "http://127.0.0.1:8545", PROCESSOR_ADDRESS: "0x" + "1".repeat(40) });
    expect(() => requireChain(ok)).not.toThrow();
  });
});

describe("renewal variables (renewals.md §6)", () => {
  test("defaults, values, and MULTICALL_ADDRESS_<chainId> lowercased per chain", () => {
    const d = loadConfig({});
    expect([d.RENEWAL_HORIZON_S, d.RENEWAL_NOTICE_S, d.RENEWAL_CHECK_INTERVAL_S, d.RENEWAL_RPC_CONCURRENCY]).toEqual([
      604800, 259200, 900, 4,
    ]);
    expect(d.multicallAddresses).toEqual({});
    const c = loadConfig({
      RENEWAL_NOTICE_S: "0",
      RENEWAL_CHECK_INTERVAL_S: "10",
      MULTICALL_ADDRESS_10: "0xAbCdEf0000000000000000000000000000000002",
    });
    expect([c.RENEWAL_NOTICE_S, c.RENEWAL_CHECK_INTERVAL_S]).toEqual([0, 10]);
    expect(c.multicallAddresses).toEqual({ 10: "0xabcdef0000000000000000000000000000000002" });
  });

  test.each([
    ["RENEWAL_HORIZON_S", "0"],
    ["RENEWAL_CHECK_INTERVAL_S", "soon"],
    ["RENEWAL_RPC_CONCURRENCY", "0"],
    ["MULTICALL_ADDRESS_10", "0x1234"],
  ])("%s=%p stops start-up naming it", (name, value) => {
    expect(() => loadConfig({ [name]: value })).toThrow(new RegExp(name));
  });
});

describe("BACKFILL_DEFER_INDEXES", () => {
  test("on by default, 0 turns it off, anything else stops start-up naming it", () => {
    expect(loadConfig({}).BACKFILL_DEFER_INDEXES).toBe("1");
    expect(loadConfig({ BACKFILL_DEFER_INDEXES: "0" }).BACKFILL_DEFER_INDEXES).toBe("0");
    expect(() => loadConfig({ BACKFILL_DEFER_INDEXES: "yes" })).toThrow(/BACKFILL_DEFER_INDEXES/);
  });
});

describe("Spend Permission source", () => {
  const base = { RPC_URL: "http://127.0.0.1:8545", PROCESSOR_ADDRESS: "0x" + "1".repeat(40) };
  const mgr = "0xf85210B21cC50302F477BA56686d2019dC9b67Ad";

  test("off without a manager; defaults with one", () => {
    expect(loadConfig(base).indexed[0]!.spendPermissions).toBeUndefined();
    const sp = loadConfig({
      ...base,
      START_BLOCK: "7",
      SPEND_PERMISSION_MANAGER: mgr,
      SPEND_PERMISSION_SPENDERS: `0x${"B".repeat(40)}, 0x${"a".repeat(40)},0x${"b".repeat(40)}`,
    }).indexed[0]!.spendPermissions!;
    expect(sp.manager).toBe(mgr.toLowerCase());
    expect(sp.spenders).toEqual([`0x${"a".repeat(40)}`, `0x${"b".repeat(40)}`]);
    expect(sp.startBlock).toBe(7);
    expect(sp.graceS).toBe(86400);
    expect(sp.entryPoints).toEqual([
      "0x5ff137d4b0fdcd49dca30c7cf57e578a026d2789",
      "0x0000000071727de22e5e9d8baf0edac6f37da032",
    ]);
    expect(sp.nativeSymbol).toBeUndefined();
  });

  test("per-chain suffixes override the plain variables", () => {
    const c = loadConfig({
      CHAINS: "8453,10",
      RPC_URL_8453: "https://base.example",
      RPC_URL_10: "https://op.example",
      PROCESSOR_ADDRESS: "0x" + "1".repeat(40),
      SPEND_PERMISSION_MANAGER: mgr,
      SPEND_PERMISSION_SPENDERS: "*",
      SPEND_PERMISSION_GRACE_S: "3600",
      SPEND_PERMISSION_START_BLOCK_10: "99",
      SPEND_PERMISSION_SPENDERS_10: `0x${"c".repeat(40)}`,
      NATIVE_TOKEN_SYMBOL_10: "OETH",
      ENTRYPOINT_ADDRESSES_10: `0x${"d".repeat(40)}`,
    });
    const [base8453, op] = c.indexed.map((x) => x.spendPermissions!);
    expect(base8453!.spenders).toBe("*");
    expect(base8453!.graceS).toBe(3600);
    expect(base8453!.startBlock).toBe(0);
    expect(op!.spenders).toEqual([`0x${"c".repeat(40)}`]);
    expect(op!.startBlock).toBe(99);
    expect(op!.nativeSymbol).toBe("OETH");
    expect(op!.entryPoints).toEqual([`0x${"d".repeat(40)}`]);
  });

  test("a chain with the manager and no processor indexes only permissions, in either form", () => {
    const only = { SPEND_PERMISSION_MANAGER: mgr, SPEND_PERMISSION_SPENDERS: "*" };
    const single = loadConfig({ RPC_URL: "http://127.0.0.1:8545", ...only });
    expect(single.indexed).toHaveLength(1);
    expect(single.indexed[0]!.processor).toBeNull();
    expect(single.indexed[0]!.spendPermissions!.manager).toBe(mgr.toLowerCase());
    expect(() => requireChain(single)).not.toThrow();
    const c = loadConfig({
      CHAINS: "8453,10",
      RPC_URL_8453: "https://base.example",
      RPC_URL_10: "https://op.example",
      PROCESSOR_ADDRESS_10: "0x" + "1".repeat(40),
      SPEND_PERMISSION_MANAGER_8453: mgr,
      SPEND_PERMISSION_SPENDERS_8453: `0x${"c".repeat(40)}`,
    });
    expect(c.indexed.map((x) => [x.chainId, x.processor, x.spendPermissions?.manager ?? null])).toEqual([
      [8453, null, mgr.toLowerCase()],
      [10, "0x" + "1".repeat(40), null],
    ]);
  });

  test("a chain with neither source is refused naming both variables", () => {
    const err = (() => {
      try {
        loadConfig({
          CHAINS: "8453,10",
          RPC_URL_8453: "https://b.example",
          RPC_URL_10: "https://o.example",
          ...{
            SPEND_PERMISSION_MANAGER_8453: mgr,
            SPEND_PERMISSION_SPENDERS_8453: "*",
          },
        });
      } catch (e) {
        return e;
      }
    })();
    expect(err).toBeInstanceOf(ConfigError);
    expect(String(err)).toContain("PROCESSOR_ADDRESS_10 or SPEND_PERMISSION_MANAGER_10 is required");
    // The single-chain form: RPC_URL alone is an API process's on-chain RPC (nothing indexed); the indexer refuses it.
    const rpcOnly = loadConfig({ RPC_URL: "http://127.0.0.1:8545" });
    expect(rpcOnly.indexed).toEqual([]);
    expect(() => requireChain(rpcOnly)).toThrow(/PROCESSOR_ADDRESS or SPEND_PERMISSION_MANAGER is required/);
  });

  test("bad or missing values name the variable", () => {
    expect(() => loadConfig({ ...base, SPEND_PERMISSION_MANAGER: mgr })).toThrow(
      /SPEND_PERMISSION_SPENDERS is required/,
    );
    expect(() => loadConfig({ ...base, SPEND_PERMISSION_SPENDERS: "*" })).toThrow(/needs SPEND_PERMISSION_MANAGER/);
    expect(() => loadConfig({ ...base, SPEND_PERMISSION_MANAGER: mgr, SPEND_PERMISSION_SPENDERS: "0x12" })).toThrow(
      ConfigError,
    );
    expect(() => loadConfig({ ...base, SPEND_PERMISSION_GRACE_S: "-1" })).toThrow(/SPEND_PERMISSION_GRACE_S/);
    expect(() =>
      loadConfig({
        ...base,
        CHAINS: "5",
        RPC_URL_5: "http://x.example",
        SPEND_PERMISSION_MANAGER: mgr,
        SPEND_PERMISSION_SPENDERS: "*",
        SPEND_PERMISSION_START_BLOCK_5: "x",
      }),
    ).toThrow(/SPEND_PERMISSION_START_BLOCK_5/);
  });
});
