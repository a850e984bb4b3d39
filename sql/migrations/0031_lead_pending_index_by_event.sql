-- The pending deliveries by event, led by the event: a replay asks "is this event pending to this endpoint" with both
-- columns, which this order serves as well. Led by the endpoint, the index also offered the claim a way to read an
-- endpoint's pending deliveries, and with statistics from before a burst the planner took it and sorted the whole
-- backlog (20 ms a claim at 4,000 pending) instead of reading `webhook_deliveries_endpoint_due_idx` in order (0.5 ms).
drop index webhook_deliveries_pending_event_idx;
create index webhook_deliveries_pending_event_idx on webhook_deliveries (event_seq, endpoint_id)
  where status = 'pending';
