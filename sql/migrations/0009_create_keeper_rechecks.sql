-- When a keeper last re-simulated a never-paid subscription that used up KEEPER_MAX_ATTEMPTS failed charges.
-- Such a subscription is sent again only when a simulation says the charge would succeed (a token `approve` is not
-- an indexed event), at most once per KEEPER_RECHECK_INTERVAL_S; this row keeps that cadence across keepers and
-- restarts. Not chain data: a reorg leaves it alone, and a stale row only delays one free eth_call.
create table keeper_rechecks (
  chain_id         bigint not null,
  subscription_id  numeric(78,0) not null,
  -- unix seconds of the keeper's "now" (the later of the wall clock and the latest block time)
  checked_at       bigint not null,
  primary key (chain_id, subscription_id)
);
