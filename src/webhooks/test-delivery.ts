/** The `webhook.test` delivery: one event written and sent at once, for the API's and the CLI's `test`. */
import { randomBytes } from "node:crypto";
import type { Sql } from "../db/client";
import { toEnvelope } from "../events/envelope";
import { activeSecrets, leaseMs, type DispatcherConfig } from "./dispatcher";
import { getDelivery, randomId, type DeliveryObject } from "./endpoints";
import { claimedById, recordOutcomes } from "./queries";
import { describeError } from "../common/errors";
import { SecretKeyError } from "./errors";
import { sendAttempt, type AttemptResult } from "./send";

/**
 * `POST …/test`: writes a `webhook.test` event, sends it to the endpoint at once (one attempt, no retries) and
 * returns that attempt.
 */
export async function sendTest(
  sql: Sql,
  endpoint: { id: string; merchant: string; chainId: number },
  config: DispatcherConfig,
): Promise<DeliveryObject> {
  const eventId = `evt_${randomBytes(20).toString("hex")}`;
  const deliveryId = randomId("wd_");
  await sql.begin(async (tx) => {
    await tx`
      insert into merchant_events (id, chain_id, merchant, type, block_number, log_index, ts, data)
      select ${eventId}, ${endpoint.chainId}, ${endpoint.merchant}, 'webhook.test',
        coalesce((select indexed_block from chains where chain_id = ${endpoint.chainId}), 0), 2147483647,
        date_trunc('milliseconds', clock_timestamp()), ${tx.json({ object: { endpoint_id: endpoint.id } })}`;
    // Inserted as claimed (attempt 1, leased): no dispatcher sends it too.
    await tx`
      insert into webhook_deliveries (id, endpoint_id, event_seq, event_id, event_type, origin, attempts, lease_until)
      select ${deliveryId}, ${endpoint.id}, e.seq, e.id, e.type, 'test', 1,
        clock_timestamp() + ${leaseMs(config)} * interval '1 millisecond'
      from merchant_events e where e.id = ${eventId}`;
  });
  const c = (await claimedById(sql, deliveryId))!;
  let result: AttemptResult;
  try {
    result = await sendAttempt(
      c.url,
      eventId,
      JSON.stringify(toEnvelope(c)),
      activeSecrets(c, config.secretKey),
      config,
    );
  } catch (err) {
    // A secret that does not open (another or no WEBHOOK_SECRET_KEY): nothing sent, the attempt says why.
    if (!(err instanceof SecretKeyError)) throw err;
    result = { ok: false, outcome: "not_sent", status: null, error: describeError(err, 300), durationMs: 0 };
  }
  await recordOutcomes(sql, [{ deliveryId, attempt: 1, ...result, retryInS: null }], config.disableAfterS);
  return (await getDelivery(sql, deliveryId))!;
}
