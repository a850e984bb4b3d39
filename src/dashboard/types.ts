/** Shapes of the `/v0` responses the dashboard reads (kept in step with the route models). */
export type { StatsResponse as Stats } from "../http/features/stats/model";
export type { ActivityRecord as Activity } from "../http/features/activity/model";
export type { SubscriptionRecord as Subscription } from "../http/features/subscriptions/model";
export type { KeyRecord, CreatedKey } from "../http/features/api-keys/model";

/** Statuses in display order. */
export const STATUSES = ["ACTIVE", "PENDING", "PAUSED", "EXPIRED", "CANCELLED", "BLOCKED"] as const;

/** A webhook endpoint (the webhooks spec's endpoint object). */
export type WebhookEndpoint = {
  id: string;
  url: string;
  event_types: string[];
  description: string | null;
  enabled: boolean;
  disabled_reason: string | null;
  created_at: string;
  updated_at: string;
};

/** One delivery attempt (the webhooks spec's delivery attempt object). */
export type DeliveryAttempt = {
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
