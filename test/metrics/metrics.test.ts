/**
 * `GET /metrics` on METRICS_PORT: a real service (indexer, keeper, webhooks, API) on a real anvil, scraped and parsed
 * with a Prometheus text-format parser; the values move as the chain does.
 */
import { networkInterfaces } from "node:os";
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import parsePrometheusTextFormat from "parse-prometheus-text-format";
import { createApiKey } from "../../src/auth/api-keys";
import { ConfigError, loadConfig } from "../../src/common/config";
import { startService, type Service } from "../../src/service";
import { keys } from "../../testkit/accounts";
import { createTestChain, type TestChain } from "../../testkit/chain";
import { freePort, until } from "../../testkit/cli";
import { createTestDb, testDbKind } from "../../testkit/db";
import { endpointForAll, startReceiver, type Receiver } from "../../testkit/webhooks";

type Family = { name: string; type: string; metrics: { value?: string; labels?: Record<string, string> }[] };

let chain: TestChain;
let service: Service;
let receiver: Receiver;
let merchant: string;

/** One scrape, parsed: `value(name, labels)` is the sample whose labels include `labels` (undefined when absent). */
async function scrape() {
  const res = await fetch(service.metricsUrl!);
  expect(res.status).toBe(200);
  expect(res.headers.get("content-type")).toContain("text/plain");
  const text = await res.text();
  const families = parsePrometheusTextFormat(text) as Family[];
  const value = (name: string, labels: Record<string, string> = {}) => {
    const f = families.find((x) => x.name === name);
    const m = f?.metrics.find((s) => Object.entries(labels).every(([k, v]) => s.labels?.[k] === v));
    return m?.value === undefined ? undefined : Number(m.value);
  };
  return { families, value, text };
}

beforeAll(async () => {
  chain = await createTestChain();
  receiver = startReceiver();
  merchant = chain.address("merchant").toLowerCase();
  const db = await createTestDb();
  await endpointForAll(db.sql, merchant, receiver.url);
  const config = loadConfig({
    RPC_URL: chain.rpcUrl,
    PROCESSOR_ADDRESS: chain.processor,
    START_BLOCK: chain.startBlock.toString(),
    POLL_INTERVAL_MS: "100",
    SIWE_DOMAIN: "localhost",
    KEEPER_PRIVATE_KEY: keys.keeper,
    PORT: String(await freePort()),
    HOST: "0.0.0.0",
    METRICS_PORT: String(await freePort()),
    WEBHOOK_ALLOW_PRIVATE_URLS: "1",
    WEBHOOK_POLL_INTERVAL_MS: "100",
    LOG_LEVEL: "error",
  });
  service = await startService(config, { db });
}, 60_000);

afterAll(async () => {
  await service?.stop();
  await receiver?.stop();
  await chain?.stop();
});

describe("GET /metrics", () => {
  test("is served on METRICS_PORT only, never on the API's port; METRICS_PORT = PORT is refused", async () => {
    expect(service.metricsUrl).toMatch(/^http:\/\/127\.0\.0\.1:\d+\/metrics$/);
    // The API listens on every address (HOST=0.0.0.0); metrics only on loopback (METRICS_HOST's default).
    const outside = Object.values(networkInterfaces())
      .flat()
      .find((i) => i && !i.internal && i.family === "IPv4")?.address;
    expect(outside).toBeDefined();
    const port = new URL(service.metricsUrl!).port;
    expect((await fetch(`http://${outside}:${service.port}/healthz`)).status).toBe(200);
    expect(
      await fetch(`http://${outside}:${port}/metrics`).then(
        () => "served",
        () => "refused",
      ),
    ).toBe("refused");
    expect(new URL(service.metricsUrl!).port).not.toBe(String(service.port));
    expect((await fetch(`${service.url}/metrics`)).status).toBe(404);
    expect(() => loadConfig({ PORT: "9100", METRICS_PORT: "9100" })).toThrow(ConfigError);
  });

  test("indexer, RPC, keeper, webhook and HTTP metrics move as the chain does (pool gauges: Postgres only)", async () => {
    const chainId = String(chain.chainId);
    const before = await scrape();
    const token = await chain.deployToken();
    const module = await chain.createModule("merchant");
    await chain.createPlan("merchant", module, { planId: 1, token, amount: 1_000_000n, interval: 86_400 });
    await chain.fund("alice", token, 10_000_000n);
    const id = await chain.subscribe("alice", module, 1);

    // The keeper charges the new subscription; the indexer indexes it; the dispatcher delivers its events.
    const head = await chain.publicClient.getBlockNumber({ cacheTime: 0 });
    const after = await until(
      "the charge to be indexed and delivered",
      async () => {
        const s = await scrape();
        const ok =
          (s.value("keeper_charges_total", { chain_id: chainId, outcome: "succeeded" }) ?? 0) >= 1 &&
          (s.value("indexer_indexed_block", { chain_id: chainId }) ?? 0) > Number(head) &&
          (s.value("webhook_attempts_total", { outcome: "succeeded" }) ?? 0) >= 3;
        return ok ? s : undefined;
      },
      30_000,
    );
    const v = after.value;
    expect(v("keeper_charges_total", { chain_id: chainId, outcome: "sent" })).toBeGreaterThanOrEqual(1);
    expect(v("keeper_balance_wei")).toBeGreaterThan(0);
    // On Postgres the scrape's own query is an active connection of this process; PGlite has no pool.
    if (testDbKind === "postgres") {
      expect(v("db_pool_connections", { state: "active" })).toBeGreaterThanOrEqual(1);
      expect(v("db_pool_max_connections")).toBe(4);
    } else expect(v("db_pool_connections")).toBeUndefined();
    expect(v("indexer_events_total", { chain_id: chainId })).toBeGreaterThan(
      before.value("indexer_events_total", { chain_id: chainId }) ?? 0,
    );
    expect(v("indexer_head_block", { chain_id: chainId })).toBeGreaterThanOrEqual(
      v("indexer_indexed_block", { chain_id: chainId })!,
    );
    expect(v("indexer_lag_blocks", { chain_id: chainId })).toBeGreaterThanOrEqual(0);
    expect(v("indexer_lag_seconds", { chain_id: chainId })).toBeGreaterThanOrEqual(0);
    expect(v("indexer_deep_reorg_suspected", { chain_id: chainId })).toBe(0);
    expect(v("indexer_deferred_indexes")).toBe(0);
    expect(v("rpc_requests_total", { chain_id: chainId, method: "eth_getLogs" })).toBeGreaterThan(0);
    expect(v("rpc_requests_total", { chain_id: chainId, method: "eth_getBlockByNumber" })).toBeGreaterThan(0);
    // Compute units by method at Alchemy's weights (RPC_CU_WEIGHTS unset): 75 an eth_getLogs, 16 a header.
    const logsCu = v("rpc_compute_units_total", { method: "eth_getLogs" })!;
    expect(logsCu).toBeGreaterThan(0);
    expect(logsCu % 75).toBe(0);
    expect(v("rpc_compute_units_total", { method: "eth_getBlockByNumber" })! % 16).toBe(0);
    const batches = after.families.find((f) => f.name === "indexer_batch_duration_seconds");
    expect(batches?.type).toBe("HISTOGRAM");
    await until("nothing left to deliver", async () => {
      const now = await scrape();
      return now.value("webhook_fanout_backlog") === 0 && now.value("webhook_deliveries_pending") === 0;
    });
    expect((await scrape()).value("webhook_oldest_pending_age_seconds")).toBe(0);
    expect(receiver.delivered().size).toBeGreaterThanOrEqual(3);
    expect(id).toBeGreaterThan(0n);

    // HTTP by route template and status: a 200 and a 401 of the same route.
    const { key } = await createApiKey(service.db.sql, { merchant });
    const path = `/v0/subscriptions/${merchant}`;
    expect((await fetch(service.url + path, { headers: { authorization: `Bearer ${key}` } })).status).toBe(200);
    expect((await fetch(service.url + path)).status).toBe(401);
    const http = await scrape();
    const route = "/v0/subscriptions/:merchant";
    expect(http.value("http_requests_total", { route, method: "GET", status: "200" })).toBe(1);
    expect(http.value("http_requests_total", { route, method: "GET", status: "401" })).toBe(1);
    expect(http.families.find((f) => f.name === "http_request_duration_seconds")?.type).toBe("HISTOGRAM");
    expect(http.text).toMatch(
      /http_request_duration_seconds_count\{route="\/v0\/subscriptions\/:merchant",method="GET",status="200"\} 1/,
    );
    // No raw path (an unbounded label value) ever becomes a label.
    const routes = new Set(
      http.families.find((f) => f.name === "http_requests_total")!.metrics.map((m) => m.labels?.route),
    );
    expect([...routes].some((r) => r?.includes("0x"))).toBe(false);
  }, 60_000);
});
