-- The Spend Permission keeper's failed simulations. A permission whose `spend` would revert (a short balance, the
-- manager no longer an owner of the account) is not sent; the failure is counted here and the permission is tried
-- again KEEPER_RETRY_SCHEDULE[failures - 1] seconds after `checked_at`. The count holds for one period of one state of
-- the permission: once `period_end` has passed or a log changed its charge count (`times_executed`), it starts over.
-- Module subscriptions keep counting their FAIL records and leave these columns at their defaults.
alter table keeper_rechecks add column failures integer not null default 0;
alter table keeper_rechecks add column period_end bigint;
alter table keeper_rechecks add column times_executed integer;

-- The keeper of one spender key reads that spender's due permissions.
create index spend_permissions_keeper_due_idx on spend_permissions (chain_id, merchant, next_charge_at)
  where not revoked;
