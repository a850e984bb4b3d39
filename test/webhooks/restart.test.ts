/**
 * At least once across `kill -9`: a process that indexes (writing events and deliveries in each batch) and
 * dispatches is killed three times, mid-backfill and with deliveries in flight, then restarted. Afterwards every
 * event of the log reached the receiver, verified, and the log equals a fresh index's.
 */
import { afterAll, beforeAll, expect, test } from "bun:test";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { Webhook } from "standardwebhooks";
import { createDb, type Db } from "../../src/db/client";
import { migrate } from "../../src/db/migrate";
import { eventsHook } from "../../src/events/hook";
import { createTestChain, type TestChain } from "../../testkit/chain";
import { createTestDb, testDbKind } from "../../testkit/db";
import { indexOnce } from "../../testkit/indexer";
import { backfillEnv, spawnIndexer } from "../../testkit/indexer-child";
import { runLoad, setupLoad } from "../../testkit/load";
import { runScenario } from "../../testkit/scenario";
import { endpointForAll, startReceiver, type Receiver } from "../../testkit/webhooks";

const MERCHANT = "0x70997970c51812dc3a010c7d01b50e0d17dc79c8";

let chain: TestChain;
let receiver: Receiver;
let head: bigint;

beforeAll(async () => {
  chain = await createTestChain();
  await runScenario(chain);
  const load = await setupLoad(chain, { successSubs: 8 });
  await runLoad(chain, load, { rounds: 12, failures: 10 });
  head = await chain.publicClient.getBlockNumber({ cacheTime: 0 });
  receiver = startReceiver();
}, 120_000);

afterAll(async () => {
  await receiver?.stop();
  await chain?.stop();
});

/** Events whose id depends on the chain only (idle expiries are dated by the block indexed when they were found). */
const chainEvents = (db: Db) =>
  db.sql<{ id: string; type: string }[]>`
    select id, type from event_log where log_index <> 2147483647 order by id`;

test(`kill -9 while indexing and delivering (${testDbKind}), restart: every event delivered, the log as a fresh index's`, async () => {
  const server = testDbKind === "postgres" ? await createTestDb() : null;
  const dir = server ? null : mkdtempSync(join(tmpdir(), "webhooks-restart-"));
  const open = async () => server ?? (await createDb({ dataDir: dir! }));
  const close = async (db: Db) => {
    if (!server) await db.close();
  };
  let secret: string;
  {
    const db = await open();
    await migrate(db.sql);
    secret = (await endpointForAll(db.sql, MERCHANT, receiver.url)).secret;
    await close(db);
  }
  // Slow answers keep deliveries in flight when the process dies.
  receiver.respond(() => ({ status: 200, delayMs: 25 }));
  const env = { ...backfillEnv(chain, 2, server ? { url: server.url } : { dir: dir! }), WEBHOOKS: "1" };
  const fresh = await createTestDb();
  try {
    const kills: { received: number; inflight: number; indexed: bigint }[] = [];
    for (const atLeast of [5, 40, 90]) {
      const child = spawnIndexer(env);
      // Killed while requests are in flight: their deliveries are pending, leased by the dying process.
      await child.waitFor(() => receiver.delivered().size >= atLeast && receiver.inflight() > 0, 90_000);
      const status = child.lines.findLast((l) => l.status)?.status as { indexedBlock: string | null } | undefined;
      kills.push({
        received: receiver.delivered().size,
        inflight: receiver.inflight(),
        indexed: BigInt(status?.indexedBlock ?? -1),
      });
      await child.kill("SIGKILL");
    }
    const child = spawnIndexer(env);
    type Status = { indexedBlock?: string; pending?: number };
    await child.waitFor((l) => {
      const s = l.status as Status | undefined;
      return s?.indexedBlock === head.toString() && s.pending === 0;
    }, 120_000);
    await child.kill("SIGTERM");
    // Killed mid-backfill once at least, and with requests in flight every time.
    expect(kills.some((k) => k.indexed < head)).toBe(true);
    expect(kills.every((k) => k.inflight > 0)).toBe(true);

    const db = await open();
    try {
      const log = await db.sql<{ id: string }[]>`select id from event_log where merchant = ${MERCHANT}`;
      expect(log.length).toBeGreaterThan(100);
      expect(kills.at(-1)!.received).toBeLessThan(log.length);
      expect([...receiver.delivered()].sort()).toEqual(log.map((e) => e.id).sort());
      const wh = new Webhook(secret);
      for (const r of receiver.received) expect((wh.verify(r.body, r.headers) as { id: string }).id).toBe(r.id);
      const [{ n }] = await db.sql<{ n: number }[]>`
        select count(*)::int as n from webhook_deliveries where status <> 'succeeded'`;
      expect(n).toBe(0);

      await indexOnce(fresh.sql, chain.rpcUrl, chain.processor, {
        db: fresh,
        startBlock: chain.startBlock,
        hooks: [eventsHook()],
      });
      expect(await chainEvents(db)).toEqual(await chainEvents(fresh));
    } finally {
      await close(db);
    }
  } finally {
    await fresh.close();
    await server?.close();
    if (dir) rmSync(dir, { recursive: true, force: true });
  }
}, 300_000);
