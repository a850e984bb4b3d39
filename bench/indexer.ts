/**
 * Indexer benchmark: generates ≥ 50,000 payment events on a fresh anvil, then times (a) a raw viem
 * `eth_getLogs` sweep + decode of the range and (b) a full backfill by the indexer into a fresh Postgres
 * database (DATABASE_URL, default postgres://postgres@127.0.0.1:5432/postgres), and prints events/s and (b)/(a).
 *
 *   bun run bench/indexer.ts [--events 50000]
 */
import postgres from "postgres";
import { createPublicClient, decodeEventLog, http, type Address } from "viem";
import { createDb } from "../src/db/client";
import { migrate } from "../src/db/migrate";
import { createIndexer } from "../src/indexer";
import { subscriptionModuleAbi, subscriptionProcessorAbi } from "../src/chain/abis";
import { createTestChain } from "../testkit/chain";
import { runLoad, setupLoad } from "../testkit/load";

const argEvents = process.argv.indexOf("--events");
const wanted = argEvents > 0 ? Number(process.argv[argEvents + 1]) : 50_000;
const SUCCESS_SUBS = 200;
const FAILURES_PER_ROUND = 300;
const rounds = Math.ceil(wanted / (SUCCESS_SUBS + FAILURES_PER_ROUND));
// Blocks per raw eth_getLogs call: about 5k logs a call, well under viem's 10 MB response cap.
const RAW_CHUNK = 20n;
// Alternating runs of each side.
const RUNS = 3;

const baseUrl = process.env.DATABASE_URL ?? "postgres://postgres@127.0.0.1:5432/postgres";
const dbName = `bench_indexer_${Date.now().toString(36)}`;
const admin = postgres(baseUrl, { max: 1, onnotice: () => {} });

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

async function backfill(url: string, chain: Awaited<ReturnType<typeof createTestChain>>, head: bigint) {
  const db = await createDb({ url, max: 8 });
  try {
    await migrate(db.sql);
    const client = createPublicClient({ transport: http(chain.rpcUrl, { retryCount: 0 }), cacheTime: 0 });
    const indexer = createIndexer({
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
    });
    const started = performance.now();
    await indexer.start();
    await indexer.waitForBlock(head, 300_000);
    const seconds = (performance.now() - started) / 1000;
    await indexer.stop();
    const [row] = await db.sql<{ n: string }[]>`select count(*)::text as n from events`;
    return { count: Number(row!.n), seconds };
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

    // Alternating runs, so both sides see the same machine; the best run of each side is compared.
    const raws: { count: number; seconds: number }[] = [];
    const idxs: { count: number; seconds: number }[] = [];
    const addresses = [chain.processor, load.module];
    for (let i = 0; i < RUNS; i++) {
      raws.push(await rawSweep(chain.rpcUrl, addresses, chain.startBlock, head));
      const name = `${dbName}_${i}`;
      await admin.unsafe(`create database ${name}`);
      dbs.push(name);
      const url = new URL(baseUrl);
      url.pathname = `/${name}`;
      const run = await backfill(url.toString(), chain, head);
      if (run.count !== raws[i]!.count) {
        throw new Error(`indexer stored ${run.count} events, the raw sweep decoded ${raws[i]!.count}`);
      }
      idxs.push(run);
    }
    const rate = (r: { count: number; seconds: number }) => r.count / r.seconds;
    const best = (rs: { count: number; seconds: number }[]) => rs.reduce((a, b) => (rate(a) >= rate(b) ? a : b));
    for (let i = 0; i < RUNS; i++) {
      console.log(
        `run ${i + 1}: raw ${raws[i]!.seconds.toFixed(2)} s = ${fmt(rate(raws[i]!))} events/s, ` +
          `indexer ${idxs[i]!.seconds.toFixed(2)} s = ${fmt(rate(idxs[i]!))} events/s`,
      );
    }
    const raw = best(raws);
    const idx = best(idxs);
    console.log(
      `(a) raw eth_getLogs + decode: ${fmt(raw.count)} events in ${raw.seconds.toFixed(2)} s = ` +
        `${fmt(rate(raw))} events/s`,
    );
    console.log(
      `(b) indexer backfill → Postgres: ${fmt(idx.count)} events in ${idx.seconds.toFixed(2)} s = ` +
        `${fmt(rate(idx))} events/s`,
    );
    console.log(`ratio (b)/(a) = ${(rate(idx) / rate(raw)).toFixed(2)} (target ≥ 0.70)`);
  } finally {
    await chain.stop();
    for (const name of dbs) await admin.unsafe(`drop database if exists ${name} with (force)`);
    await admin.end();
  }
}

await main();
