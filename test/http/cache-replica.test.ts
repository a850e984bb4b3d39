/**
 * The check cache over a read replica (DATABASE_READ_URL) that applies commits a few hundred ms after the primary
 * (a real streaming replica with `recovery_min_apply_delay`): an answer loaded from the replica after a batch's
 * notification but before the replica applied that batch must not outlive the replica's catching up.
 */
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import postgres from "postgres";
import { createApp } from "../../src/http/app";
import { createApiCaches, type ApiCaches } from "../../src/http/caches";
import { createChainRegistry } from "../../src/chain/clients";
import { createDb, type Db } from "../../src/db/client";
import { migrate } from "../../src/db/migrate";
import { createNotifier } from "../../src/db/notify";
import { moveCursor } from "../../src/indexer/store";
import { until } from "../../testkit/cli";
import { startReplicaPair, type ReplicaPair } from "../../testkit/replica";
import { CHAIN_A, INDEXED_BLOCK_A, MOD, W, seedFixture } from "../../testkit/seed";
import { testConfig } from "../../testkit/app";

const LAG_MS = 400;

let pair: ReplicaPair;
let primary: Db;
let replica: Db;
let admin: postgres.Sql;
let caches: ApiCaches;

beforeAll(async () => {
  pair = await startReplicaPair();
  primary = await createDb({ url: pair.primaryUrl, max: 4 });
  await migrate(primary.sql);
  await seedFixture(primary.sql);
  replica = await createDb({ url: pair.replicaUrl, max: 4 });
  admin = postgres(pair.replicaUrl, { max: 1, onnotice: () => {} });
  await until("the replica to have the fixture", async () => {
    const rows = await replica.sql`select 1 from chains where chain_id = ${CHAIN_A}`;
    return rows.length > 0;
  });
  // Commits are applied LAG_MS after they were made on the primary.
  await admin.unsafe(`alter system set recovery_min_apply_delay = '${LAG_MS}ms'`);
  await admin.unsafe("select pg_reload_conf()");
}, 90_000);

afterAll(async () => {
  await caches?.stop();
  await admin?.end();
  await replica?.close();
  await primary?.close();
  await pair?.stop();
});

describe("check cache over a lagging replica (Postgres replica on both runs)", () => {
  test("an answer read from the replica before it applied the notified commit ends when the replica applies it", async () => {
    const notifier = createNotifier(primary);
    caches = createApiCaches({ notifier, sql: replica.sql, confirmEveryMs: 50 });
    await caches.generations.ready;
    const app = createApp({
      sql: primary.sql,
      readSql: replica.sql,
      config: testConfig(),
      chains: await createChainRegistry(testConfig()),
      notifier,
      caches,
    });
    const authorized = async () => {
      const res = await app.handle(
        new Request(`http://localhost/v0/auth/check?module_address=${MOD.a1}&wallet=${W.alice}&plan_ids=1`),
      );
      expect(res.status).toBe(200);
      return ((await res.json()) as { authorized: boolean }).authorized;
    };
    expect(await authorized()).toBe(true);
    const [row] = await primary.sql<{ indexed_hash: string; indexed_time: Date; head_block: string }[]>`
      select indexed_hash, indexed_time, head_block from chains where chain_id = ${CHAIN_A}`;
    // The indexer's batch: alice pauses, the cursor moves, then the commit is announced.
    const before = caches.generations.of(CHAIN_A);
    const stamp = await primary.sql.begin(async (tx) => {
      await tx`update subscriptions set paused = true where chain_id = ${CHAIN_A} and subscription_id = '1'`;
      const cursor = {
        block: BigInt(INDEXED_BLOCK_A + 1),
        hash: row!.indexed_hash,
        time: row!.indexed_time.getTime() / 1000,
      };
      return moveCursor(tx, CHAIN_A, cursor, BigInt(row!.head_block));
    });
    const committed = performance.now();
    await notifier.publish({
      chainId: CHAIN_A,
      fromBlock: `${INDEXED_BLOCK_A + 1}`,
      toBlock: `${INDEXED_BLOCK_A + 1}`,
      reorg: false,
      stamp,
    });
    await until("the notification", async () => caches.generations.of(CHAIN_A) > before);
    // Loaded under the new generation from a replica that has not applied the batch yet: the old answer.
    expect(await authorized()).toBe(true);
    expect(performance.now() - committed).toBeLessThan(LAG_MS);
    const paused = async () =>
      (await replica.sql`select paused from subscriptions where chain_id = ${CHAIN_A} and subscription_id = '1'`)[0]
        ?.paused === true;
    expect(await paused()).toBe(false);
    await until("the replica to apply the batch", paused);
    // Within a few polls of the replica applying it, the stale answer is gone (today's max age is 2 s).
    const applied = performance.now();
    await until("the paused answer", async () => (await authorized()) === false, 1500);
    expect(performance.now() - applied).toBeLessThan(1000);
  }, 60_000);
});
