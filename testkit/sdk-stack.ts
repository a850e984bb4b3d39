/**
 * The whole service on a real anvil, for the merchant SDK's tests: the protocol, a merchant's module with plans 7
 * (1 h) and 8 (2 h), paid-up subscribers, and the service (API on a real port, indexer, webhook dispatcher) on a
 * fresh database. `endpoint(url)` registers a webhook endpoint of the merchant (every event type) and returns its
 * secret; `forward()` starts a stoppable proxy to the API (what "the API is down" stops).
 */
import type { Address } from "viem";
import { loadConfig } from "../src/common/config";
import { startService, type Service } from "../src/service";
import { createTestDb } from "./db";
import { createTestChain, type TestChain, type WalletName } from "./chain";
import { freePort } from "./cli";
import { moduleCall } from "./scenario";
import { endpointForAll, undelivered } from "./webhooks";

/** Plan ids of the stack's module, and their intervals (s). */
export const PLANS = { 7: 3_600, 8: 7_200 } as const;

/** A running stack. */
export type SdkStack = {
  chain: TestChain;
  service: Service;
  /** The API's base URL. */
  url: string;
  module: Address;
  merchant: string;
  /** Subscription id of each subscribed wallet (all on plan 7, each charged once). */
  subs: Map<WalletName, bigint>;
  /** Block timestamp of each subscriber's charge. */
  chargedAt: Map<WalletName, bigint>;
  /** Subscribes, funds and charges `name` on plan `planId`; returns the subscription id. */
  subscribe: (name: WalletName, planId?: number) => Promise<bigint>;
  /** Cancels `name`'s subscription as the subscriber. */
  cancel: (name: WalletName) => Promise<void>;
  /** Waits until the indexer has committed the chain's current head. */
  synced: () => Promise<void>;
  /** Waits until every written event's deliveries are created and sent (nothing queued or pending for 200 ms). */
  delivered: () => Promise<void>;
  /** A webhook endpoint of the merchant at `url`; returns its secret. */
  endpoint: (url: string) => Promise<string>;
  /** A proxy to the API that counts the requests it forwards and can be stopped. */
  forward: () => { url: string; requests: () => number; stop: () => void };
  stop: () => Promise<void>;
};

/** Starts the stack with `subscribers` paid up on plan 7. */
export async function startSdkStack(subscribers: WalletName[]): Promise<SdkStack> {
  const chain = await createTestChain();
  const token = await chain.deployToken();
  const module = await chain.createModule("merchant");
  for (const [planId, interval] of Object.entries(PLANS)) {
    await chain.createPlan("merchant", module, { planId: Number(planId), token, amount: 1_000n, interval });
  }
  const subs = new Map<WalletName, bigint>();
  const chargedAt = new Map<WalletName, bigint>();
  const subscribe = async (name: WalletName, planId = 7) => {
    await chain.fund(name, token, 1_000_000n);
    const id = await chain.subscribe(name, module, planId);
    const receipt = await chain.charge(module, id);
    subs.set(name, id);
    chargedAt.set(name, (await chain.publicClient.getBlock({ blockNumber: receipt.blockNumber })).timestamp);
    return id;
  };
  for (const name of subscribers) await subscribe(name);

  const port = await freePort();
  const config = loadConfig({
    RPC_URL: chain.rpcUrl,
    CHAIN_ID: String(chain.chainId),
    PROCESSOR_ADDRESS: chain.processor,
    START_BLOCK: chain.startBlock.toString(),
    ROLES: "api,indexer,webhooks",
    WEBHOOK_ALLOW_PRIVATE_URLS: "1",
    WEBHOOK_POLL_INTERVAL_MS: "50",
    WEBHOOK_RETRY_SCHEDULE: "1,1,1",
    POLL_INTERVAL_MS: "50",
    RATE_LIMIT_PER_MINUTE: "10000000",
    SIWE_DOMAIN: `127.0.0.1:${port}`,
    PORT: String(port),
    HOST: "127.0.0.1",
    LOG_LEVEL: "error",
  });
  const service = await startService(config, { db: await createTestDb(), log: () => {} });
  const synced = async () => {
    await service.indexer!.waitForBlock(await chain.publicClient.getBlockNumber({ cacheTime: 0 }));
  };
  await synced();
  const merchant = chain.address("merchant").toLowerCase();
  const delivered = async () => {
    const busy = async () => (await undelivered(service.db.sql)) > 0;
    for (let quiet = 0, tries = 0; quiet < 4; tries++) {
      if (tries > 300) throw new Error("webhook deliveries still pending after 15 s");
      quiet = (await busy()) ? 0 : quiet + 1;
      await Bun.sleep(50);
    }
  };

  return {
    chain,
    service,
    url: service.url!,
    module,
    merchant,
    subs,
    chargedAt,
    subscribe,
    cancel: async (name) => void (await moduleCall(chain, name, module, "cancel", [subs.get(name)!])),
    synced,
    delivered,
    endpoint: async (url) => (await endpointForAll(service.db.sql, merchant, url)).secret,
    forward: () => {
      let requests = 0;
      const server = Bun.serve({
        port: 0,
        hostname: "127.0.0.1",
        fetch: (req) => {
          requests++;
          const u = new URL(req.url);
          return fetch(service.url + u.pathname + u.search, { method: req.method, headers: req.headers });
        },
      });
      return { url: `http://127.0.0.1:${server.port}`, requests: () => requests, stop: () => void server.stop(true) };
    },
    stop: async () => {
      await service.stop();
      await chain.stop();
    },
  };
}
