/** The fan-out of new events to endpoints, called as the indexer's transaction calls it. */
import { afterAll, beforeAll, expect, test } from "bun:test";
import type { Db } from "../../src/db/client";
import { createEndpoint } from "../../src/webhooks/endpoints";
import { fanOut } from "../../src/webhooks/fanout";
import { createTestDb, testDbKind } from "../../testkit/db";

const MERCHANT = "0x00000000000000000000000000000000000000f0";
let db: Db;

beforeAll(async () => {
  db = await createTestDb();
}, 60_000);
afterAll(async () => {
  await db?.close();
});

/** Writes one event per chain and fans each chain's range out, as each chain's indexer batch does. */
async function emit(chains: number[]): Promise<Record<number, string>> {
  const ids: Record<number, string> = {};
  for (const chainId of chains) {
    await db.sql.begin(async (tx) => {
      const id = `evt_${crypto.randomUUID().replaceAll("-", "").padEnd(40, "0")}`;
      ids[chainId] = id;
      const [row] = await tx<{ seq: string }[]>`
        insert into merchant_events (id, chain_id, merchant, type, block_number, log_index, ts, data)
        values (${id}, ${chainId}, ${MERCHANT}, 'charge.succeeded', 1, 0, now(), '{"object":{}}')
        returning seq::text`;
      const seq = BigInt(row!.seq);
      await fanOut(tx, { chainId, fromSeq: seq, toSeq: seq, withdrawals: false, merchants: [MERCHANT] });
    });
  }
  return ids;
}

test(`an endpoint with a chain_id gets only that chain's events; one without gets every chain's (${testDbKind})`, async () => {
  const endpoint = (chainId: number | null) =>
    createEndpoint(
      db.sql,
      { merchant: MERCHANT, url: "https://example.com/hook", eventTypes: ["*"], description: null, chainId },
      undefined,
    );
  const onTen = await endpoint(10);
  const everyChain = await endpoint(null);
  expect(onTen.chain_id).toBe(10);
  expect(everyChain.chain_id).toBeNull();
  const ids = await emit([31337, 10]);
  const got = async (endpointId: string) =>
    (
      await db.sql<{ event_id: string }[]>`
        select event_id from webhook_deliveries where endpoint_id = ${endpointId} order by event_seq`
    ).map((r) => r.event_id);
  expect(await got(onTen.id)).toEqual([ids[10]!]);
  expect(await got(everyChain.id)).toEqual([ids[31337]!, ids[10]!]);
});
