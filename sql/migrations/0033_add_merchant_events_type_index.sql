-- The event log filtered by type (`GET /v0/events/:merchant?type=…`): a merchant's stored events of some types in seq
-- order, without reading the others (status changes are most of them). Deferred during an initial backfill.
create index merchant_events_merchant_type_idx on merchant_events (merchant, type, seq);
