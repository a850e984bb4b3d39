-- Chain data: natural keys, lowercase hex addresses/hashes, uint256 as numeric(78,0).
-- Unix-second fields copied from the contracts (uint64) are bigint; display times are timestamptz.

-- One row per indexed chain: the cursor and the newest block the indexer has seen.
create table chains (
  chain_id        bigint primary key,
  processor       text not null,
  start_block     bigint not null,
  -- last block whose logs are committed (the cursor); null before the first batch
  indexed_block   bigint,
  indexed_hash    text,
  -- block timestamp of indexed_block: the API's "now" floor and X-Indexed-At
  indexed_time    timestamptz,
  -- newest chain head the indexer observed (for lag/readiness)
  head_block      bigint,
  head_seen_at    timestamptz,
  updated_at      timestamptz not null default now()
);

-- Hashes of recent (not yet final) blocks, for parent-hash reorg detection.
create table blocks (
  chain_id     bigint not null,
  number       bigint not null,
  hash         text not null,
  parent_hash  text not null,
  timestamp    timestamptz not null,
  primary key (chain_id, number)
);

-- Every decoded log of the processor and of known modules, in chain order. Derived tables are a
-- function of this log, so a reorg can delete from it and replay what it touched.
create table events (
  chain_id         bigint not null,
  block_number     bigint not null,
  log_index        integer not null,
  tx_hash          text not null,
  block_hash       text not null,
  block_time       timestamptz not null,
  address          text not null,
  name             text not null,
  subscription_id  numeric(78,0),
  args             jsonb not null,
  primary key (chain_id, block_number, log_index)
);
create index events_subscription_idx on events (chain_id, subscription_id, block_number, log_index)
  where subscription_id is not null;

create table tokens (
  chain_id  bigint not null,
  address   text not null,
  symbol    text,
  decimals  integer,
  primary key (chain_id, address)
);

create table modules (
  chain_id      bigint not null,
  address       text not null,
  merchant      text not null,
  block_number  bigint not null,
  log_index     integer not null,
  tx_hash       text not null,
  primary key (chain_id, address)
);
create index modules_merchant_idx on modules (merchant, chain_id);

create table plans (
  chain_id      bigint not null,
  module        text not null,
  plan_id       bigint not null,
  token         text not null,
  amount        numeric(78,0) not null,
  interval_s    bigint not null,
  grace_s       bigint not null,
  block_number  bigint not null,
  log_index     integer not null,
  primary key (chain_id, module, plan_id)
);

-- Allocations: the current state of each on-chain subscription, derived from its events.
create table subscriptions (
  chain_id          bigint not null,
  subscription_id   numeric(78,0) not null,
  module            text not null,
  merchant          text not null,
  subscriber        text not null,
  plan_id           bigint not null,
  max_executions    bigint not null,
  times_executed    bigint not null default 0,
  total_spent       numeric(78,0) not null default 0,
  created_at        bigint not null,          -- unix seconds (block timestamp of SubscriptionCreated)
  last_paid_at      bigint not null default 0, -- unix seconds, 0 = never paid
  next_charge_at    bigint not null,           -- unix seconds
  allowance_expiry  bigint not null default 0, -- unix seconds, 0 = never expires
  paused            boolean not null default false,
  cancelled         boolean not null default false,
  block_number      bigint not null,
  log_index         integer not null,
  tx_hash           text not null,
  primary key (chain_id, subscription_id)
);
create index subscriptions_merchant_idx on subscriptions (merchant, chain_id, block_number, log_index);
create index subscriptions_check_idx on subscriptions (chain_id, module, subscriber, plan_id);
create index subscriptions_due_idx on subscriptions (chain_id, next_charge_at)
  where not cancelled and not paused;

-- Current block state per (module, subscriber); a row exists once the merchant ever blocked it.
create table blocked_subscribers (
  chain_id      bigint not null,
  module        text not null,
  subscriber    text not null,
  blocked       boolean not null,
  block_number  bigint not null,
  log_index     integer not null,
  primary key (chain_id, module, subscriber)
);

-- Activity records (CHARGE, FAIL, REFILL) with the merchant denormalized for the merchant feeds.
create table activity (
  chain_id         bigint not null,
  block_number     bigint not null,
  log_index        integer not null,
  tx_hash          text not null,
  block_time       timestamptz not null,
  merchant         text not null,
  module           text not null,
  subscription_id  numeric(78,0) not null,
  type             text not null check (type in ('CHARGE', 'FAIL', 'REFILL')),
  token            text,
  amount           numeric(78,0) not null,
  fee              numeric(78,0),
  reason           text,
  keeper           text,
  primary key (chain_id, block_number, log_index)
);
create unique index activity_event_idx on activity (chain_id, tx_hash, log_index);
create index activity_merchant_idx on activity (merchant, chain_id, block_number, log_index);
create index activity_merchant_type_idx on activity (merchant, chain_id, type, block_number, log_index);
create index activity_subscription_idx on activity (chain_id, subscription_id, block_number, log_index);

-- API keys: only a hash of the secret is stored.
create table api_keys (
  id            text primary key,
  merchant      text not null,
  key_hash      text not null unique,
  prefix        text not null,
  label         text,
  created_at    timestamptz not null default now(),
  last_used_at  timestamptz,
  revoked_at    timestamptz
);
create index api_keys_merchant_idx on api_keys (merchant);

create table siwe_nonces (
  nonce       text primary key,
  expires_at  timestamptz not null,
  used_at     timestamptz
);

create table sessions (
  id           text primary key,
  token_hash   text not null unique,
  address      text not null,
  chain_id     bigint not null,
  created_at   timestamptz not null default now(),
  expires_at   timestamptz not null,
  revoked_at   timestamptz
);
