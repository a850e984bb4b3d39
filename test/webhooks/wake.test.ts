/**
 * The dispatcher learns of new events from the indexer's committed batches (LISTEN/NOTIFY on Postgres, in-process on
 * PGlite), not from its poll: with a poll of an hour, a charge mined while the service sits idle at the head still
 * reaches the receiver, with no call to the dispatcher's `wake` from the test. This is what keeps block → webhook
 * within a poll of block → indexed.
 */
import { afterAll, beforeAll, expect, setDefaultTimeout, test } from "bun:test";
import type { Service } from "../../src/service";
import { createTestChain, type TestChain } from "../../testkit/chain";
import { until } from "../../testkit/cli";
import { testDbKind } from "../../testkit/db";
import { oneChargedSubscription } from "../../testkit/scenario";
import { startChainService } from "../../testkit/service";
import { endpointForAll, startReceiver, type Receiver } from "../../testkit/webhooks";

setDefaultTimeout(60_000);

let chain: TestChain;
let service: Service;
let receiver: Receiver;
let sub: Awaited<ReturnType<typeof oneChargedSubscription>>;

beforeAll(async () => {
  chain = await createTestChain();
  sub = await oneChargedSubscription(chain);
  receiver = startReceiver();
  service = await startChainService(chain, {
    ROLES: "indexer,webhooks",
    WEBHOOK_ALLOW_PRIVATE_URLS: "1",
    // Only a wake can make it drain the outbox again within the test.
    WEBHOOK_POLL_INTERVAL_MS: "3600000",
  });
});

afterAll(async () => {
  await service?.stop();
  await receiver?.stop();
  await chain?.stop();
});

const types = () => receiver.received.map((r) => (JSON.parse(r.body) as { type: string }).type);

test(`a committed batch wakes the dispatcher (${testDbKind}): the webhook arrives though its poll is an hour`, async () => {
  await service.indexer!.waitForBlock(await chain.publicClient.getBlockNumber({ cacheTime: 0 }));
  // Made after the backfill's events were queued: none of them is for it.
  await endpointForAll(service.db.sql, chain.address("merchant").toLowerCase(), receiver.url);
  // The dispatcher has made its first pass and sleeps on its hour.
  await until("the dispatcher's first pass", async () => service.webhooks!.passes() >= 1, 10_000);
  const passes = service.webhooks!.passes();
  expect(receiver.received.length).toBe(0);

  await chain.testClient.increaseTime({ seconds: 3600 });
  await chain.charge(sub.module, sub.a);
  await until("the charge's webhook", async () => types().includes("charge.succeeded"), 30_000);
  expect(service.webhooks!.passes()).toBeGreaterThan(passes);
});
