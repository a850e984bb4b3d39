-- Fewer index entries per fanned-out delivery (the backfill's fan-out inserts one per event and endpoint).
-- webhook_deliveries_due_idx: no statement reads it (the dispatcher claims per endpoint through
-- webhook_deliveries_endpoint_due_idx; the pending counts read any index of the pending deliveries).
drop index webhook_deliveries_due_idx;
-- Deliveries by event: the auto deliveries through their unique index, led by the event now (the same constraint),
-- the few explicit ones (redeliver, replay, test) through a partial index the fan-out does not write. Readers ask
-- each index in turn (src/webhooks/queries.ts deliveriesOfEvent).
drop index webhook_deliveries_auto_idx;
create unique index webhook_deliveries_auto_idx on webhook_deliveries (event_id, endpoint_id) where origin = 'auto';
drop index webhook_deliveries_event_idx;
create index webhook_deliveries_explicit_event_idx on webhook_deliveries (event_id) where origin <> 'auto';
