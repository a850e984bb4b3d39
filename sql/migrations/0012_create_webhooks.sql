-- Webhook endpoints, their deliveries and the attempt log (webhooks.md §3–4).
create table webhook_endpoints (
  id                          text primary key,              -- we_…
  merchant                    text not null,
  url                         text not null,
  event_types                 text[] not null,               -- {"*"}: every type
  description                 text,
  enabled                     boolean not null default true,
  disabled_reason             text,
  -- whsec_… secrets, or enc:… (AES-256-GCM under WEBHOOK_SECRET_KEY) when that key is set.
  secret                      text not null,
  previous_secret             text,
  previous_secret_expires_at  timestamptz,
  -- First failed attempt since the last success: the auto-disable clock.
  failing_since               timestamptz,
  created_at                  timestamptz not null default clock_timestamp(),
  updated_at                  timestamptz not null default clock_timestamp()
);
create index webhook_endpoints_merchant_idx on webhook_endpoints (merchant, created_at, id);

-- One delivery per (endpoint, event) fanned out by the indexer's transaction ('auto'), plus explicit ones
-- (redeliver, replay, test). `attempts` counts claims: a claim is an attempt, also when its process dies.
create table webhook_deliveries (
  id               text primary key,                          -- wd_…
  endpoint_id      text not null references webhook_endpoints (id) on delete cascade,
  event_seq        bigint not null,
  event_id         text not null,
  event_type       text not null,
  origin           text not null default 'auto' check (origin in ('auto', 'redeliver', 'replay', 'test')),
  status           text not null default 'pending' check (status in ('pending', 'succeeded', 'failed', 'cancelled')),
  attempts         integer not null default 0,
  next_attempt_at  timestamptz not null default clock_timestamp(),
  lease_until      timestamptz,
  response_status  integer,
  error            text,
  duration_ms      integer,
  last_attempt_at  timestamptz,
  created_at       timestamptz not null default clock_timestamp()
);
create unique index webhook_deliveries_auto_idx on webhook_deliveries (endpoint_id, event_id) where origin = 'auto';
create index webhook_deliveries_due_idx on webhook_deliveries (next_attempt_at) where status = 'pending';
create index webhook_deliveries_endpoint_idx on webhook_deliveries (endpoint_id, created_at desc, id desc);
create index webhook_deliveries_event_idx on webhook_deliveries (event_id);

-- Every attempt, for the delivery log and metrics.
create table webhook_attempts (
  delivery_id      text not null references webhook_deliveries (id) on delete cascade,
  attempt          integer not null,
  endpoint_id      text not null,
  outcome          text not null check (outcome in ('succeeded', 'failed')),
  response_status  integer,
  error            text,
  duration_ms      integer not null,
  created_at       timestamptz not null default clock_timestamp(),
  primary key (delivery_id, attempt)
);
