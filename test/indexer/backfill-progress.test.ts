/**
 * A backfill against anvil through the test suite's RPC proxy, throttled (a small `eth_getLogs` range limit and a
 * delay per call): the progress lines' percent only grows, a line comes at each 10 %, the ETA at the halfway mark
 * is within 2× of the time it really took, one line says when it caught up, and /readyz-facing columns are written.
 */
import { afterAll, beforeAll, expect, test } from "bun:test";
import { publicClientFor } from "../../src/chain/clients";
import type { Logger } from "../../src/common/log";
import type { Db } from "../../src/db/client";
import { SYNC_LAG_BLOCKS } from "../../src/domain/progress";
import { readiness } from "../../src/http/features/health/service";
import { createTestChain, type TestChain } from "../../testkit/chain";
import { testIndexer } from "../../testkit/indexer";
import { createTestDb } from "../../testkit/db";
import { startRpcProxy, type RpcProxy } from "../../testkit/rpc-proxy";
import { runScenario } from "../../testkit/scenario";

let chain: TestChain;
let proxy: RpcProxy;
let db: Db;

beforeAll(async () => {
  chain = await createTestChain();
  await runScenario(chain);
  for (let i = 0; i < 4; i++) await chain.testClient.mine({ blocks: 200 });
  proxy = startRpcProxy(chain.rpcUrl, { maxRange: 8, maxDelayMs: 40 });
  db = await createTestDb();
}, 120_000);

afterAll(async () => {
  proxy?.stop();
  await db?.close();
  await chain?.stop();
});

type Line = { at: number; msg: string; fields: Record<string, unknown> };

test("a throttled backfill logs growing progress, an ETA within 2x at halfway, and when it caught up", async () => {
  const lines: Line[] = [];
  const log: Logger = (level, msg, fields = {}) => {
    if (level !== "debug") lines.push({ at: Date.now(), msg, fields });
  };
  const head = await chain.publicClient.getBlockNumber({ cacheTime: 0 });
  const indexer = testIndexer(db, chain, {
    client: publicClientFor(proxy.url, 2_000),
    pollMs: 50,
    log,
    tuning: { progressIntervalMs: 1_000, initialRange: 8, retry: { attempts: 3, baseMs: 10, maxMs: 50 } },
  });
  // What /readyz says meanwhile (any API process reads the same row).
  const ready: { progress: number | null; eta_s: number | null }[] = [];
  const sampler = setInterval(async () => {
    const verdict = await readiness(db.sql, { READY_MAX_LAG_BLOCKS: 20, POLL_INTERVAL_MS: 50 }, chain.chainId).catch(
      () => null,
    );
    const c = verdict?.chains.find((x) => x.chain_id === chain.chainId);
    if (c) ready.push({ progress: c.progress, eta_s: c.eta_s });
  }, 150);
  try {
    await indexer.start();
    await indexer.waitForBlock(head, 120_000);
  } finally {
    clearInterval(sampler);
    await indexer.stop();
  }

  const started = lines.filter((l) => l.msg.startsWith("indexer backfill started"));
  const progress = lines.filter((l) => l.msg.startsWith("indexer backfill:"));
  const caught = lines.filter((l) => l.msg.startsWith("indexer caught up"));
  expect(started.length).toBe(1);
  expect(caught.length).toBe(1);
  const total = head - chain.startBlock + 1n;
  // "Caught up" is within a few blocks (SYNC_LAG_BLOCKS) of the head.
  const at = caught[0]!.fields.indexedBlock as bigint;
  expect(caught[0]!.fields.chainId).toBe(chain.chainId);
  expect(head - at).toBeLessThanOrEqual(SYNC_LAG_BLOCKS);
  expect(caught[0]!.fields.blocks).toBe(at - chain.startBlock + 1n);
  expect(caught[0]!.fields.events as number).toBeGreaterThan(0);
  expect(caught[0]!.fields.tookS as number).toBeGreaterThan(1);

  // The percent only grows, and every 10 % from the first line to the last has its line.
  const percents = progress.map((l) => l.fields.percent as number);
  expect(progress.length).toBeGreaterThanOrEqual(9);
  for (let i = 1; i < percents.length; i++) expect(percents[i]!).toBeGreaterThanOrEqual(percents[i - 1]!);
  for (let d = 10; d < 100; d += 10) expect(percents.some((p) => p >= d && p < d + 10)).toBe(true);
  for (const l of progress) {
    expect(l.fields.blocksTotal).toBe(total);
    const done = Number(l.fields.blocksDone);
    expect(Math.abs((done / Number(total)) * 100 - (l.fields.percent as number))).toBeLessThanOrEqual(0.05);
    expect(l.fields.blocksPerSec as number).toBeGreaterThan(0);
    expect(l.msg).toMatch(/^indexer backfill: \d+(\.\d)? % \(\d+ of \d+ blocks\), ETA (\d+ s|\d+ min|unknown)/);
  }

  // At the halfway mark, the ETA is within 2x of the time the rest really took.
  const half = progress.reduce((a, b) =>
    Math.abs((a.fields.percent as number) - 50) <= Math.abs((b.fields.percent as number) - 50) ? a : b,
  );
  const real = (caught[0]!.at - half.at) / 1000;
  const eta = half.fields.etaS as number;
  console.log(`halfway: ${half.fields.percent} %, ETA ${eta} s, really ${real.toFixed(1)} s, ${progress.length} lines`);
  expect(real).toBeGreaterThan(1);
  expect(eta).toBeGreaterThanOrEqual(real / 2);
  expect(eta).toBeLessThanOrEqual(real * 2);

  // /readyz carried the same: a growing progress, an ETA while behind, 1 and 0 once caught up.
  const seen = ready.map((r) => r.progress ?? 0);
  for (let i = 1; i < seen.length; i++) expect(seen[i]!).toBeGreaterThanOrEqual(seen[i - 1]!);
  expect(ready.some((r) => r.progress! > 0 && r.progress! < 1 && r.eta_s !== null && r.eta_s > 0)).toBe(true);
  const final = await readiness(db.sql, { READY_MAX_LAG_BLOCKS: 20, POLL_INTERVAL_MS: 50 }, chain.chainId);
  expect(final.chains[0]).toMatchObject({ progress: 1, eta_s: 0 });
});
