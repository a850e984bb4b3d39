-- When the endpoint's current `enabled` and `event_types` took effect (null: at its creation). A drain of the fan-out
-- outbox gives an endpoint only the ranges queued since then; the transaction that changes either first fans the
-- ranges still queued out to the endpoint as it was (src/webhooks/fanout.ts), so each event goes where the
-- endpoint's settings at its commit sent it, however late the drain runs.
alter table webhook_endpoints add column fanout_since timestamptz;
