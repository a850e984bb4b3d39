/** Webhook endpoints and their deliveries as stored: the one place the API and the CLI read and change them. */
import { randomBytes } from "node:crypto";
import type { PendingQuery, Row } from "postgres";
import type { Sql } from "../db/client";
import type { Q } from "../db/query";
import { newSecret, sealSecret } from "./secrets";
import { lockForTransaction } from "../db/advisory-lock";
import { EndpointLimitError } from "./errors";
import { fanOutQueuedTo } from "./fanout";

/** The endpoint object (webhooks.md §3); never the secret. */
export type EndpointObject = {
  id: string;
  url: string;
  event_types: string[];
  description: string | null;
  enabled: boolean;
  disabled_reason: string | null;
  /** The one chain whose events the endpoint receives (made by a chain-scoped credential), or null: every chain. */
  chain_id: number | null;
  created_at: string;
  updated_at: string;
};

/** A delivery as the delivery log shows it. */
export type DeliveryObject = {
  id: string;
  event_id: string;
  event_type: string;
  attempt: number;
  status: "pending" | "succeeded" | "failed";
  response_status: number | null;
  error: string | null;
  duration_ms: number | null;
  created_at: string;
  next_attempt_at: string | null;
};

type EndpointRow = Omit<EndpointObject, "chain_id" | "created_at" | "updated_at"> & {
  chain_id: string | null;
  created_at: Date;
  updated_at: Date;
};
type DeliveryRow = Omit<DeliveryObject, "created_at" | "next_attempt_at" | "attempt"> & {
  attempts: number;
  created_at: Date;
  last_attempt_at: Date | null;
  next_attempt_at: Date;
};

const ENDPOINT_COLUMNS =
  "id, url, event_types, description, enabled, disabled_reason, chain_id, created_at, updated_at";
const DELIVERY_COLUMNS = `id, event_id, event_type, attempts, status, response_status, error, duration_ms, created_at,
  last_attempt_at, next_attempt_at`;

/**
 * The endpoints a chain-scoped credential (of `chainId`) may see and change: those of its chain and the all-chain ones;
 * every endpoint when `chainId` is undefined. One rule for every read and write, in the query's own WHERE.
 */
const inChainScope = (sql: Q, chainId: number | undefined) =>
  chainId === undefined ? sql`` : sql`and (chain_id is null or chain_id = ${chainId})`;

/** A random id with a prefix (`we_`, `wd_`). */
export const randomId = (prefix: string) => `${prefix}${randomBytes(12).toString("hex")}`;

const toEndpoint = (r: EndpointRow): EndpointObject => ({
  ...r,
  chain_id: r.chain_id === null ? null : Number(r.chain_id),
  created_at: r.created_at.toISOString(),
  updated_at: r.updated_at.toISOString(),
});

/** The delivery object of a row: its latest attempt, or the pending delivery before any. */
export const toDelivery = (r: DeliveryRow): DeliveryObject => ({
  id: r.id,
  event_id: r.event_id,
  event_type: r.event_type,
  attempt: r.attempts,
  status: r.status,
  response_status: r.response_status,
  error: r.error,
  duration_ms: r.duration_ms,
  created_at: (r.last_attempt_at ?? r.created_at).toISOString(),
  next_attempt_at: r.status === "pending" ? r.next_attempt_at.toISOString() : null,
});

/** Most endpoints a merchant may have (Stripe's limit), enabled or not. */
export const MAX_ENDPOINTS_PER_MERCHANT = 16;

/**
 * Creates an endpoint (receiving only `chainId`'s events when given); the only time its secret is returned. Throws
 * EndpointLimitError when the merchant already has MAX_ENDPOINTS_PER_MERCHANT: counted under a lock on the merchant,
 * so concurrent creates cannot pass the cap together.
 */
export async function createEndpoint(
  sql: Sql,
  input: { merchant: string; url: string; eventTypes: string[]; description: string | null; chainId?: number | null },
  secretKey: string | undefined,
): Promise<EndpointObject & { secret: string }> {
  const secret = newSecret();
  const id = randomId("we_");
  const row = await sql.begin(async (tx) => {
    await lockForTransaction(tx, `webhook_endpoints:${input.merchant}`);
    const [{ n }] = await tx<[{ n: number }]>`
      select count(*)::int as n from webhook_endpoints where merchant = ${input.merchant}`;
    if (n >= MAX_ENDPOINTS_PER_MERCHANT) throw new EndpointLimitError(MAX_ENDPOINTS_PER_MERCHANT);
    const [created] = await tx<EndpointRow[]>`
      insert into webhook_endpoints (id, merchant, url, event_types, description, secret, chain_id)
      values (${id}, ${input.merchant}, ${input.url}, ${input.eventTypes}, ${input.description},
        ${sealSecret(secret, secretKey, id)}, ${input.chainId ?? null})
      returning ${tx.unsafe(ENDPOINT_COLUMNS)}`;
    return created!;
  });
  return { ...toEndpoint(row), secret };
}

/**
 * The merchant's endpoints, oldest first; with `chainId` (a chain-scoped credential's) only those of that chain or of
 * every chain.
 */
export async function listEndpoints(sql: Sql, merchant: string, chainId?: number): Promise<EndpointObject[]> {
  const rows = await sql<EndpointRow[]>`
    select ${sql.unsafe(ENDPOINT_COLUMNS)} from webhook_endpoints where merchant = ${merchant} ${inChainScope(sql, chainId)}
    order by created_at, id`;
  return rows.map(toEndpoint);
}

/** Every endpoint (or one merchant's) with its merchant, oldest first: the operator's view. */
export async function listAllEndpoints(
  sql: Sql,
  merchant: string | null,
): Promise<(EndpointObject & { merchant: string })[]> {
  const rows = await sql<(EndpointRow & { merchant: string })[]>`
    select merchant, ${sql.unsafe(ENDPOINT_COLUMNS)} from webhook_endpoints
    ${merchant === null ? sql`` : sql`where merchant = ${merchant}`}
    order by created_at, id`;
  return rows.map((r) => ({ ...toEndpoint(r), merchant: r.merchant }));
}

/** The merchant an endpoint belongs to, or undefined when there is no such endpoint. */
export async function endpointMerchant(sql: Sql, id: string): Promise<string | undefined> {
  const [row] = await sql<{ merchant: string }[]>`select merchant from webhook_endpoints where id = ${id}`;
  return row?.merchant;
}

/**
 * One endpoint of the merchant (any merchant's when `merchant` is null), or undefined; with `chainId`, only one of
 * that chain or of every chain.
 */
export async function getEndpoint(
  sql: Sql,
  merchant: string | null,
  id: string,
  chainId?: number,
): Promise<EndpointObject | undefined> {
  const [row] = await sql<EndpointRow[]>`
    select ${sql.unsafe(ENDPOINT_COLUMNS)} from webhook_endpoints
    where id = ${id} ${merchant === null ? sql`` : sql`and merchant = ${merchant}`} ${inChainScope(sql, chainId)}`;
  return row && toEndpoint(row);
}

/**
 * Applies a change; `enabled: true` re-enables (and restarts the failure clock). Undefined when unknown, or outside
 * `chainId`'s scope when given.
 */
export async function updateEndpoint(
  sql: Sql,
  merchant: string,
  id: string,
  patch: { url?: string; eventTypes?: string[]; description?: string | null; enabled?: boolean },
  chainId?: number,
): Promise<EndpointObject | undefined> {
  return sql.begin(async (tx) => {
    const [current] = await tx<{ enabled: boolean; event_types: string[] }[]>`
      select enabled, event_types from webhook_endpoints
      where id = ${id} and merchant = ${merchant} ${inChainScope(tx, chainId)}
      for no key update`;
    if (!current) return undefined;
    // Who gets the events still queued in the fan-out outbox is decided by the settings they were committed under.
    const types = (t: string[]) => JSON.stringify([...t].sort());
    if (
      (patch.enabled !== undefined && patch.enabled !== current.enabled) ||
      (patch.eventTypes !== undefined && types(patch.eventTypes) !== types(current.event_types))
    )
      await fanOutQueuedTo(tx, [id]);
    const [row] = await tx<EndpointRow[]>`
    update webhook_endpoints set
      url = coalesce(${patch.url ?? null}, url),
      event_types = coalesce(${patch.eventTypes ?? null}::text[], event_types),
      description = case when ${patch.description !== undefined} then ${patch.description ?? null} else description end,
      enabled = coalesce(${patch.enabled ?? null}::boolean, enabled),
      disabled_reason = case when ${patch.enabled === true} then null else disabled_reason end,
      failing_since = case when ${patch.enabled === true} then null else failing_since end,
      updated_at = clock_timestamp()
    where id = ${id}
    returning ${tx.unsafe(ENDPOINT_COLUMNS)}`;
    return row && toEndpoint(row);
  });
}

/**
 * Deletes an endpoint with its deliveries (pending ones are thereby cancelled). False when unknown, or outside
 * `chainId`'s scope when given.
 */
export async function deleteEndpoint(
  sql: Sql,
  merchant: string | null,
  id: string,
  chainId?: number,
): Promise<boolean> {
  const rows = await sql`
    delete from webhook_endpoints
    where id = ${id} ${merchant === null ? sql`` : sql`and merchant = ${merchant}`} ${inChainScope(sql, chainId)}
    returning id`;
  return rows.length > 0;
}

/** How long a rotated-out secret keeps signing by default (webhooks.md §3): 24 h. */
export const PREVIOUS_SECRET_TTL_S = 86_400;

/**
 * A new secret; the previous one keeps signing for `expirePreviousInS` seconds (0: it stops now, as after a leak).
 * Undefined when unknown, or outside `chainId`'s scope.
 */
export async function rotateSecret(
  sql: Sql,
  merchant: string,
  id: string,
  secretKey: string | undefined,
  chainId?: number,
  expirePreviousInS = PREVIOUS_SECRET_TTL_S,
): Promise<(EndpointObject & { secret: string }) | undefined> {
  const secret = newSecret();
  const [row] = await sql<EndpointRow[]>`
    update webhook_endpoints set previous_secret = secret,
      previous_secret_expires_at = clock_timestamp() + ${expirePreviousInS}::int * interval '1 second',
      secret = ${sealSecret(secret, secretKey, id)}, updated_at = clock_timestamp()
    where id = ${id} and merchant = ${merchant} ${inChainScope(sql, chainId)}
    returning ${sql.unsafe(ENDPOINT_COLUMNS)}`;
  return row && { ...toEndpoint(row), secret };
}

/**
 * The delivery log of an endpoint, newest first, keyset-paged by delivery id: after the delivery `after`, whose
 * creation time is read in the query (a Date would drop its microseconds, and a fan-out creates many per millisecond).
 */
export async function listDeliveries(
  sql: Sql,
  endpointId: string,
  q: { status?: string; limit: number; after?: string },
): Promise<DeliveryRow[]> {
  return sql<DeliveryRow[]>`
    select ${sql.unsafe(DELIVERY_COLUMNS)}
    from webhook_deliveries
    where endpoint_id = ${endpointId} and status <> 'cancelled'
    ${q.status ? sql`and status = ${q.status}` : sql``}
    ${q.after ? sql`and (created_at, id) < (select a.created_at, a.id from webhook_deliveries a where a.id = ${q.after})` : sql``}
    order by created_at desc, id desc
    limit ${q.limit + 1}`;
}

/** One delivery as the delivery log shows it, or undefined. */
export async function getDelivery(sql: Sql, id: string): Promise<DeliveryObject | undefined> {
  const [row] = await sql<
    DeliveryRow[]
  >`select ${sql.unsafe(DELIVERY_COLUMNS)} from webhook_deliveries where id = ${id}`;
  return row && toDelivery(row);
}

/** A delivery of an endpoint (for `starting_after`), or undefined. */
export async function findDelivery(sql: Sql, endpointId: string, id: string) {
  const [row] = await sql<{ created_at: Date; id: string }[]>`
    select created_at, id from webhook_deliveries where endpoint_id = ${endpointId} and id = ${id}`;
  return row;
}

/** Enqueues explicit deliveries of events (by seq) to endpoints; returns how many were created. */
export async function enqueue(
  sql: Q,
  origin: "redeliver" | "replay",
  pairs: { endpointId: string; where: PendingQuery<Row[]> },
): Promise<number> {
  const rows = await sql`
    insert into webhook_deliveries (id, endpoint_id, event_seq, event_id, event_type, origin)
    select 'wd_' || substr(md5(random()::text || e.id || ${pairs.endpointId}), 1, 24), ${pairs.endpointId}, e.seq, e.id,
      e.type, ${origin}
    from event_log e where e.seq is not null and ${pairs.where}
    order by e.seq
    returning id`;
  return rows.length;
}
