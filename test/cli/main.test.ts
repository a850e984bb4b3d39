/**
 * `bun start` (src/main.ts): config errors, roles, the in-process service end to end on anvil, graceful stop.
 */
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { existsSync, mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import type { Address } from "viem";
import { createApiKey } from "../../src/auth/api-keys";
import { loadConfig } from "../../src/common/config";
import { createLogger } from "../../src/common/log";
import { startService, type Service } from "../../src/service";
import { keys } from "../../testkit/accounts";
import { createTestChain, type TestChain } from "../../testkit/chain";
import { createTestDb } from "../../testkit/db";
import { freePort, jsonLines, portOpen, spawnBun, spawnCommand, until } from "../../testkit/cli";

let chain: TestChain;
let token: Address;
let module: Address;

beforeAll(async () => {
  chain = await createTestChain();
  token = await chain.deployToken({ symbol: "USDC", decimals: 6 });
  module = await chain.createModule("merchant");
  await chain.createPlan("merchant", module, {
    planId: 1,
    token,
    amount: 1_000_000n,
    interval: 30 * 86_400,
    gracePeriod: 86_400,
  });
}, 60_000);

afterAll(async () => {
  await chain?.stop();
}, 60_000);

function chainEnv(): Record<string, string> {
  return {
    RPC_URL: chain.rpcUrl,
    PROCESSOR_ADDRESS: chain.processor,
    START_BLOCK: chain.startBlock.toString(),
    POLL_INTERVAL_MS: "100",
    SIWE_DOMAIN: "localhost",
  };
}

describe("bun start: configuration errors", () => {
  test("a malformed variable prints its name and exits 1", async () => {
    const child = spawnBun(["src/main.ts"], { PORT: "eighty", DATA_DIR: "memory://" });
    expect(await child.exited).toBe(1);
    expect(child.output()).toContain("PORT");
    expect(child.output()).not.toContain("at ");
  }, 60_000);

  test("the indexer role without RPC_URL exits 1 naming it, before it creates a database", async () => {
    const dir = mkdtempSync(join(tmpdir(), "main-config-"));
    try {
      const child = spawnBun(["src/main.ts"], { ROLES: "indexer", DATA_DIR: join(dir, "data") });
      expect(await child.exited).toBe(1);
      expect(child.output()).toContain("RPC_URL is required");
      expect(existsSync(join(dir, "data"))).toBe(false);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  }, 60_000);

  test("the api role without SIWE_DOMAIN starts (service.md: the default is the request's host), warning about it", async () => {
    const port = await freePort();
    const child = spawnBun(["src/main.ts"], {
      ROLES: "api",
      CHAIN_ID: "31337",
      DATA_DIR: "memory://",
      HOST: "127.0.0.1",
      PORT: String(port),
      LOG_FORMAT: "json",
    });
    try {
      await child.waitFor(/SIWE_DOMAIN is not set/);
      const res = await until("the API to answer", async () =>
        fetch(`http://127.0.0.1:${port}/v0/siwe/nonce`).catch(() => undefined),
      );
      expect(res.status).toBe(200);
    } finally {
      child.proc.kill();
      await child.exited;
    }
  }, 60_000);

  test("a database that cannot be reached exits 1 without leaking the password", async () => {
    const port = await freePort();
    const child = spawnBun(["src/main.ts"], {
      ROLES: "api",
      CHAIN_ID: "31337",
      SIWE_DOMAIN: "localhost",
      DATABASE_URL: `postgres://app:hunter2secret@127.0.0.1:${port}/nope`,
    });
    expect(await child.exited).toBe(1);
    expect(child.output()).toContain("start failed");
    expect(child.output()).toContain(`DATABASE_URL (127.0.0.1:${port}) cannot be reached: ECONNREFUSED`);
    expect(child.output()).not.toContain("hunter2secret");
  }, 60_000);

  test("a LOG_LEVEL outside its values lists them", async () => {
    const child = spawnBun(["src/main.ts"], { LOG_LEVEL: "verbose", DATA_DIR: "memory://" });
    expect(await child.exited).toBe(1);
    expect(child.output()).toContain('LOG_LEVEL="verbose" is invalid: expected one of debug, info, warn, error');
  }, 60_000);

  test("an RPC_URL that does not answer is named, with its host only", async () => {
    const port = await freePort();
    const child = spawnBun(["src/main.ts"], {
      ROLES: "indexer",
      RPC_URL: `http://127.0.0.1:${port}/v2/secretkey123`,
      PROCESSOR_ADDRESS: "0x5fbdb2315678afecb367f032d93f642f64180aa3",
      DATA_DIR: "memory://",
    });
    expect(await child.exited).toBe(1);
    expect(child.output()).toContain(`RPC_URL (127.0.0.1:${port}) did not answer eth_chainId`);
    expect(child.output()).not.toContain("secretkey123");
  }, 60_000);

  test("a PORT another process listens on stops start-up naming it (no shared port)", async () => {
    // Another instance of the service (Elysia listens with SO_REUSEPORT unless told not to).
    const taken = Bun.serve({ hostname: "127.0.0.1", port: 0, reusePort: true, fetch: () => new Response("other") });
    try {
      const child = spawnBun(["src/main.ts"], {
        ROLES: "api",
        CHAIN_ID: "31337",
        SIWE_DOMAIN: "localhost",
        HOST: "127.0.0.1",
        PORT: String(taken.port),
        DATA_DIR: "memory://",
      });
      expect(await child.exited).toBe(1);
      expect(child.output()).toContain(`PORT ${taken.port} on HOST 127.0.0.1 cannot be listened on`);
      expect(await (await fetch(`http://127.0.0.1:${taken.port}/`)).text()).toBe("other");
    } finally {
      taken.stop(true);
    }
  }, 60_000);
});

describe("startService in process", () => {
  let service: Service;
  const lines: string[] = [];

  beforeAll(async () => {
    const config = loadConfig({
      ...chainEnv(),
      KEEPER_PRIVATE_KEY: keys.keeper,
      PORT: "0",
      HOST: "127.0.0.1",
      LOG_LEVEL: "debug",
    });
    const db = await createTestDb();
    service = await startService(config, { db, log: createLogger("debug", (l) => lines.push(l)) });
  }, 60_000);

  afterAll(async () => {
    await service?.stop();
  }, 60_000);

  test("runs every role and logs one start line without secrets", () => {
    expect(service.roles.sort()).toEqual(["api", "indexer", "keeper", "webhooks"]);
    const started = lines.map((l) => JSON.parse(l)).filter((l) => l.msg === "service started");
    expect(started).toHaveLength(1);
    expect(started[0]).toMatchObject({
      roles: ["indexer", "keeper", "webhooks", "api"],
      chainId: chain.chainId,
      port: service.port,
    });
    const all = lines.join("\n");
    expect(all).not.toContain(keys.keeper.slice(2));
  });

  test("the start-up summary: one line per role with what it will do", () => {
    const logs = lines.map((l) => JSON.parse(l) as Record<string, unknown>);
    const byRole = (role: string) => logs.filter((l) => l.role === role);
    for (const role of ["indexer", "keeper", "webhooks", "api"]) expect(byRole(role)).toHaveLength(1);
    const rpcHost = new URL(chain.rpcUrl).host;
    expect(byRole("indexer")[0]!.msg).toBe(
      `indexer: 1 chain: ${chain.chainId} from block ${chain.startBlock} via ${rpcHost}`,
    );
    const keeper = byRole("keeper")[0]!;
    expect(keeper.address).toBe(service.keeper!.address);
    expect(keeper.msg).toMatch(
      new RegExp(
        `^keeper: ${service.keeper!.address} charges due subscriptions on ${chain.chainId} balance \\d+(\\.\\d+)?$`,
      ),
    );
    expect(byRole("webhooks")[0]!.msg).toBe(
      "webhooks: dispatcher delivers with 64 requests in flight (4 per endpoint), retries after 5,300,1800,7200,18000,36000,36000,86400,86400 s",
    );
    expect(byRole("api")[0]!.msg).toBe(
      `api: ${service.url} · docs ${service.url}/docs · dashboard ${service.url}/dashboard`,
    );
    // In role order, before "service started".
    const at = (m: (l: Record<string, unknown>) => boolean) => logs.findIndex(m);
    expect(at((l) => l.role === "indexer")).toBeLessThan(at((l) => l.role === "api"));
    expect(at((l) => l.role === "api")).toBeLessThan(at((l) => l.msg === "service started"));
  });

  test("a new subscription turns ACTIVE through keeper, indexer and API", async () => {
    await chain.fund("alice", token, 10_000_000n);
    const id = await chain.subscribe("alice", module, 1);
    const merchant = chain.address("merchant").toLowerCase();
    const { key } = await createApiKey(service.db.sql, { merchant });
    const url = `${service.url}/v0/subscriptions/${merchant}/${id}`;
    const sub = await until("the subscription to turn ACTIVE", async () => {
      const res = await fetch(url, { headers: { authorization: `Bearer ${key}` } });
      if (res.status !== 200) return undefined;
      const body = (await res.json()) as { status: string; times_executed: number };
      return body.status === "ACTIVE" ? body : undefined;
    });
    expect(sub.times_executed).toBe(1);
    const health = await fetch(`${service.url}/healthz`);
    expect(health.status).toBe(200);
  }, 60_000);

  test("stop closes the port and the database", async () => {
    const port = service.port!;
    expect(await portOpen(port)).toBe(true);
    await service.stop();
    expect(await portOpen(port)).toBe(false);
    expect(service.db.sql`select 1`).rejects.toThrow();
    expect(lines.some((l) => l.includes('"service stopped"'))).toBe(true);
  }, 60_000);
});

describe("roles", () => {
  test("the keeper is off without KEEPER_PRIVATE_KEY", async () => {
    const lines: string[] = [];
    const config = loadConfig({ ...chainEnv(), ROLES: "indexer,keeper", LOG_LEVEL: "info" });
    const service = await startService(config, {
      db: await createTestDb(),
      log: createLogger("info", (l) => lines.push(l)),
    });
    try {
      expect(service.roles).toEqual(["indexer"]);
      expect(service.url).toBeNull();
      expect(service.keeper).toBeUndefined();
      expect(lines.some((l) => l.includes("keeper off"))).toBe(true);
    } finally {
      await service.stop();
    }
  }, 60_000);

  test("an api-only process needs no RPC when CHAIN_ID is set", async () => {
    const config = loadConfig({
      ROLES: "api",
      CHAIN_ID: "31337",
      PORT: "0",
      HOST: "127.0.0.1",
      LOG_LEVEL: "error",
      SIWE_DOMAIN: "localhost",
    });
    const service = await startService(config, { db: await createTestDb(), log: () => {} });
    try {
      expect(service.roles).toEqual(["api"]);
      expect((await fetch(`${service.url}/healthz`)).status).toBe(200);
    } finally {
      await service.stop();
    }
  }, 60_000);
  test("a webhooks-only process needs no chain setting (the dispatcher reads none)", async () => {
    const config = loadConfig({ ROLES: "webhooks", LOG_LEVEL: "error" });
    const service = await startService(config, { db: await createTestDb(), log: () => {} });
    try {
      expect(service.roles).toEqual(["webhooks"]);
      expect(service.webhooks).toBeDefined();
    } finally {
      await service.stop();
    }
  }, 60_000);

  test("an api process without any chain setting still names what to set", async () => {
    const config = loadConfig({ ROLES: "api,webhooks", LOG_LEVEL: "error", SIWE_DOMAIN: "localhost" });
    const db = await createTestDb();
    try {
      await expect(startService(config, { db, log: () => {} })).rejects.toThrow("set CHAIN_ID, RPC_URL or CHAINS");
    } finally {
      await db.close();
    }
  }, 60_000);
});

describe("bun start as a process", () => {
  let dataDir: string;

  beforeAll(() => {
    dataDir = mkdtempSync(join(tmpdir(), "main-test-"));
  }, 60_000);

  afterAll(() => {
    rmSync(dataDir, { recursive: true, force: true });
  }, 60_000);

  test("`npm start`: SIGTERM to npm reaches the service, which stops, exits 0 and frees its port", async () => {
    const port = await freePort();
    const npm = spawnCommand(["npm", "start", "--silent"], {
      ROLES: "api",
      CHAIN_ID: "31337",
      SIWE_DOMAIN: "localhost",
      HOST: "127.0.0.1",
      PORT: String(port),
      DATA_DIR: "memory://",
      LOG_LEVEL: "info",
    });
    try {
      // The service's own start line, not an open port: on a shared machine another process may hold that port.
      await npm.waitFor(/"msg":"service started"/, 60_000);
      npm.proc.kill("SIGTERM");
      // npm's shell execs the launcher, which execs bun: npm forwards the signal to the service, which exits 0.
      expect(await npm.exited).toBe(0);
      const logs = jsonLines(npm.output());
      expect(logs.find((l) => l.msg === "shutting down")?.signal).toBe("SIGTERM");
      expect(logs.some((l) => l.msg === "service stopped")).toBe(true);
      expect(await portOpen(port)).toBe(false);
    } finally {
      npm.proc.kill("SIGKILL");
    }
  }, 90_000);

  test("SIGTERM during start-up waits for start-up to end, then stops gracefully with exit code 0", async () => {
    const port = await freePort();
    const env = { ROLES: "api", CHAIN_ID: "31337", SIWE_DOMAIN: "localhost", HOST: "127.0.0.1" };
    const child = spawnBun(["start"], { ...env, PORT: String(port), DATA_DIR: "memory://", LOG_LEVEL: "info" });
    try {
      await child.waitFor(/"msg":"migrations applied"/, 60_000);
      child.proc.kill("SIGTERM");
      expect(await child.exited).toBe(0);
      const msgs = jsonLines(child.output()).map((l) => l.msg);
      expect(msgs.indexOf("shutting down")).toBeGreaterThan(msgs.indexOf("migrations applied"));
      expect(msgs.at(-1)).toBe("service stopped");
      expect(await portOpen(port)).toBe(false);
    } finally {
      child.proc.kill("SIGKILL");
      await child.exited;
    }
  }, 60_000);

  test("SIGTERM stops it gracefully with exit code 0", async () => {
    const port = await freePort();
    const env: Record<string, string> = {
      ...chainEnv(),
      PORT: String(port),
      HOST: "127.0.0.1",
      KEEPER_PRIVATE_KEY: keys.keeper2,
      LOG_LEVEL: "info",
    };
    // On Postgres: a fresh database of its own (dropped by close), never the shared one.
    const pg = process.env.DATABASE_URL ? await createTestDb() : undefined;
    if (pg) env.DATABASE_URL = pg.url;
    else env.DATA_DIR = dataDir;
    const child = spawnBun(["start"], env);
    try {
      await child.waitFor(/"msg":"service started"/, 60_000);
      expect((await fetch(`http://127.0.0.1:${port}/healthz`)).status).toBe(200);
      child.proc.kill("SIGTERM");
      expect(await child.exited).toBe(0);
      const logs = jsonLines(child.output());
      const started = logs.find((l) => l.msg === "service started")!;
      expect(started.roles).toEqual(["indexer", "keeper", "webhooks", "api"]);
      expect(started.port).toBe(port);
      expect(logs.some((l) => l.msg === "service stopped")).toBe(true);
      expect(child.output()).not.toContain(keys.keeper2.slice(2));
      expect(await portOpen(port)).toBe(false);
    } finally {
      child.proc.kill("SIGKILL");
      await child.exited;
      await pg?.close();
    }
  }, 60_000);
});

describe("log lines", () => {
  test("are JSON with credentials redacted", () => {
    const lines: string[] = [];
    const log = createLogger("info", (l) => lines.push(l));
    log("debug", "dropped below the level");
    log("info", "connecting", {
      url: "postgres://app:hunter2secret@db.internal:5432/app",
      privateKey: keys.keeper,
      nested: { apiKey: "sk_live_abcdefghijklmnop", header: "Bearer sk_live_abcdefghijklmnop" },
      block: 12n,
      err: new Error("boom"),
    });
    expect(lines).toHaveLength(1);
    const line = JSON.parse(lines[0]!);
    expect(line).toMatchObject({
      level: "info",
      msg: "connecting",
      block: "12",
      err: "boom",
      privateKey: "[redacted]",
    });
    expect(line.url).toBe("postgres://app:***@db.internal:5432/app");
    expect(lines[0]).not.toContain("hunter2secret");
    expect(lines[0]).not.toContain(keys.keeper.slice(2));
    expect(lines[0]).not.toContain("abcdefghijklmnop");
  });
});
