-- The event log (webhooks.md §1–2): immutable, merchant-scoped events written by the indexer inside the batch's
-- own transaction (a transactional outbox), plus `webhook.test` events written by the API. `seq` orders the log
-- (and pages it); `id` is the deterministic public id. `data` is the envelope's `data` member as delivered
-- (`{"object": …}`, plus `previous_status` for status changes). A rollback never deletes an event: it sets
-- `reverted_by` to the id of the `event.reverted` that withdraws it.
create table merchant_events (
  seq           bigint generated always as identity primary key,
  id            text not null unique,
  chain_id      bigint not null,
  merchant      text not null,
  type          text not null,
  block_number  bigint not null,
  -- Position inside the block (log index; -1 for an expiry, which comes before every log of its block).
  log_index     integer not null,
  -- Order of several events caused by one log (charge.succeeded, then subscription.status_changed).
  sub_index     integer not null default 0,
  ts            timestamptz not null,
  data          jsonb not null,
  reverted_by   text,
  created_at    timestamptz not null default now()
);
create index merchant_events_merchant_idx on merchant_events (merchant, seq);
create index merchant_events_block_idx on merchant_events (chain_id, block_number);

-- Expiries announced so far, one per (allocation, expiry instant): an expiry is announced once, and only once it
-- is final. Rows above a rollback's ancestor are deleted with the events they caused.
create table event_expiries (
  chain_id         bigint not null,
  subscription_id  text not null,
  expires_at       timestamptz not null,
  block_number     bigint not null,
  primary key (chain_id, subscription_id, expires_at)
);
