/** Events a `SubscriptionModule` emits itself; every other indexed event comes from the processor. */
const MODULE_EVENTS = new Set([
  "PlanCreated",
  "SubscriptionCreated",
  "SubscriptionPaused",
  "SubscriptionResumed",
  "SubscriptionCancelled",
  "AllowanceExpiryUpdated",
  "SubscriberBlocked",
  "SubscriberUnblocked",
]);

/**
 * The module an event belongs to (lowercase): its emitter for module events, the `module` argument for processor
 * events (`ModuleCreated`, `Charge*`, `Credit*`); null for processor events without one (`KeeperSet`, `FeeSet`).
 */
export function moduleOfEvent(ev: { name: string; address: string; args: Record<string, unknown> }): string | null {
  if (MODULE_EVENTS.has(ev.name)) return ev.address.toLowerCase();
  return ev.args.module === undefined ? null : String(ev.args.module).toLowerCase();
}
