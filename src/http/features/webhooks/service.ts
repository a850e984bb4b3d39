/** Input rules of the webhook routes and the `test` delivery. */
import { randomBytes } from "node:crypto";
import type { Sql } from "../../../db/client";
import { InvalidParameterError } from "../../errors";
import { EVENT_TYPES } from "../events/model";
import { resolveDestination } from "../../../webhooks/destination";
import { UnsafeDestinationError } from "../../../webhooks/errors";
import { randomId, toDelivery, type DeliveryObject } from "../../../webhooks/endpoints";
import { activeSecrets, type DispatcherConfig } from "../../../webhooks/dispatcher";
import { recordOutcomes, type Claimed } from "../../../webhooks/queries";
import { sendAttempt } from "../../../webhooks/send";
import { toEnvelope } from "../../../events/envelope";

/** A JSON body as an object whose every field is one of `allowed` (else a 400 naming the field). */
export function bodyObject(body: unknown, allowed: readonly string[]): Record<string, unknown> {
  if (body === undefined || body === null || body === "") return {};
  if (typeof body !== "object" || Array.isArray(body)) {
    throw new InvalidParameterError("body", "the body must be a JSON object");
  }
  for (const k of Object.keys(body)) {
    if (!allowed.includes(k)) throw new InvalidParameterError(k, `unknown field ${k}; allowed: ${allowed.join(", ")}`);
  }
  return body as Record<string, unknown>;
}

/** A string field (`maxLength` characters at most); undefined when absent. */
export function stringField(b: Record<string, unknown>, name: string, maxLength: number): string | undefined {
  const v = b[name];
  if (v === undefined) return undefined;
  if (typeof v !== "string" || v.length > maxLength) {
    throw new InvalidParameterError(name, `${name} must be a string of at most ${maxLength} characters`);
  }
  return v;
}

/** `event_types`: `["*"]` or a non-empty list of known types (the list a webhook can subscribe to). */
export function eventTypesField(b: Record<string, unknown>, name = "event_types"): string[] | undefined {
  const v = b[name];
  if (v === undefined) return undefined;
  const known = EVENT_TYPES.filter((t) => t !== "webhook.test") as string[];
  if (
    !Array.isArray(v) ||
    v.length === 0 ||
    v.some((t) => typeof t !== "string" || (t !== "*" && !known.includes(t))) ||
    (v.includes("*") && v.length > 1)
  ) {
    throw new InvalidParameterError(name, `${name} must be ["*"] or a list of: ${known.join(", ")}`);
  }
  return [...new Set(v as string[])];
}

/** A destination URL allowed by the rules, checked after DNS resolution (a 400 naming `url` otherwise). */
export async function urlField(b: Record<string, unknown>, allowPrivate: boolean, required: boolean) {
  const url = stringField(b, "url", 2048);
  if (url === undefined) {
    if (required) throw new InvalidParameterError("url", "url is required");
    return undefined;
  }
  try {
    await resolveDestination(url, allowPrivate);
  } catch (err) {
    if (err instanceof UnsafeDestinationError) throw new InvalidParameterError("url", err.message);
    throw new InvalidParameterError("url", `url cannot be resolved: ${(err as Error).message}`);
  }
  return url;
}

/** A timestamp field (ISO 8601 or unix seconds). */
export function timeField(b: Record<string, unknown>, name: string, required: boolean): Date | undefined {
  const v = b[name];
  if (v === undefined) {
    if (required) throw new InvalidParameterError(name, `${name} is required`);
    return undefined;
  }
  const d = typeof v === "number" ? new Date(v * 1000) : typeof v === "string" ? new Date(v) : new Date(NaN);
  if (Number.isNaN(d.getTime()))
    throw new InvalidParameterError(name, `${name} must be an ISO 8601 time or unix seconds`);
  return d;
}

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
        clock_timestamp() + ${config.timeoutMs + 30_000} * interval '1 millisecond'
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
