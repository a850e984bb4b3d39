/**
 * Indexer benchmark: generates ≥ 50,000 payment events on a fresh anvil, then times (a) a raw viem
 * `eth_getLogs` sweep + decode of the range, (b) a full backfill by the indexer into a fresh Postgres database
 * (DATABASE_URL, default postgres://postgres@127.0.0.1:5432/postgres) without hooks, and (c) the same backfill as the
 * service runs it: stats rollups, the merchant event log with its fan-out outbox in every batch, and (e) a webhook
 * endpoint of the merchant, with the outbox drained beside the indexer as the dispatcher drains it (the time at which
 * every delivery exists is printed too). Prints events/s, (b)/(a), the events created and the slowdown of (c)
 * against (b) minus rollups.
 * (f) is (e) with the renewal outlook on (renewals.md): its hooks in every batch and its evaluation loop running.
 *
 *   bun run bench/indexer.ts [--events 50000] [--runs 7] [--sides events,webhooks] [--stages]
 *
 * `--sides` runs only those backfills besides (c), e.g. for a quicker loop or a CPU profile of one side.
 */
import { readFileSync } from "node:fs";
import postgres from "postgres";
import { createPublicClient, decodeEventLog, http, type Address } from "viem";
import { createDb } from "../src/db/client";
import { migrate } from "../src/db/migrate";
import { createIndexer } from "../src/indexer";
import type { IndexerHook } from "../src/indexer/hooks";
import { statsRollupsHook } from "../src/indexer/rollups";
import { eventsHook } from "../src/events/hook";
import { drainFanOut, enqueueFanOut } from "../src/webhooks/fanout";
import { chainRenewals } from "../src/renewals";
import { subscriptionModuleAbi, subscriptionProcessorAbi } from "../src/chain/abis";
import { createTestChain } from "../testkit/chain";
import { runLoad, setupLoad } from "../testkit/load";
import { endpointForAll } from "../testkit/webhooks";
import { cpuMicros, cpuTimes } from "./proc";

const argEvents = process.argv.indexOf("--events");
const wanted = argEvents > 0 ? Number(process.argv[argEvents + 1]) : 50_000;
const SUCCESS_SUBS = 200;
const FAILURES_PER_ROUND = 300;
const rounds = Math.ceil(wanted / (SUCCESS_SUBS + FAILURES_PER_ROUND));
// Blocks per raw eth_getLogs call: about 5k logs a call, well under viem's 10 MB response cap.
const RAW_CHUNK = 20n;
// Alternating runs of each side.
const argRuns = process.argv.indexOf("--runs");
const RUNS = argRuns > 0 ? Number(process.argv[argRuns + 1]) : 7;
// The batches' stage sums of each backfill (the "indexed batch" debug line's `stages`).
const showStages = process.argv.includes("--stages");

const baseUrl = process.env.DATABASE_URL ?? "postgres://postgres@127.0.0.1:5432/postgres";
const dbName = `bench_indexer_${Date.now().toString(36)}`;
const admin = postgres(baseUrl, { max: 1, onnotice: () => {} });

/** CPU seconds so far of each Postgres backend connected to the database of `sql` (the server runs on this machine). */
async function backendCpu(sql: postgres.Sql): Promise<Map<number, number>> {
  const rows = await sql<{ pid: number }[]>`
    select pid from pg_stat_activity where datname = current_database()`;
  const out = new Map<number, number>();
  for (const { pid } of rows) {
    try {
      out.set(pid, cpuMicros(pid) / 1e6);
    } catch {
      // ended meanwhile
    }
  }
  return out;
}

const fmt = (n: number) => Math.round(n).toLocaleString("en-US");

async function rawSweep(rpcUrl: string, addresses: Address[], from: bigint, to: bigint) {
  const client = createPublicClient({ transport: http(rpcUrl), cacheTime: 0 });
  const abi = [...subscriptionProcessorAbi, ...subscriptionModuleAbi];
  const started = performance.now();
  let count = 0;
  for (let f = from; f <= to; f += RAW_CHUNK) {
    const t = f + RAW_CHUNK - 1n < to ? f + RAW_CHUNK - 1n : to;
    const logs = await client.getLogs({ address: addresses, fromBlock: f, toBlock: t });
    for (const log of logs) {
      decodeEventLog({ abi, data: log.data, topics: log.topics });
      count++;
    }
  }
  return { count, seconds: (performance.now() - started) / 1000 };
}

/**
 * Drains the fan-out outbox while the indexer runs, as the dispatcher does (a pass when woken, here every 50 ms, and
 * at once again while a pass says more is queued); `stop` waits until the outbox is empty.
 */
function drainLoop(sql: Parameters<typeof drainFanOut>[0]) {
  let stopping = false;
  const empty = async () =>
    (await sql<{ n: number }[]>`select count(*)::int as n from webhook_fanout_queue`)[0]!.n === 0;
  const run = (async () => {
    for (;;) {
      if (await drainFanOut(sql)) continue;
      if (stopping && (await empty())) return;
      await Bun.sleep(50);
    }
  })();
  return {
    stop: async () => {
      stopping = true;
      await run;
    },
  };
}

/** What a backfill runs besides the indexer's own writes. */
type Side = "bare" | "rollups" | "events" | "webhooks" | "renewals";

async function backfill(url: string, chain: Awaited<ReturnType<typeof createTestChain>>, head: bigint, side: Side) {
  const db = await createDb({ url, max: 8 });
  try {
    await migrate(db.sql);
    const merchant = chain.address("merchant").toLowerCase();
    if (side === "webhooks" || side === "renewals") {
      await endpointForAll(db.sql, merchant, "https://example.com/hook");
    }
    const renewals =
      side === "renewals"
        ? chainRenewals({
            sql: db.sql,
            config: {
              RENEWAL_HORIZON_S: 604_800,
              RENEWAL_NOTICE_S: 259_200,
              RENEWAL_CHECK_INTERVAL_S: 900,
              RENEWAL_RPC_CONCURRENCY: 4,
              RPC_TIMEOUT_MS: 5_000,
              multicallAddresses: {},
            },
            chain: { chainId: chain.chainId, rpcUrl: chain.rpcUrl, processor: chain.processor, pollIntervalMs: 100 },
            onEvents: enqueueFanOut,
          })
        : null;
    const hooks: IndexerHook[] =
      side === "bare"
        ? []
        : side === "rollups"
          ? [statsRollupsHook()]
          : renewals
            ? [statsRollupsHook(), eventsHook({ onEvents: enqueueFanOut, extra: renewals.upcoming }), renewals.hook]
            : [statsRollupsHook(), eventsHook({ onEvents: enqueueFanOut })];
    const client = createPublicClient({ transport: http(chain.rpcUrl, { retryCount: 0 }), cacheTime: 0 });
    const stages: Record<string, number> = {};
    const indexer = createIndexer({
      log: (_level, msg, fields) => {
        if (msg !== "indexed batch" || !showStages) return;
        for (const [k, v] of Object.entries((fields?.stages ?? {}) as Record<string, number>)) {
          stages[k] = (stages[k] ?? 0) + v;
        }
      },
      sql: db.sql,
      db,
      client,
      config: {
        PROCESSOR_ADDRESS: chain.processor.toLowerCase(),
        START_BLOCK: Number(chain.startBlock),
        CONFIRMATIONS: 0,
        POLL_INTERVAL_MS: 100,
        chainId: chain.chainId,
      },
      hooks,
    });
    const started = performance.now();
    const cpu0 = cpuTimes();
    const own0 = process.cpuUsage();
    const pg0 = await backendCpu(db.sql);
    await indexer.start();
    renewals?.start(() => indexer.status().leader);
    // The dispatcher's part of the fan-out, as the service runs it beside the indexer: draining the outbox.
    const drain = drainLoop(db.sql);
    await indexer.waitForBlock(head, 300_000);
    const seconds = (performance.now() - started) / 1000;
    const cpu1 = cpuTimes();
    const own = process.cpuUsage(own0);
    let pgSeconds = 0;
    for (const [pid, s] of await backendCpu(db.sql)) pgSeconds += s - (pg0.get(pid) ?? 0);
    // Jiffies are 1/100 s (USER_HZ) on Linux.
    const cpuSeconds = (cpu1.busy - cpu0.busy) / 100;
    const ownSeconds = (own.user + own.system) / 1e6;
    console.log(
      `  ${side}: ${seconds.toFixed(2)} s, cpu ${cpuSeconds.toFixed(2)} s (busy ${((100 * (cpu1.busy - cpu0.busy)) / (cpu1.total - cpu0.total)).toFixed(0)} %; ` +
        `indexer ${ownSeconds.toFixed(2)} s, its Postgres backends ${pgSeconds.toFixed(2)} s)`,
    );
    if (showStages) {
      const top = Object.entries(stages).sort((a, b) => b[1] - a[1]);
      const types = await db.sql<{ type: string; n: string }[]>`
        select type, count(*)::text as n from merchant_events group by type order by type`;
      console.log(`    stage sums (ms): ${top.map(([k, v]) => `${k} ${Math.round(v)}`).join(", ")}`);
      if (types.length) console.log(`    stored events: ${types.map((t) => `${t.type} ${t.n}`).join(", ")}`);
    }
    await renewals?.stop();
    await indexer.stop();
    await drain.stop();
    const drainedSeconds: number | false = side === "webhooks" ? (performance.now() - started) / 1000 : false;
    // The event log's ids in log order, hashed: every backfill of the chain must write the same log.
    const [row] = await db.sql<{ n: string; e: string; h: string | null; d: string }[]>`
      -- Every log is stored once: payment logs as their activity rows, the rest in events.
      select ((select count(*) from events) + (select count(*) from activity))::text as n,
        (select count(*) from event_log where seq is not null)::text as e,
        (select md5(string_agg(id, ',' order by seq)) from event_log where seq is not null) as h,
        (select count(*) from webhook_deliveries)::text as d`;
    return {
      count: Number(row!.n),
      seconds,
      cpuSeconds,
      merchantEvents: Number(row!.e),
      logHash: row!.h,
      deliveries: Number(row!.d),
      drainedSeconds,
    };
  } finally {
    await db.close();
  }
}

async function main() {
  console.log(`generating ~${fmt(rounds * (SUCCESS_SUBS + FAILURES_PER_ROUND))} payment events on anvil…`);
  const chain = await createTestChain();
  const dbs: string[] = [];
  try {
    const genStart = performance.now();
    const load = await setupLoad(chain, { successSubs: SUCCESS_SUBS });
    await runLoad(chain, load, { rounds, failures: FAILURES_PER_ROUND });
    const head = await chain.publicClient.getBlockNumber({ cacheTime: 0 });
    console.log(
      `generated ${fmt(load.payments)} payment events in ${head - chain.startBlock + 1n} blocks ` +
        `(${((performance.now() - genStart) / 1000).toFixed(1)} s)`,
    );

    // Alternating runs, so every side sees the same machine; the best run of each side is compared.
    type Run = {
      count: number;
      seconds: number;
      cpuSeconds?: number;
      merchantEvents?: number;
      logHash?: string | null;
      deliveries?: number;
      drainedSeconds?: number | false;
    };
    const argSides = process.argv.indexOf("--sides");
    const only = argSides > 0 ? new Set(["rollups", ...process.argv[argSides + 1]!.split(",")]) : null;
    const sides = (["bare", "rollups", "events", "webhooks", "renewals"] as Side[]).filter((s) => !only || only.has(s));
    const runs: Record<"raw" | Side, Run[]> = {
      raw: [],
      bare: [],
      rollups: [],
      events: [],
      webhooks: [],
      renewals: [],
    };
    const addresses = [chain.processor, load.module];
    for (let i = 0; i < RUNS; i++) {
      runs.raw.push(await rawSweep(chain.rpcUrl, addresses, chain.startBlock, head));
      for (const side of sides) {
        const name = `${dbName}_${side}_${i}`;
        await admin.unsafe(`create database ${name}`);
        dbs.push(name);
        const url = new URL(baseUrl);
        url.pathname = `/${name}`;
        const run = await backfill(url.toString(), chain, head, side);
        // Dropped at once: autovacuum of earlier runs' databases would otherwise compete with the later runs.
        await admin.unsafe(`drop database if exists ${name} with (force)`);
        if (run.count !== runs.raw[i]!.count) {
          throw new Error(`indexer stored ${run.count} events, the raw sweep decoded ${runs.raw[i]!.count}`);
        }
        // Every backfill of the same chain must write the same event log, however its batches overlapped.
        const first = runs.events[0] ?? runs.webhooks[0];
        if ((side === "events" || side === "webhooks") && first && run.logHash !== first.logHash) {
          throw new Error(`${side} run ${i + 1} wrote another event log (${run.merchantEvents} events) than run 1`);
        }
        runs[side].push(run);
      }
    }
    const rate = (r: Run) => r.count / r.seconds;
    const best = (rs: Run[]) => rs.reduce((a, b) => (rate(a) >= rate(b) ? a : b));
    for (let i = 0; i < RUNS; i++) {
      const line = (["raw", ...sides] as const).map((k) => `${k} ${runs[k][i]!.seconds.toFixed(2)} s`).join(", ");
      console.log(`run ${i + 1}: ${line}`);
    }
    const raw = best(runs.raw);
    const rollups = best(runs.rollups);
    const show = (label: string, r: Run) =>
      console.log(`${label}: ${fmt(r.count)} events in ${r.seconds.toFixed(2)} s = ${fmt(rate(r))} events/s`);
    // Best against best, and the median over runs of each run's ratio to the rollups run just before it (the
    // machine's noise is shared by neighbours in time).
    const median = (xs: number[]) => xs.sort((a, b) => a - b)[Math.floor(xs.length / 2)]!;
    const slowdown = (side: "events" | "webhooks" | "renewals", r: Run) => {
      const paired = median(runs[side].map((x, i) => x.seconds / runs.rollups[i]!.seconds - 1));
      const cpu = median(runs[side].map((x, i) => x.cpuSeconds! / runs.rollups[i]!.cpuSeconds! - 1));
      return (
        `${((rate(rollups) / rate(r) - 1) * 100).toFixed(1)} % best of ${RUNS}, ${(paired * 100).toFixed(1)} % median ` +
        `of the paired runs (CPU time of the machine: ${(cpu * 100).toFixed(1)} % more)`
      );
    };
    show("(a) raw eth_getLogs + decode", raw);
    if (sides.includes("bare")) {
      const bare = best(runs.bare);
      show("(b) indexer backfill → Postgres", bare);
      console.log(`ratio (b)/(a) = ${(rate(bare) / rate(raw)).toFixed(2)} (target ≥ 0.70)`);
    }
    show("(c) backfill with stats rollups (events off)", rollups);
    if (sides.includes("events")) {
      const events = best(runs.events);
      show("(d) backfill as the service runs it (rollups + event log)", events);
      console.log(
        `events on: ${fmt(events.merchantEvents!)} merchant events created; slowdown (d) against (c) = ${slowdown("events", events)} ` +
          "(target ≤ 10 %)",
      );
    }
    if (sides.includes("webhooks")) {
      const webhooks = best(runs.webhooks);
      show("(e) as (d), with a webhook endpoint of the merchant subscribed to every event", webhooks);
      console.log(
        `with fan-out: ${fmt(webhooks.deliveries!)} deliveries created too; slowdown (e) against (c) = ${slowdown("webhooks", webhooks)}`,
      );
      const drained = runs.webhooks.map((r) => (r.drainedSeconds ? `${r.drainedSeconds.toFixed(2)} s` : "-"));
      console.log(`  every delivery created (the outbox drained) at: ${drained.join(", ")}`);
    }
    if (sides.includes("renewals")) {
      const renewed = best(runs.renewals);
      show("(f) as (e), with the renewal outlook's hooks and evaluation loop", renewed);
      console.log(`renewals on: slowdown (f) against (c) = ${slowdown("renewals", renewed)}; compare with (e)'s`);
    }
  } finally {
    await chain.stop();
    for (const name of dbs) await admin.unsafe(`drop database if exists ${name} with (force)`);
    await admin.end();
  }
}

await main();
