-- The last renewal_at_risk / renewal_recovered sent for an allocation (renewals.md §4), in a table of its own: it was
-- kept on the outlook row, which is deleted whenever the allocation stops being chargeable (a pause), so a pause,
-- a top-up and a resume forgot the at_risk sent for that due instant (no renewal_recovered, or a second at_risk).
create table renewal_sent (
  chain_id         bigint not null,
  subscription_id  numeric(78,0) not null,
  -- The allocation's next_charge_at (unix seconds) the outlook was sent for: what it says holds for that instant only.
  sent_for         bigint not null,
  -- The outlook object sent (the event's `renewal`).
  sent             jsonb not null,
  primary key (chain_id, subscription_id)
);
insert into renewal_sent (chain_id, subscription_id, sent_for, sent)
  select chain_id, subscription_id, sent_for, sent from renewal_outlooks where sent_for is not null and sent is not null;
