/**
 * Median time of the read routes, in-process (`app.handle`, no network), over a database that an indexer filled:
 * the merchant with the most activity, each route 15 times (the first five plans of a prepared statement are made for
 * its values, later ones may be a cached generic plan, so both are in the median). A database is left as it is but
 * for pending migrations with `--migrate`.
 *
 *   bun run bench/backfill.ts --state <state.json> --rounds 1 --keep <checkout>     # prints "kept database <name>"
 *   DATABASE_URL=postgres://postgres@127.0.0.1:5432/<name> bun run bench/routes.ts
 *   bun run bench/routes.ts --data-dir <a PGlite data directory> [--migrate]
 */
import { createChainRegistry } from "../src/chain/clients";
import { loadConfig } from "../src/common/config";
import { createDb } from "../src/db/client";
import { migrate } from "../src/db/migrate";
import { createNotifier } from "../src/db/notify";
import { createApp } from "../src/http/app";

const args = process.argv.slice(2);
const dataDir = args.includes("--data-dir") ? args[args.indexOf("--data-dir") + 1] : undefined;
const url = process.env.DATABASE_URL;
if (!url && !dataDir) throw new Error("set DATABASE_URL or pass --data-dir");
const db = url ? await createDb({ url }) : await createDb({ dataDir });
const sql = db.sql;
if (args.includes("--migrate")) console.log("migrations applied:", await migrate(sql));

const ADMIN = "bench-admin-key-0123456789abcdef";
const config = loadConfig({ CHAIN_ID: "31337", ADMIN_API_KEY: ADMIN, RATE_LIMIT_PER_MINUTE: "100000000" });
const app = createApp({ sql, config, chains: await createChainRegistry(config), notifier: createNotifier(db) });

const [top] = await sql<{ merchant: string; n: number }[]>`
  select merchant, count(*)::int as n from activity group by 1 order by 2 desc limit 1`;
if (!top) throw new Error("the database holds no activity");
const M = top.merchant;
const [sub] = await sql<{ id: string }[]>`
  select subscription_id::text as id from subscriptions where merchant = ${M} order by subscription_id limit 1`;
const [events] = await sql<{ n: number }[]>`select count(*)::int as n from event_log where merchant = ${M}`;
console.log(`merchant ${M}: ${top.n} activity records, ${events!.n} events`);

const paths = [
  `/v0/subscriptions/${M}?limit=100`,
  `/v0/subscriptions/${M}?status=ACTIVE&limit=100`,
  `/v0/activity/${M}?limit=100`,
  `/v0/activity/${M}?type=FAIL&limit=100`,
  `/v0/activity/${M}?subscription_id=${sub?.id ?? "1"}&limit=100`,
  `/v0/events/${M}?limit=100`,
  `/v0/events/${M}?order=asc&limit=100`,
  `/v0/events/${M}?limit=1000`,
  `/v0/events/${M}?type=charge.failed&limit=100`,
  `/v0/events/${M}?type=credit.refilled&order=asc&limit=100`,
  `/v0/events/${M}?type=subscription.status_changed&limit=100`,
  `/v0/events/${M}?type=charge.failed,subscription.created&limit=100`,
  `/v0/events/${M}?type=subscription.renewal_at_risk&limit=100`,
  `/v0/stats/${M}`,
  `/v0/renewals/${M}?limit=100`,
];
for (const path of paths) {
  const ms: number[] = [];
  let status = 0;
  for (let i = 0; i < 15; i++) {
    const start = performance.now();
    const res = await app.handle(
      new Request(`http://localhost${path}`, { headers: { authorization: `Bearer ${ADMIN}` } }),
    );
    await res.arrayBuffer();
    status = res.status;
    ms.push(performance.now() - start);
  }
  ms.sort((a, b) => a - b);
  console.log(`${status} ${ms[7]!.toFixed(1).padStart(7)} ms  ${path.replace(M, ":merchant")}`);
}
await db.close();
process.exit(0);
