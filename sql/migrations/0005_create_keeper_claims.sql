-- Short-lived claims on due subscriptions so that keepers sharing this database never send the same
-- charge twice. A claim lives until the claiming keeper's transaction is indexed, or until it expires
-- (a keeper that died mid-send). Keepers on other databases are kept apart by simulating each charge.
create table keeper_claims (
  chain_id         bigint not null,
  subscription_id  numeric(78,0) not null,
  -- "<keeper address>:<process instance>": a restarted keeper does not inherit its old claims
  owner            text not null,
  tx_hash          text,
  expires_at       timestamptz not null,
  primary key (chain_id, subscription_id)
);
