-- The dispatcher claims per endpoint: the endpoint's due deliveries in order, and its deliveries leased now (a few
-- in flight, plus leases left behind by a process that died) to keep within WEBHOOK_CONCURRENCY_PER_ENDPOINT.
create index webhook_deliveries_endpoint_due_idx on webhook_deliveries (endpoint_id, next_attempt_at, id)
  where status = 'pending';
create index webhook_deliveries_leased_idx on webhook_deliveries (endpoint_id, lease_until)
  where status = 'pending' and lease_until is not null;
