/**
 * `bun run status` beside a running service (on PGlite through its control endpoint, on Postgres from the database
 * itself): a healthy service exits 0 with the chain caught up, the keeper funded and the webhook backlog; once the
 * chain stops, it exits 1 naming the stalled chain (and a disabled endpoint).
 */
import { afterAll, beforeAll, expect, test } from "bun:test";
import { mkdtempSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { generatePrivateKey, privateKeyToAccount } from "viem/accounts";
import { loadConfig } from "../../src/common/config";
import type { Db } from "../../src/db/client";
import { CHARGE_GAS, gatherStatus, type StatusReport } from "../../src/http/features/control/status";
import { startService, type Service } from "../../src/service";
import { keys } from "../../testkit/accounts";
import { createTestChain, type TestChain } from "../../testkit/chain";
import { freePort, runCommand } from "../../testkit/cli";
import { createTestDb, testDbKind } from "../../testkit/db";
import { runScenario } from "../../testkit/scenario";

let chain: TestChain;
let service: Service;
let env: Record<string, string>;
const keeper = privateKeyToAccount(keys.keeper as `0x${string}`).address.toLowerCase();

const status = (...args: string[]) => runCommand("src/cli/status.ts", env, ...args);

beforeAll(async () => {
  chain = await createTestChain();
  await runScenario(chain);
  const db: Db | undefined = testDbKind === "postgres" ? await createTestDb() : undefined;
  env = {
    RPC_URL: chain.rpcUrl,
    CHAIN_ID: String(chain.chainId),
    PROCESSOR_ADDRESS: chain.processor,
    START_BLOCK: chain.startBlock.toString(),
    KEEPER_PRIVATE_KEY: keys.keeper,
    POLL_INTERVAL_MS: "100",
    ...(db ? { DATABASE_URL: db.url } : { DATA_DIR: mkdtempSync(join(tmpdir(), "status-")) }),
  };
  const config = loadConfig({
    ...env,
    ROLES: "api,indexer,keeper,webhooks",
    PORT: String(await freePort()),
    HOST: "127.0.0.1",
    SIWE_DOMAIN: "localhost",
  });
  service = await startService(config, { db, log: () => {} });
  await service.indexer!.waitForBlock(await chain.publicClient.getBlockNumber({ cacheTime: 0 }), 60_000);
}, 120_000);

afterAll(async () => {
  await service?.stop();
  await chain?.stop().catch(() => {});
});

test("a healthy service: the chain caught up, the keeper funded, exit 0", async () => {
  const head = await chain.publicClient.getBlockNumber({ cacheTime: 0 });
  const charges = async () =>
    Number(
      (
        await service.db.sql<{ n: string }[]>`select count(*) as n from activity
          where lower(keeper) = ${keeper} and block_time >= now() - interval '1 hour'`
      )[0]!.n,
    );
  const before = await charges();
  const res = await status("--json");
  const after = await charges();
  expect({ code: res.code, stderr: res.stderr }).toEqual({ code: 0, stderr: "" });
  const report = JSON.parse(res.stdout) as StatusReport;
  expect(report.attention).toEqual([]);
  expect(report.chains).toHaveLength(1);
  // The keeper still charges: the chain may have moved on since.
  expect(BigInt(report.chains[0]!.indexed_block!)).toBeGreaterThanOrEqual(head);
  expect(report.chains[0]).toMatchObject({
    chain_id: chain.chainId,
    lag_blocks: "0",
    progress: 1,
    eta_s: 0,
    last_reorg_at: null,
  });
  expect(report.keeper?.address).toBe(keeper);
  const k = report.keeper!.chains[0]!;
  expect(k.chain_id).toBe(chain.chainId);
  expect(before).toBeGreaterThan(0);
  expect(k.charges_sent_1h).toBeGreaterThanOrEqual(before);
  expect(k.charges_sent_1h).toBeLessThanOrEqual(after);
  expect(k.charges_failed_1h).toBeGreaterThan(0); // the scenario's failing charges
  expect(BigInt(k.balance_wei!)).toBeGreaterThan(10n ** 21n); // anvil's 10,000 ETH, less some gas
  expect(BigInt(k.charges_funded!)).toBeGreaterThan(10n);
  // The service's renewal loop may or may not have judged the scenario yet (test/cli/status-renewals.test.ts pins it).
  for (const c of report.renewals_at_risk ?? []) expect(c.at_risk).toBeLessThanOrEqual(c.due);
  expect(report.webhooks).toMatchObject({ endpoints: 0, pending_deliveries: 0, oldest_pending_age_s: null });

  const text = await status();
  expect(text.code).toBe(0);
  expect(text.stdout).toMatch(
    new RegExp(`\n  ${chain.chainId}  block [\\d,]+ of [\\d,]+ · 0 behind · caught up · head seen`),
  );
  expect(text.stdout).toMatch(
    /balance \d+\.\d{1,6} \(native\) \([\d,]+ charges\) · last hour: \d+ charges sent, \d+ failed/,
  );
  expect(text.stdout).toContain(`keeper  ${keeper}`);
  expect(text.stdout).toMatch(
    /\nrenewals at risk( {2}not computed yet| {2}none due|\n {2}\d+ {2}[\d,]+ of [\d,]+ due renewals)/,
  );
  expect(text.stdout).toContain("nothing needs attention");
  // The keeper's key never leaves the process.
  expect(text.stdout + res.stdout).not.toContain(keys.keeper.slice(2));
}, 60_000);

test("a keeper whose balance pays for fewer than 10 charges is out of gas", async () => {
  const poor = generatePrivateKey();
  const address = privateKeyToAccount(poor).address;
  const gasPrice = await chain.publicClient.getGasPrice();
  // Enough for 3 charges at today's gas price.
  await chain.testClient.setBalance({ address, value: 3n * CHARGE_GAS * gasPrice + 1n });
  const report = await gatherStatus(service.db.sql, loadConfig({ ...env, KEEPER_PRIVATE_KEY: poor }));
  // The gas price may move a little between the two reads (the keeper still mines blocks).
  expect(Number(report.keeper!.chains[0]!.charges_funded)).toBeWithin(2, 5);
  expect(report.attention).toEqual([
    expect.stringMatching(new RegExp(`^keeper out of gas on chain ${chain.chainId}: .* pays for [234] charges`)),
  ]);
});

test("a stopped chain and a disabled endpoint: exit 1, each named", async () => {
  await service.db.sql`insert into webhook_endpoints (id, merchant, url, event_types, enabled, disabled_reason, secret)
    values ('we_status_test', ${keeper}, 'https://hooks.example.com/x?token=abc', '{"*"}', false,
      'every delivery failed for 5 days', 'whsec_x')`;
  await chain.anvil.stop();
  const stoppedAt = Date.now();
  // The indexer cannot see the head any more; after the staleness window (30 s) the chain counts as stalled.
  await Bun.sleep(Math.max(0, 31_500 - (Date.now() - stoppedAt)));
  const res = await status();
  expect(res.code).toBe(1);
  expect(res.stdout).toContain("needs attention:");
  expect(res.stdout).toMatch(new RegExp(`✗ chain ${chain.chainId} stalled: the indexer last saw its head \\d+ s ago`));
  expect(res.stdout).toContain("✗ webhook endpoint we_status_test (hooks.example.com) is disabled: every delivery");
  expect(res.stdout).toContain(`✗ keeper balance on chain ${chain.chainId} unknown`);
  expect(res.stdout).not.toContain("token=abc");
  const json = JSON.parse((await status("--json")).stdout) as StatusReport;
  expect(json.attention.some((a) => a.startsWith(`chain ${chain.chainId} stalled`))).toBe(true);
}, 90_000);
