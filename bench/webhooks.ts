/**
 * Webhook dispatcher benchmark against a local receiver, on Postgres (DATABASE_URL, default
 * postgres://postgres@127.0.0.1:5432/postgres; a fresh database is created and dropped) or PGlite (--pglite):
 *
 * (a) throughput: N events fanned out to one endpoint and to 16 (a merchant's most), all pending at once; deliveries/s until
 *     the last one is recorded as succeeded.
 * (b) latency: a steady 200 events/s for D seconds, written in transactions as the indexer writes them (events,
 *     their range in the fan-out outbox, then the batch notification); the time from commit to the receiver's
 *     request (the dispatcher's drain of the outbox included), p50/p99/max.
 *
 *   bun run bench/webhooks.ts [--events 20000] [--seconds 20] [--pglite]
 */
import postgres from "postgres";
import { createLogger } from "../src/common/log";
import { createDb, type Db } from "../src/db/client";
import { migrate } from "../src/db/migrate";
import { createNotifier } from "../src/db/notify";
import { createDispatcher, type DispatcherConfig } from "../src/webhooks/dispatcher";
import { enqueueFanOut } from "../src/webhooks/fanout";
import { endpointForAll, undelivered } from "../testkit/webhooks";

const arg = (name: string, def: number) => {
  const i = process.argv.indexOf(`--${name}`);
  return i > 0 ? Number(process.argv[i + 1]) : def;
};
const EVENTS = arg("events", 20_000);
const SECONDS = arg("seconds", 20);
const RATE = 200;
const PGLITE = process.argv.includes("--pglite");
const POLL_MS = 1000;

const config: DispatcherConfig = {
  timeoutMs: 10_000,
  retrySchedule: [5, 300],
  disableAfterS: 432_000,
  perEndpoint: 4,
  concurrency: 64,
  pollIntervalMs: POLL_MS,
  allowPrivate: true,
};

const fmt = (n: number) => Math.round(n).toLocaleString("en-US");
const pct = (xs: number[], p: number) => xs[Math.min(xs.length - 1, Math.floor((p / 100) * xs.length))]!;

/** The receiver: answers 204 at once, and notes when each webhook-id first arrived. */
function startReceiver() {
  const firstSeen = new Map<string, number>();
  const server = Bun.serve({
    hostname: "127.0.0.1",
    port: 0,
    async fetch(req) {
      await req.arrayBuffer();
      const id = req.headers.get("webhook-id")!;
      if (!firstSeen.has(id)) firstSeen.set(id, performance.now());
      return new Response(null, { status: 204 });
    },
  });
  return { url: `http://127.0.0.1:${server.port}/hook`, firstSeen, stop: () => server.stop(true) };
}

/** A charge.succeeded object of the usual size (about 600 bytes). */
const OBJECT = JSON.stringify({
  object: {
    event_id: "31337:0x5c504ed432cb51138bcf09aa5e8a410dd4a1e204ef84bfed1be16dfba1b22060:3",
    allocation_id: "31337:0xa16e02e87b7454126e5e10d957a927a7f5b5d2be:42",
    module_address: "0xa16e02e87b7454126e5e10d957a927a7f5b5d2be",
    tx_hash: "0x5c504ed432cb51138bcf09aa5e8a410dd4a1e204ef84bfed1be16dfba1b22060",
    block_number: "123456",
    type: "CHARGE",
    amount_charged: "9990000",
    token_decimals: 6,
    currency: "USDC",
    reason: null,
    keeper_address: "0x15d34aaf54267db7d7c367839aaf71a00a2c6a65",
    fee_paid: "99900",
    timestamp: "2026-11-24T12:00:00.000Z",
  },
});

let seq = 0;
/** Writes `n` events (merchants in turn) in one transaction with their outbox row, as an indexer batch does. */
async function writeEvents(db: Db, merchants: string[], n: number): Promise<string[]> {
  const lo = seq + 1;
  seq += n;
  return db.sql.begin(async (tx) => {
    const rows = await tx<{ id: string; seq: string }[]>`
      insert into merchant_events (id, chain_id, merchant, type, block_number, log_index, ts, data)
      select 'evt_' || lpad(to_hex(g), 40, '0'), 31337, (${merchants}::text[])[1 + g % ${merchants.length}],
        'charge.succeeded', g, 0, now(), ${OBJECT}::text::jsonb
      from generate_series(${lo}::int, ${seq}::int) g
      returning id, seq::text`;
    const seqs = rows.map((r) => BigInt(r.seq));
    const min = seqs.reduce((a, b) => (a < b ? a : b));
    const max = seqs.reduce((a, b) => (a > b ? a : b));
    await enqueueFanOut(tx, { chainId: 31337, fromSeq: min, toSeq: max, withdrawals: false });
    return rows.map((r) => r.id);
  });
}

async function openDb(): Promise<{ db: Db; drop: () => Promise<void> }> {
  if (PGLITE) return { db: await createDb({ dataDir: "memory://" }), drop: async () => {} };
  const base = process.env.DATABASE_URL ?? "postgres://postgres@127.0.0.1:5432/postgres";
  const name = `bench_webhooks_${Date.now().toString(36)}`;
  const admin = postgres(base, { max: 1, onnotice: () => {} });
  await admin.unsafe(`create database ${name}`);
  const url = new URL(base);
  url.pathname = `/${name}`;
  const db = await createDb({ url: url.toString(), max: 8 });
  return {
    db,
    drop: async () => {
      await admin.unsafe(`drop database if exists ${name} with (force)`);
      await admin.end();
    },
  };
}

async function waitDone(db: Db) {
  for (;;) {
    if ((await undelivered(db.sql)) === 0) return;
    await Bun.sleep(20);
  }
}

async function throughput(db: Db, receiverUrl: string, endpoints: number) {
  await db.sql`delete from webhook_endpoints`;
  const merchant = "0x00000000000000000000000000000000000000aa";
  for (let i = 0; i < endpoints; i++) {
    await endpointForAll(db.sql, merchant, `${receiverUrl}/${i}`);
  }
  const perEndpoint = Math.ceil(EVENTS / endpoints);
  for (let written = 0; written < perEndpoint; written += 5000) {
    await writeEvents(db, [merchant], Math.min(5000, perEndpoint - written));
  }
  const d = createDispatcher({ sql: db.sql, log: createLogger("error"), config });
  const started = performance.now();
  await d.start();
  await waitDone(db);
  const seconds = (performance.now() - started) / 1000;
  await d.stop();
  const total = perEndpoint * endpoints;
  console.log(
    `(a) throughput, ${endpoints} endpoint${endpoints > 1 ? "s" : ""}: ${fmt(total)} deliveries in ${seconds.toFixed(2)} s = ` +
      `${fmt(total / seconds)} deliveries/s (target ≥ 2,000)`,
  );
}

async function latency(db: Db, receiver: ReturnType<typeof startReceiver>) {
  await db.sql`delete from webhook_endpoints`;
  const merchants = Array.from({ length: 10 }, (_, i) => `0x${(i + 1).toString(16).padStart(40, "0")}`);
  for (const merchant of merchants) {
    await endpointForAll(db.sql, merchant, receiver.url);
  }
  const notifier = createNotifier(db, createLogger("error"));
  const d = createDispatcher({ sql: db.sql, log: createLogger("error"), notifier, config });
  await d.start();
  const committedAt = new Map<string, number>();
  // Batches of 10 every 50 ms: 200 events/s.
  const started = performance.now();
  let tick = 0;
  while (performance.now() - started < SECONDS * 1000) {
    const ids = await writeEvents(db, merchants, RATE / 20);
    const at = performance.now();
    for (const id of ids) committedAt.set(id, at);
    await notifier.publish({ chainId: 31337, fromBlock: "0", toBlock: "0", reorg: false });
    tick++;
    const next = started + tick * 50;
    await Bun.sleep(Math.max(0, next - performance.now()));
  }
  await waitDone(db);
  await d.stop();
  const lat = [...committedAt].map(([id, at]) => receiver.firstSeen.get(id)! - at).sort((a, b) => a - b);
  console.log(
    `(b) latency at ${RATE} events/s for ${SECONDS} s (${fmt(lat.length)} deliveries, 10 endpoints): commit → receiver ` +
      `p50 ${pct(lat, 50).toFixed(1)} ms, p99 ${pct(lat, 99).toFixed(1)} ms, max ${lat.at(-1)!.toFixed(1)} ms ` +
      `(target p99 ≤ poll interval ${POLL_MS} ms + 50 ms)`,
  );
}

const { db, drop } = await openDb();
const receiver = startReceiver();
try {
  await migrate(db.sql);
  console.log(`webhooks bench on ${PGLITE ? "PGlite" : "Postgres"}`);
  await throughput(db, receiver.url, 1);
  await throughput(db, receiver.url, 16);
  await latency(db, receiver);
} finally {
  receiver.stop();
  await db.close();
  await drop();
}
