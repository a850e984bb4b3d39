/**
 * Renewal outlook benchmark: N chargeable subscriptions due within the horizon, each of its own wallet
 * (the worst case: 3 reads per subscription), evaluated against a real anvil through Multicall3 `aggregate3`, on
 * PGlite (default) or Postgres (DATABASE_URL). The subscriptions are written to the database directly (creating
 * 100,000 on-chain would take the bench an hour); every read goes to the chain: the token's balanceOf and allowance,
 * the processor's creditOf, pinned to the indexed block. Prints the time to evaluate them all and the HTTP requests
 * sent per 1,000 subscriptions.
 *
 *   bun run bench/renewals.ts [--subscriptions 100000] [--concurrency 4] [--per-pass 50000]
 */
import { MULTICALL3_ADDRESS } from "../src/chain/multicall3";
import { createRenewalLoop } from "../src/renewals/loop";
import { createRenewalReader } from "../src/renewals/reader";
import { createTestChain } from "../testkit/chain";
import { createTestDb } from "../testkit/db";
import { cpuMicros } from "./proc";

/** CPU seconds (user + system) of each process whose command line matches `pattern`, from /proc (Linux). */
function cpuOf(pattern: string): Map<string, number> {
  const out = new Map<string, number>();
  const pids = Bun.spawnSync(["pgrep", "-f", pattern]).stdout.toString().trim().split("\n").filter(Boolean);
  for (const pid of pids) {
    try {
      out.set(pid, cpuMicros(pid) / 1e6);
    } catch {
      // gone meanwhile
    }
  }
  return out;
}

/** CPU seconds the processes matching `pattern` used between two `cpuOf` readings (new processes fully). */
function cpuBetween(before: Map<string, number>, after: Map<string, number>): number {
  let s = 0;
  for (const [pid, t] of after) s += t - (before.get(pid) ?? 0);
  return Number(s.toFixed(2));
}

const arg = (name: string, def: number) => {
  const i = process.argv.indexOf(`--${name}`);
  return i > 0 ? Number(process.argv[i + 1]) : def;
};
const N = arg("subscriptions", 100_000);
const CONCURRENCY = arg("concurrency", 4);
const PER_PASS = arg("per-pass", 50_000);

const chain = await createTestChain();
const db = await createTestDb({ max: 4 });
try {
  const token = (await chain.deployToken()).toLowerCase();
  const module = (await chain.createModule("merchant")).toLowerCase();
  // A few real balances among the wallets (the rest hold nothing): alice, and the deployer's mints.
  await chain.fund("alice", token as `0x${string}`, 1_000_000_000n);
  const head = await chain.publicClient.getBlock({ blockTag: "latest" });
  const now = Number(head.timestamp);
  const { sql } = db;
  await sql`insert into chains (chain_id, processor, start_block, indexed_block, indexed_hash, indexed_time, head_block)
    values (${chain.chainId}, ${chain.processor.toLowerCase()}, 0, ${head.number.toString()}, ${head.hash},
      to_timestamp(${now}), ${head.number.toString()})`;
  await sql`insert into plans (chain_id, module, plan_id, token, amount, interval_s, grace_s, block_number, log_index)
    values (${chain.chainId}, ${module}, 1, ${token}, 9990000, 2592000, 0, 1, 0)`;
  const t0 = performance.now();
  await sql`insert into subscriptions (chain_id, subscription_id, module, merchant, subscriber, plan_id,
      max_executions, times_executed, total_spent, created_at, last_paid_at, next_charge_at, allowance_expiry,
      paused, cancelled, block_number, log_index, tx_hash)
    select ${chain.chainId}, 1 + g, ${module}, ${chain.address("merchant").toLowerCase()},
      case when g % 1000 = 0 then ${chain.address("alice").toLowerCase()} else '0xd' || lpad(to_hex(g), 39, '0') end,
      1, 0, 1, 9990000, ${now - 2592000}, ${now - 2592000 + 600}, ${now} + (g * 6) % 604000, 0, false, false,
      1 + g / 100, g % 100, '0xe' || lpad(to_hex(g), 63, '0')
    from generate_series(0, ${N - 1}) g`;
  console.log(`seeded ${N} subscriptions in ${((performance.now() - t0) / 1000).toFixed(1)} s (${db.kind})`);

  const reader = createRenewalReader({
    rpcUrl: chain.rpcUrl,
    processor: chain.processor,
    multicall: MULTICALL3_ADDRESS,
    concurrency: CONCURRENCY,
  });
  const passes: { evaluated: number; seconds: number; stages: Record<string, number> }[] = [];
  const loop = createRenewalLoop({
    sql,
    chainId: chain.chainId,
    reader,
    isLeader: () => true,
    horizonS: 604_800,
    intervalS: 900,
    pollMs: 1000,
    walletsPerPass: PER_PASS,
    onPass: (r) => passes.push({ evaluated: r.evaluated, seconds: r.seconds, stages: r.stages }),
  });
  const started = performance.now();
  // The anvil of this chain, and (on Postgres) the server processes of this database.
  const anvilProc = `anvil .*--port ${new URL(chain.rpcUrl).port} `;
  const [{ name }] = await sql<{ name: string }[]>`select current_database() as name`;
  const pgProc = `postgres: .*postgres ${name} `;
  const cpu = process.cpuUsage();
  const [anvil0, pg0] = [cpuOf(anvilProc), cpuOf(pgProc)];
  while (await loop.runOnce());
  const seconds = (performance.now() - started) / 1000;
  const used = process.cpuUsage(cpu);
  const [anvil1, pg1] = [cpuOf(anvilProc), cpuOf(pgProc)];
  const [row] = await sql<{ n: number; risk: number }[]>`
    select count(*)::int as n, count(*) filter (where outlook = 'at_risk')::int as risk from renewal_outlooks`;
  const requests = reader.requests();
  console.log(
    JSON.stringify(
      {
        subscriptions: N,
        evaluated: row!.n,
        at_risk: row!.risk,
        seconds: Number(seconds.toFixed(2)),
        per_second: Math.round(row!.n / seconds),
        rpc_requests: requests,
        rpc_requests_per_1000: Number(((requests * 1000) / N).toFixed(2)),
        // CPU seconds of this process (the loop, not anvil or the database) over the evaluation: steadier than the
        // wall time on a loaded machine.
        cpu_seconds: Number(((used.user + used.system) / 1e6).toFixed(2)),
        anvil_cpu_seconds: cpuBetween(anvil0, anvil1),
        postgres_cpu_seconds: db.kind === "postgres" ? cpuBetween(pg0, pg1) : null,
        passes: passes.map((p) => ({ evaluated: p.evaluated, seconds: Number(p.seconds.toFixed(2)), ms: p.stages })),
        concurrency: CONCURRENCY,
        database: db.kind,
      },
      null,
      2,
    ),
  );
} finally {
  await db.close();
  await chain.stop();
}
