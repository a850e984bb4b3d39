-- A batch reads the expiries announced ahead of the cursor (by an idle poll) by instant, not by allocation.
create index event_expiries_time_idx on event_expiries (chain_id, expires_at);
