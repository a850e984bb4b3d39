/**
 * `bun run bench/mrr.ts`: latency of the MRR routes for a large merchant, on Postgres (DATABASE_URL, default
 * postgres://postgres@127.0.0.1:5432/postgres; a fresh database, dropped at the end).
 *
 * Seeds, with set-based SQL, a merchant with 1,000,000 activity records and 100,000 allocations (one customer
 * each, 80% USDC, 20% WETH) over the year before "now", and the movements such a history leaves: every customer
 * `new` at its allocation's creation; 40% churn after 1–200 days (reasons in rotation), a third of those come back
 * (`reactivation`, `recovered` within 30 days); 15% expand, 10% contract. Then requests, through the real app
 * (`app.handle`, no network): `GET /v0/stats/:merchant/mrr` for a year by day (the target: p50 < 100 ms), by week
 * and by month, cohorts by month and by week, and a 100-record movements page; BENCH_RUNS (default 30) each after 3
 * warm-ups, printing p50/p95/max in ms and the 1-minute load average at the start. BENCH_KEEP=1 keeps the database.
 */
import postgres from "postgres";
import { createDb } from "../src/db/client";
import { migrate } from "../src/db/migrate";
import { loadConfig } from "../src/common/config";
import { createChainRegistry } from "../src/chain/clients";
import { createApp } from "../src/http/app";
import { loadAverage } from "./proc";
import { addToRollups } from "../src/analytics/queries";

const CHAIN = 31337;
const ADMIN_KEY = "bench-admin-key-0123456789abcdef";
const MERCHANT = "0x00000000000000000000000000000000000b16b1";
const MODULE = "0xb16b16b16b16b16b16b16b16b16b16b16b16b16b";
const USDC = "0x5fbdb2315678afecb367f032d93f642f64180aa3";
const WETH = "0xe7f1725e7734ce288f8367e1bb143e90bb3f0512";
const ACTIVITY = 1_000_000;
const ALLOCATIONS = 100_000;
const DAY = 86_400;
const RUNS = Number(process.env.BENCH_RUNS ?? 30);

/** Seeds the merchant. */
async function seed(sql: postgres.Sql, now: number) {
  const start = now - 365 * DAY;
  await sql`insert into chains (chain_id, processor, start_block, indexed_block, indexed_hash, indexed_time)
    values (${CHAIN}, '0x0', 1, 10000000, '0x0', to_timestamp(${now}))`;
  await sql`insert into tokens (chain_id, address, symbol, decimals) values (${CHAIN}, ${USDC}, 'USDC', 6), (${CHAIN}, ${WETH}, 'WETH', 18)`;
  await sql`insert into modules (chain_id, address, merchant, block_number, log_index, tx_hash)
    values (${CHAIN}, ${MODULE}, ${MERCHANT}, 1, 0, '0x0')`;
  await sql`insert into plans (chain_id, module, plan_id, token, amount, interval_s, grace_s, block_number, log_index)
    values (${CHAIN}, ${MODULE}, 1, ${USDC}, 10000000, 2592000, 259200, 1, 1),
      (${CHAIN}, ${MODULE}, 2, ${USDC}, 25000000, 2592000, 259200, 1, 2),
      (${CHAIN}, ${MODULE}, 3, ${WETH}, 5000000000000000, 604800, 86400, 1, 3)`;
  // Blocks: one every 12 s over the year.
  await sql`insert into subscriptions (chain_id, subscription_id, module, merchant, subscriber, plan_id, max_executions,
      times_executed, total_spent, created_at, last_paid_at, next_charge_at, block_number, log_index, tx_hash)
    select ${CHAIN}, g, ${MODULE}, ${MERCHANT}, '0x' || lpad(to_hex(g), 40, '0'), case when g % 5 = 0 then 3 else 1 + g % 2 end,
      0, 3, 30000000, ${start} + g * 300, ${start} + g * 300, ${start} + g * 300 + 2592000, (g * 300) / 12, 0, '0x0'
    from generate_series(1, ${ALLOCATIONS}) g`;
  await sql`insert into activity (chain_id, block_number, log_index, tx_hash, block_hash, block_time, merchant, module,
      subscription_id, type, token, amount, fee, reason, keeper)
    select ${CHAIN}, g / 4, g % 4, '0xc' || lpad(to_hex(g), 63, '0'), '0x0', to_timestamp(${start} + (g / 4) * 12.6),
      ${MERCHANT}, ${MODULE}, 1 + g % ${ALLOCATIONS}, case when g % 10 = 0 then 'FAIL' else 'CHARGE' end,
      case when g % 5 = 0 then ${WETH} else ${USDC} end, 10000000, 100000,
      case when g % 10 = 0 then 'InsufficientBalance' end, '0x0'
    from generate_series(0, ${ACTIVITY - 1}) g`;
  // Movements: per customer g (token by g % 5), created at c = start + g·300, MRR m.
  await sql`
    with c as (
      select g, '0x' || lpad(to_hex(g), 40, '0') as customer, case when g % 5 = 0 then ${WETH} else ${USDC} end as token,
        ${start} + g * 300 as t0, case when g % 5 = 0 then 21729910714285714 else 10145833 * (1 + g % 2) end::numeric as m
      from generate_series(1, ${ALLOCATIONS}) g
    ), ev as (
      select customer, token, t0, t0 as at, 'new' as kind, 0::numeric as b, m as a, null as reason, false as rec, g from c
      union all
      select customer, token, t0, t0 + (1 + g % 200) * ${DAY}, 'churn', m, 0, (array['cancelled_by_subscriber',
        'InsufficientBalance', 'AllowanceExpired', 'paused', 'blocked', 'InsufficientAllowance', 'not_charged'])[1 + g % 7],
        false, g from c where g % 5 in (1, 2)
      union all
      select customer, token, t0, t0 + (1 + g % 200) * ${DAY} + (1 + g % 40) * ${DAY}, 'reactivation', 0, m, null,
        (1 + g % 40) <= 30, g from c where g % 15 = 1
      union all
      select customer, token, t0, t0 + 3 * ${DAY}, 'expansion', m, m * 2, null, false, g from c where g % 20 in (3, 8, 13)
      union all
      select customer, token, t0, t0 + 3 * ${DAY}, 'contraction', m, m / 2, 'plan_change', false, g from c where g % 10 = 4
    )
    insert into mrr_movements (chain_id, id, merchant, customer, token, block_number, at, kind, mrr_before, mrr_after,
      reason, recovered, allocation_ids, first_at, active_since, prev_churn_at)
    select ${CHAIN}, 'mov_' || lpad(to_hex(g), 20, '0') || lpad(to_hex(at), 20, '0'), ${MERCHANT}, customer, token,
      (at - ${start}) / 12, at, kind, b, a, reason, rec, array[${CHAIN} || ':' || ${MODULE} || ':' || g], t0,
      case when kind = 'reactivation' then at else t0 end, 0
    from ev where at <= ${now}`;
  // The rollups, by the indexer's own statement over these movements.
  await addToRollups(sql as never, sql`m.chain_id = ${CHAIN}` as never, 1);
  await sql`analyze`;
}

const pct = (xs: number[], p: number) =>
  [...xs].sort((a, b) => a - b)[Math.min(xs.length - 1, Math.floor((xs.length * p) / 100))]!;

async function main() {
  const base = process.env.DATABASE_URL ?? "postgres://postgres@127.0.0.1:5432/postgres";
  const name = `bench_mrr_${Date.now().toString(36)}`;
  const admin = postgres(base, { max: 1, onnotice: () => {} });
  await admin.unsafe(`create database ${name}`);
  const url = new URL(base);
  url.pathname = `/${name}`;
  const db = await createDb({ url: url.toString(), max: 4 });
  try {
    await migrate(db.sql);
    const now = Math.floor(Date.now() / 1000);
    let t = performance.now();
    await seed(db.sql as unknown as postgres.Sql, now);
    const [{ n }] = await db.sql<{ n: string }[]>`select count(*) as n from mrr_movements`;
    console.log(
      `seeded ${ACTIVITY} activity records, ${ALLOCATIONS} allocations, ${n} movements in ${((performance.now() - t) / 1000).toFixed(1)} s`,
    );
    const config = loadConfig({
      CHAIN_ID: String(CHAIN),
      ADMIN_API_KEY: ADMIN_KEY,
      RATE_LIMIT_PER_MINUTE: "1000000000",
    });
    const app = createApp({ sql: db.sql, config, chains: await createChainRegistry(config) });
    const since = new Date((now - 365 * DAY) * 1000).toISOString();
    const routes: [string, string][] = [
      ["mrr, a year by day", `/v0/stats/${MERCHANT}/mrr?interval=day&since=${since}`],
      ["mrr, a year by week", `/v0/stats/${MERCHANT}/mrr?interval=week&since=${since}`],
      ["mrr, a year by month", `/v0/stats/${MERCHANT}/mrr?interval=month&since=${since}`],
      ["cohorts by month", `/v0/stats/${MERCHANT}/cohorts?interval=month&since=${since}`],
      ["cohorts by week", `/v0/stats/${MERCHANT}/cohorts?interval=week&since=${since}`],
      ["movements page (100)", `/v0/stats/${MERCHANT}/mrr/movements?limit=100`],
    ];
    console.log(`load average (1 min) at start: ${loadAverage()}`);
    for (const [label, path] of routes) {
      const ms: number[] = [];
      for (let i = 0; i < RUNS + 3; i++) {
        t = performance.now();
        const res = await app.handle(
          new Request(`http://localhost${path}`, { headers: { authorization: `Bearer ${ADMIN_KEY}` } }),
        );
        await res.text();
        if (res.status !== 200) throw new Error(`${path}: ${res.status}`);
        if (i >= 3) ms.push(performance.now() - t);
      }
      const f = (x: number) => x.toFixed(1).padStart(7);
      console.log(
        `${label.padEnd(24)} p50 ${f(pct(ms, 50))} ms  p95 ${f(pct(ms, 95))} ms  max ${f(Math.max(...ms))} ms`,
      );
    }
  } finally {
    await db.close();
    if (process.env.BENCH_KEEP === "1") console.log(`kept database ${name}`);
    else await admin.unsafe(`drop database if exists ${name} with (force)`);
    await admin.end();
  }
}

await main();
