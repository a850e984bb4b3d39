-- Base Spend Permissions as a second source: the chain's permission source, one row per indexed permission, and
-- the permission columns of activity (a SpendPermissionUsed is a CHARGE row).

-- A chain may index only spend permissions.
alter table chains alter column processor drop not null;
alter table chains add column spend_permission_manager text;
-- Sorted lowercase addresses, comma-separated, or '*'.
alter table chains add column spend_permission_spenders text;
alter table chains add column spend_permission_start_block bigint;

create table spend_permissions (
  chain_id            bigint not null,
  -- uint256(hash): the key every table keyed by subscription id uses
  subscription_id     numeric(78,0) not null,
  hash                text not null,
  manager             text not null,
  merchant            text not null,
  subscriber          text not null,
  token               text not null,
  allowance           numeric(78,0) not null,
  period_s            bigint not null,
  start_s             bigint not null,
  end_s               bigint not null,
  salt                numeric(78,0) not null,
  extra_data          text not null,
  times_executed      integer not null default 0,
  total_spent         numeric(78,0) not null default 0,
  last_period_start   bigint,
  -- paid_through: periodSpend.end of the latest Used (0 = never charged)
  last_period_end     bigint not null default 0,
  last_period_spent   numeric(78,0),
  -- N: start on Approved, periodSpend.end after each Used
  next_charge_at      bigint not null,
  revoked             boolean not null default false,
  revoked_by          text check (revoked_by in ('subscriber', 'merchant', 'unknown')),
  revoked_at          timestamptz,
  revoked_block       bigint,
  revoked_log_index   integer,
  block_number        bigint not null,
  log_index           integer not null,
  tx_hash             text not null,
  created_at          timestamptz not null,
  primary key (chain_id, subscription_id),
  unique (chain_id, hash)
);
create index spend_permissions_merchant_idx on spend_permissions (merchant, chain_id, block_number, log_index);
create index spend_permissions_subscriber_idx on spend_permissions (chain_id, subscriber, merchant);
create index spend_permissions_due_idx on spend_permissions (chain_id, next_charge_at) where not revoked;

alter table activity add column permission_hash text;
alter table activity add column period_start bigint;
alter table activity add column period_end bigint;
