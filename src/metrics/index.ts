/**
 * Prometheus metrics (prom-client), served on their own listener (`METRICS_PORT`, never the API's port). One
 * registry per service. Subsystems report through small observer interfaces they declare themselves; state that
 * lives in the database (the chains' cursors, pending deliveries) is read at scrape time, so every process shows it.
 */
import { Counter, Gauge, Histogram, Registry, collectDefaultMetrics } from "prom-client";
import { computeUnitsByMethod } from "../chain/budget";
import { APPLICATION_NAME, type Sql } from "../db/client";
import { deferredIndexes } from "../db/deferred-indexes";
import { fanOutBacklog } from "../webhooks/fanout";
import { renewalMetrics } from "./renewals";

/** The service's metrics and what reports into them. */
export type Metrics = ReturnType<typeof createMetrics>;

/** What the metric groups below are registered with. */
type Ctx = {
  reg: Registry[];
  sql: Sql;
  counter: <L extends string>(name: string, help: string, labelNames: readonly L[]) => Counter<L>;
  /** A scrape-time read that, when it fails, keeps the last values and counts the failure. */
  guarded: (metric: string, read: () => Promise<void>) => () => Promise<void>;
  /** Counts a failed scrape-time read of `metric`. */
  failed: (metric: string) => void;
};

/** Creates the registry: HTTP, indexer, RPC, keeper and webhook metrics, and the per-chain and delivery gauges. */
export function createMetrics(opts: {
  sql: Sql;
  /** The pool size on Postgres; null on PGlite (one connection: no pool metrics). */
  poolMax: number | null;
}) {
  const registry = new Registry();
  collectDefaultMetrics({ register: registry });
  const ctx = metricsContext(registry, opts.sql);
  const http = httpMetrics(ctx);
  const indexer = indexerMetrics(ctx);
  const rpcCalls = ctx.counter("rpc_requests_total", "JSON-RPC calls by chain and method", ["chain_id", "method"]);
  const rpcErrors = ctx.counter(
    "rpc_errors_total",
    "Failed JSON-RPC calls (error answers, timeouts, refused connections) by chain and method",
    ["chain_id", "method"],
  );
  rpcComputeUnits(ctx);
  const keeper = keeperMetrics(ctx);
  const attempts = ctx.counter("webhook_attempts_total", "Webhook delivery attempts by outcome (succeeded, failed)", [
    "outcome",
  ]);
  chainGauges(ctx);
  deliveryGauges(ctx);
  poolGauges(ctx, opts.poolMax);
  const renewals = renewalMetrics(ctx.reg, ctx.sql, ctx.failed);

  return {
    registry,
    /** What the renewal outlook of each chain reports. */
    renewals,
    /** One HTTP request answered. */
    http,
    /** What the indexer of `chainId` reports after each commit. */
    indexer,
    /** An RPC call of `chainId` and how it ended. */
    rpc: (chainId: number, method: string, ok: boolean) => {
      rpcCalls.inc({ chain_id: String(chainId), method });
      if (!ok) rpcErrors.inc({ chain_id: String(chainId), method });
    },
    /** What a keeper of `chainId` reports (its source and address label it); `balance` is read at scrape time. */
    keeper,
    /** One webhook attempt finished. */
    webhookAttempt: (ok: boolean) => attempts.inc({ outcome: ok ? "succeeded" : "failed" }),
  };
}

/**
 * `rpc_compute_units_total` by method: the compute units (RPC_CU_WEIGHTS, Alchemy's by default) of the answered
 * calls of every RPC client of the process, read from their budgets at scrape time.
 */
function rpcComputeUnits(ctx: Ctx) {
  const seen = new Map<string, number>();
  const counter: Counter<"method"> = new Counter({
    name: "rpc_compute_units_total",
    help: "Compute units of answered JSON-RPC calls by method (RPC_CU_WEIGHTS; a throttled call is not billed)",
    labelNames: ["method"],
    registers: ctx.reg,
    collect() {
      for (const [method, cu] of computeUnitsByMethod()) {
        const delta = cu - (seen.get(method) ?? 0);
        if (delta > 0) counter.inc({ method }, delta);
        seen.set(method, cu);
      }
    },
  });
}

/** The registration helpers over one registry. */
function metricsContext(registry: Registry, sql: Sql): Ctx {
  const reg = [registry];
  const counter = <L extends string>(name: string, help: string, labelNames: readonly L[]) =>
    new Counter<L>({ name, help, labelNames, registers: reg });
  // Read at scrape time. A failed read (database down) leaves the last values and counts the failure: the rest of
  // the scrape still answers.
  const scrapeErrors = counter(
    "metrics_collect_errors_total",
    "Reads for a scrape that failed (the gauges keep their last values)",
    ["metric"],
  );
  const failed = (metric: string) => scrapeErrors.inc({ metric });
  const guarded = (metric: string, read: () => Promise<void>) => async () => {
    try {
      await read();
    } catch {
      failed(metric);
    }
  };
  return { reg, sql, counter, guarded, failed };
}

/** Requests and their durations by route template, method and status. */
function httpMetrics({ reg, counter }: Ctx) {
  const httpRequests = counter("http_requests_total", "HTTP requests by route template, method and status", [
    "route",
    "method",
    "status",
  ]);
  const httpDuration = new Histogram({
    name: "http_request_duration_seconds",
    help: "HTTP request durations by route template, method and status",
    labelNames: ["route", "method", "status"] as const,
    buckets: [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5],
    registers: reg,
  });
  return (route: string, method: string, status: number, seconds: number) => {
    const l = { route, method, status: String(status) };
    httpRequests.inc(l);
    httpDuration.observe(l, seconds);
  };
}

/** Batch durations, indexed logs and rollbacks, by chain. */
function indexerMetrics({ reg, counter }: Ctx) {
  const batches = new Histogram({
    name: "indexer_batch_duration_seconds",
    help: "Time to write one indexed batch (its transaction), by chain",
    labelNames: ["chain_id"] as const,
    buckets: [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10],
    registers: reg,
  });
  const eventsIndexed = counter("indexer_events_total", "Logs indexed, by chain", ["chain_id"]);
  const reorgs = counter("indexer_reorgs_total", "Rollbacks of indexed blocks (reorgs), by chain", ["chain_id"]);
  return (chainId: number) => ({
    batch: (events: number, seconds: number) => {
      batches.observe({ chain_id: String(chainId) }, seconds);
      eventsIndexed.inc({ chain_id: String(chainId) }, events);
    },
    rollback: () => reorgs.inc({ chain_id: String(chainId) }),
  });
}

/** The keepers' charges, and each keeper's balance read at scrape time, by chain, source and address. */
function keeperMetrics({ reg, counter, guarded }: Ctx) {
  const charges = counter(
    "keeper_charges_total",
    "Charges by the keepers: sent transactions, and mined outcomes (succeeded, failed with its reason, reverted), " +
      "by source (subscription_module, spend_permission)",
    ["chain_id", "source", "outcome", "reason"],
  );
  // One keeper per chain and key: each balance is read at scrape time under its labels.
  const balances = new Map<
    string,
    { labels: Record<"chain_id" | "source" | "keeper", string>; read: () => Promise<bigint> }
  >();
  const keeperBalance: Gauge<"chain_id" | "source" | "keeper"> = new Gauge({
    name: "keeper_balance_wei",
    help: "Native balance of each keeper account, in wei (gas money), by chain, source and address",
    labelNames: ["chain_id", "source", "keeper"] as const,
    registers: reg,
    collect: guarded("keeper_balance_wei", async () => {
      for (const { labels, read } of balances.values()) keeperBalance.set(labels, Number(await read()));
    }),
  });
  return (
    chainId: number,
    readBalance: () => Promise<bigint>,
    who: { source: "subscription_module" | "spend_permission"; address: string },
  ) => {
    const labels = { chain_id: String(chainId), source: who.source, keeper: who.address.toLowerCase() };
    balances.set(`${labels.chain_id}:${labels.source}:${labels.keeper}`, { labels, read: readBalance });
    return {
      charge: (outcome: "sent" | "succeeded" | "failed" | "reverted", reason: string | null = null) =>
        charges.inc({ chain_id: labels.chain_id, source: who.source, outcome, reason: reason ?? "" }),
    };
  };
}

/** Each chain's cursor (indexed and head block, lag, deep reorg), read from the database at scrape time. */
function chainGauges({ reg, sql, guarded }: Ctx): void {
  const chainGauge = (name: string, help: string) =>
    new Gauge({ name, help, labelNames: ["chain_id"] as const, registers: reg });
  const indexedBlock = chainGauge("indexer_indexed_block", "Newest indexed block, by chain");
  const headBlock = chainGauge("indexer_head_block", "Chain head the indexer last saw, by chain");
  const lagBlocks = chainGauge("indexer_lag_blocks", "Head minus indexed block, by chain");
  const lagSeconds = chainGauge("indexer_lag_seconds", "Seconds since the newest indexed block's timestamp, by chain");
  const deepReorg = chainGauge("indexer_deep_reorg_suspected", "1 while a deep reorg is suspected, by chain");
  const deferred: Gauge = new Gauge({
    name: "indexer_deferred_indexes",
    help: "Secondary indexes an initial backfill left out until it reaches the head (0 otherwise)",
    registers: reg,
    collect: guarded("indexer_deferred_indexes", async () => deferred.set((await deferredIndexes(sql)).length)),
  });
  const chainsIndexed: Gauge = new Gauge({
    name: "chains_indexed",
    help: "Chains with a cursor row (the per-chain gauges are read from the database at scrape time)",
    registers: reg,
    collect: guarded("chains_indexed", async () => {
      const rows = await sql<
        { chain_id: string; indexed: string | null; head: string | null; t: string | null; deep: boolean }[]
      >`
        select chain_id::text, indexed_block::text as indexed, head_block::text as head,
          extract(epoch from clock_timestamp() - indexed_time)::text as t, deep_reorg_suspected_at is not null as deep
        from chains`;
      for (const r of rows) {
        const l = { chain_id: r.chain_id };
        if (r.indexed !== null) indexedBlock.set(l, Number(r.indexed));
        if (r.head !== null) headBlock.set(l, Number(r.head));
        if (r.indexed !== null && r.head !== null) lagBlocks.set(l, Math.max(0, Number(r.head) - Number(r.indexed)));
        if (r.t !== null) lagSeconds.set(l, Math.max(0, Number(r.t)));
        deepReorg.set(l, r.deep ? 1 : 0);
      }
      chainsIndexed.set(rows.length);
    }),
  });
}

/** Pending webhook deliveries, the age of the oldest and the fan-out outbox's backlog, read at scrape time. */
function deliveryGauges({ reg, sql, guarded }: Ctx): void {
  const oldest = new Gauge({
    name: "webhook_oldest_pending_age_seconds",
    help: "Age of the oldest pending webhook delivery (0 when none)",
    registers: reg,
  });
  const pending: Gauge = new Gauge({
    name: "webhook_deliveries_pending",
    help: "Webhook deliveries waiting to be sent or retried",
    registers: reg,
    collect: guarded("webhook_deliveries_pending", async () => {
      const [r] = await sql<{ n: number; age: string | null }[]>`
        select count(*)::int as n, extract(epoch from clock_timestamp() - min(created_at))::text as age
        from webhook_deliveries where status = 'pending'`;
      pending.set(r!.n);
      oldest.set(r!.age === null ? 0 : Math.max(0, Number(r!.age)));
    }),
  });
  const backlog: Gauge = new Gauge({
    name: "webhook_fanout_backlog",
    help: "Ranges of written events whose deliveries the dispatcher has not created yet (the fan-out outbox)",
    registers: reg,
    collect: guarded("webhook_fanout_backlog", async () => {
      backlog.set((await fanOutBacklog(sql)).queued);
    }),
  });
}

/**
 * This process's database connections by state, and the pool size (Postgres only). postgres.js does not expose its
 * pool's state: the server's view of this process's connections does (PGlite has one connection and no such view).
 */
function poolGauges({ reg, sql, guarded }: Ctx, poolMax: number | null): void {
  const connections: Gauge<"state"> = new Gauge({
    name: "db_pool_connections",
    help: "This process's open database connections by state (active, idle, idle in transaction)",
    labelNames: ["state"] as const,
    registers: poolMax === null ? [] : reg,
    collect: guarded("db_pool_connections", async () => {
      const rows = await sql<{ state: string; n: number }[]>`
        select coalesce(state, 'unknown') as state, count(*)::int as n from pg_stat_activity
        where application_name = ${APPLICATION_NAME} group by 1`;
      connections.reset();
      for (const state of ["active", "idle", "idle in transaction"]) connections.set({ state }, 0);
      for (const r of rows) connections.set({ state: r.state }, r.n);
    }),
  });
  if (poolMax !== null) {
    new Gauge({ name: "db_pool_max_connections", help: "Size of the database pool", registers: reg }).set(poolMax);
  }
}

/** A running metrics listener. */
export type MetricsListener = { url: string; stop: () => Promise<void> };

/** Serves `GET /metrics` (text format) on `host:port`; anything else is a 404. */
export function startMetricsListener(metrics: Metrics, host: string, port: number): MetricsListener {
  const server = Bun.serve({
    hostname: host,
    port,
    async fetch(req) {
      if (new URL(req.url).pathname !== "/metrics" || req.method !== "GET") {
        return new Response("not found\n", { status: 404 });
      }
      return new Response(await metrics.registry.metrics(), {
        headers: { "content-type": metrics.registry.contentType },
      });
    },
  });
  const shown = ["0.0.0.0", "::", ""].includes(host) ? "127.0.0.1" : host;
  return { url: `http://${shown}:${server.port}/metrics`, stop: async () => void (await server.stop(true)) };
}
