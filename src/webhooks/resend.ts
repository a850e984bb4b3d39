/** Replay and redeliver (webhooks.md §3): which events are sent again, and to which endpoints. */
import type { Sql } from "../db/client";
import { lockForTransaction } from "../db/advisory-lock";
import { standing } from "../events/queries";
import type { Q } from "../db/query";
import { analyzeAfterBurst } from "./burst-statistics";
import { endpointsThatMayHave } from "./received";
import { enqueue, listEndpoints, type EndpointObject } from "./endpoints";

/**
 * What a replay re-enqueues, as a condition on `event_log e`: events still on the canonical chain, never an
 * `event.reverted` (its event is not sent again) or a `webhook.test` (it belongs to its own `…/test` call).
 */
export function replayable(sql: Q) {
  return sql`${standing(sql)} and e.type not in ('event.reverted', 'webhook.test')`;
}

/** The types a replay sends: the request's `types` within the endpoint's own `event_types` (`*`: every type). */
export function replayTypes(endpointTypes: string[], requested: string[] | undefined): string[] {
  if (requested === undefined || requested.includes("*")) return endpointTypes;
  if (endpointTypes.includes("*")) return requested;
  return requested.filter((t) => endpointTypes.includes(t));
}

/** What a replay asks for: events from `since` (inclusive) to `until` (exclusive), of `types` (default all). */
export type ReplayRequest = { since: Date; until?: Date; types?: string[] };

/** How many deliveries a replay created, and how many matching events it left out (already pending there). */
export type ReplayResult = { enqueued: number; skipped: number };

/**
 * Re-enqueues every matching event of the merchant to the endpoint, except those that already have a pending
 * delivery to it (they are counted in `skipped`): a replay repeated before the first one is sent enqueues nothing.
 * Replays of one endpoint take turns (a transaction lock), so two at once cannot both enqueue one event. With
 * `chainId` (the endpoint's, or the caller's chain scope) only that chain's events are sent.
 */
export async function replayToEndpoint(
  sql: Sql,
  merchant: string,
  endpoint: Pick<EndpointObject, "id" | "event_types">,
  req: ReplayRequest,
  chainId?: number,
): Promise<ReplayResult> {
  const types = replayTypes(endpoint.event_types, req.types);
  if (types.length === 0) return { enqueued: 0, skipped: 0 };
  const { since, until } = req;
  const result = await sql.begin(async (tx) => {
    await lockForTransaction(tx, `webhook_replay:${endpoint.id}`);
    const where = tx`e.merchant = ${merchant} and e.ts >= ${since} ${until ? tx`and e.ts < ${until}` : tx``}
      ${chainId === undefined ? tx`` : tx`and e.chain_id = ${chainId}`}
      and ${replayable(tx)} ${types.includes("*") ? tx`` : tx`and e.type = any(${types})`}`;
    const pending = tx`exists (
      select 1 from webhook_deliveries p
      where p.endpoint_id = ${endpoint.id} and p.event_seq = e.seq and p.status = 'pending')`;
    const [{ n }] = await tx<[{ n: number }]>`
      select count(*)::int as n from event_log e where e.seq is not null and ${where} and ${pending}`;
    const enqueued = await enqueue(tx, "replay", { endpointId: endpoint.id, where: tx`${where} and not ${pending}` });
    return { enqueued, skipped: n };
  });
  await analyzeAfterBurst(sql, result.enqueued);
  return result;
}

/** The event a redeliver sends, as the event log reads it. */
export type RedeliverEvent = { id: string; seq: string; type: string; data: { object?: unknown } };

/**
 * The endpoints a redeliver without `endpoint_id` sends the event to: the enabled endpoints of the merchant it
 * matches.
 */
export async function redeliverTargets(
  sql: Sql,
  merchant: string,
  event: RedeliverEvent,
  chainId?: number,
): Promise<EndpointObject[]> {
  // A webhook.test belongs to the endpoint it was written for; an event.reverted goes to those subscribed to the
  // type of the event it withdraws and to those that may have received it (webhooks.md §1); any other event goes to
  // the endpoints it matches.
  const object = event.data.object as { endpoint_id?: string; id?: string; type?: string } | undefined;
  const testOf = event.type === "webhook.test" ? object?.endpoint_id : null;
  const sentTo = event.type === "event.reverted" ? await endpointsThatMayHave(sql, String(object?.id)) : null;
  const subscribed = event.type === "event.reverted" ? String(object?.type) : event.type;
  const matches = (w: { id: string; event_types: string[] }) =>
    testOf !== null
      ? w.id === testOf
      : sentTo?.has(w.id) || w.event_types.includes("*") || w.event_types.includes(subscribed);
  return (await listEndpoints(sql, merchant, chainId)).filter((w) => w.enabled && matches(w));
}

/** Enqueues the event (while it still stands) to each target; returns how many deliveries were created. */
export async function redeliverTo(
  sql: Sql,
  merchant: string,
  event: Pick<RedeliverEvent, "seq">,
  targets: Pick<EndpointObject, "id">[],
): Promise<number> {
  let enqueued = 0;
  for (const w of targets) {
    const where = sql`e.merchant = ${merchant} and e.seq = ${event.seq} and ${standing(sql)}`;
    enqueued += await enqueue(sql, "redeliver", { endpointId: w.id, where });
  }
  return enqueued;
}
