-- Daily rollups of `activity` for the stats route: one row per (chain, merchant, UTC day, token, type, failure
-- reason) with the summed amount and fee and the record count. Maintained inside the indexer's batch and rollback
-- transactions (src/indexer/rollups.ts), so at every commit it equals an aggregate of `activity`. `token` is ''
-- when the activity row has none, `reason` '' except for FAIL.
create table stats_daily (
  chain_id  bigint not null,
  merchant  text not null,
  day       date not null,
  token     text not null,
  type      text not null,
  reason    text not null,
  amount    numeric(78,0) not null,
  fee       numeric(78,0) not null,
  count     bigint not null,
  primary key (chain_id, merchant, day, token, type, reason)
);

-- Whatever was indexed before this migration.
insert into stats_daily (chain_id, merchant, day, token, type, reason, amount, fee, count)
select chain_id, merchant, (block_time at time zone 'UTC')::date, coalesce(token, ''), type, coalesce(reason, ''),
  sum(amount), coalesce(sum(fee), 0), count(*)
from activity
group by 1, 2, 3, 4, 5, 6;
