/** The `webhook.test` delivery: one event written and sent at once, for the API's and the CLI's `test`. */
import { randomBytes } from "node:crypto";
import type { Sql } from "../db/client";
import { toEnvelope } from "../events/envelope";
import { activeSecrets, leaseMs, type DispatcherConfig } from "./dispatcher";
import { randomId, toDelivery, type DeliveryObject } from "./endpoints";
import { recordOutcomes, type Claimed } from "./queries";
import { sendAttempt } from "./send";

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
  const [claimed] = await sql.begin(async (tx) => {
    await tx`
      insert into merchant_events (id, chain_id, merchant, type, block_number, log_index, ts, data)
      select ${eventId}, ${endpoint.chainId}, ${endpoint.merchant}, 'webhook.test',
        coalesce((select indexed_block from chains where chain_id = ${endpoint.chainId}), 0), 2147483647,
        date_trunc('milliseconds', clock_timestamp()), ${tx.json({ object: { endpoint_id: endpoint.id } })}`;
    return tx<Claimed[]>`
      insert into webhook_deliveries (id, endpoint_id, event_seq, event_id, event_type, origin, attempts, lease_until)
      select ${deliveryId}, ${endpoint.id}, e.seq, e.id, e.type, 'test', 1,
        clock_timestamp() + ${leaseMs(config)} * interval '1 millisecond'
      from merchant_events e where e.id = ${eventId}
      returning id as delivery_id, attempts, origin,
        (select url from webhook_endpoints where id = ${endpoint.id}) as url,
        (select secret from webhook_endpoints where id = ${endpoint.id}) as secret,
        (select previous_secret from webhook_endpoints where id = ${endpoint.id}) as previous_secret,
        (select previous_secret_expires_at from webhook_endpoints where id = ${endpoint.id}) as previous_secret_expires_at`;
  });
  const [event] = await sql<
    Claimed[]
  >`select seq, id, chain_id, merchant, type, block_number, ts, data from merchant_events where id = ${eventId}`;
  const c = { ...claimed!, ...event! };
  const result = await sendAttempt(
    c.url,
    eventId,
    JSON.stringify(toEnvelope(c)),
    activeSecrets(c, config.secretKey),
    config,
  );
  await recordOutcomes(sql, [{ deliveryId, attempt: 1, ...result, retryInS: null }], config.disableAfterS);
  const [row] = await sql<Parameters<typeof toDelivery>[0][]>`
    select id, event_id, event_type, attempts, status, response_status, error, duration_ms, created_at, last_attempt_at,
      next_attempt_at from webhook_deliveries where id = ${deliveryId}`;
  return toDelivery(row!);
}
