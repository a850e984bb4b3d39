/**
 * At least once across `kill -9`: a process that indexes (writing events and their outbox row in each batch) and
 * dispatches is killed three times, mid-backfill and twice with deliveries in flight, then restarted. Afterwards every
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
    type Status = { indexedBlock?: string | null; pending?: number };
    const kills: { received: number; inflight: number; indexed: bigint }[] = [];
    const killWhen = async (ready: (s: Status) => boolean) => {
      const child = spawnIndexer(env);
      await child.waitFor((l) => !!l.status && ready(l.status as Status), 90_000);
      const status = child.lines.findLast((l) => l.status)?.status as Status | undefined;
      kills.push({
        received: receiver.delivered().size,
        inflight: receiver.inflight(),
        indexed: BigInt(status?.indexedBlock ?? -1),
      });
      await child.kill("SIGKILL");
    };
    // Mid-backfill, past half the chain: the outbox holds the ranges written so far (none is delivered before the
    // head), and the dead process's commits say the chain is catching up.
    const mid = (chain.startBlock + head) / 2n;
    await killWhen((s) => BigInt(s.indexedBlock ?? -1) >= mid && BigInt(s.indexedBlock ?? -1) < head);
    // Then twice while requests are in flight: their deliveries are pending, leased by the dying process.
    for (const atLeast of [5, 60])
      await killWhen(() => receiver.delivered().size >= atLeast && receiver.inflight() > 0);
    const child = spawnIndexer(env);
    await child.waitFor((l) => {
      const s = l.status as Status | undefined;
      return s?.indexedBlock === head.toString() && s.pending === 0;
    }, 120_000);
    await child.kill("SIGTERM");
    // Killed mid-backfill with nothing delivered yet, then twice with requests in flight.
    expect(kills[0]!.indexed).toBeLessThan(head);
    expect(kills[0]!.received).toBe(0);
    expect(kills.slice(1).every((k) => k.inflight > 0)).toBe(true);

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
