-- Renewal outlooks (renewals.md): what the next charge of each chargeable subscription due within the horizon will
-- do, judged from one block's balances, allowances and credits. One row per allocation, replaced by each evaluation;
-- rows of allocations that left the horizon or stopped being chargeable are deleted when their wallet is evaluated
-- again, and never shown meanwhile (the API also requires next_charge_at to match the allocation's).
create table renewal_outlooks (
  chain_id         bigint not null,
  subscription_id  numeric(78,0) not null,
  merchant         text not null,
  subscriber       text not null,
  token            text not null,
  -- The allocation's next_charge_at the outlook was judged for (unix seconds); due_at is max(it, checked block time).
  next_charge_at   bigint not null,
  due_at           bigint not null,
  outlook          text not null check (outlook in ('will_renew', 'at_risk')),
  reason           text check (reason in ('AllowanceExpired', 'InsufficientAllowance', 'InsufficientBalance')),
  amount           numeric(78,0) not null,
  balance          numeric(78,0) not null,
  allowance        numeric(78,0) not null,
  credit           numeric(78,0) not null,
  shortfall        numeric(78,0) not null,
  checked_block    bigint not null,
  checked_at       timestamptz not null,
  evaluated_at     timestamptz not null default now(),
  -- The last renewal_at_risk / renewal_recovered sent for this next_charge_at (null: none), as its outlook object.
  sent_for         bigint,
  sent             jsonb,
  primary key (chain_id, subscription_id)
);
create index renewal_outlooks_merchant_idx on renewal_outlooks (merchant, chain_id, due_at, subscription_id);
create index renewal_outlooks_wallet_idx on renewal_outlooks (chain_id, subscriber);
create index renewal_outlooks_evaluated_idx on renewal_outlooks (chain_id, evaluated_at);
