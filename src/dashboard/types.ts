/** Shapes of the `/v0` responses the dashboard reads (kept in step with the route models). */
export type { StatsResponse as Stats } from "../http/features/stats/model";
export type { ActivityRecord as Activity } from "../http/features/activity/model";
export type { SubscriptionRecord as Subscription } from "../http/features/subscriptions/model";
export type { RenewalItem } from "../http/features/renewals/model";
export type { KeyRecord, CreatedKey } from "../http/features/api-keys/model";
export type { EndpointObject as WebhookEndpoint, DeliveryObject as DeliveryAttempt } from "../webhooks/endpoints";

/** Statuses in display order. */
export const STATUSES = ["ACTIVE", "PENDING", "PAUSED", "EXPIRED", "CANCELLED", "BLOCKED"] as const;
export type { MrrResponse, MrrPeriod, MovementRecord, CohortsResponse } from "../http/features/mrr/model";
