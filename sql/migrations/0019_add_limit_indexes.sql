-- Indexes of the caps: the newest unspent SIWE nonces (a new nonce drops the oldest beyond 10,000), and
-- the pending deliveries of an endpoint by event (a replay skips the events already pending to that endpoint).
create index siwe_nonces_unspent_idx on siwe_nonces (expires_at, nonce) where used_at is null;
create index webhook_deliveries_pending_event_idx on webhook_deliveries (endpoint_id, event_seq)
  where status = 'pending';
