-- Activity events (charge.succeeded, charge.failed, credit.refilled) are no longer copied into merchant_events:
-- the activity row is the event. The events hook gives each new activity row its event's seq (from the log's
-- sequence, in chain order), written with the row; its id is derived from its position and its block's hash
-- (`activity_event_id`), not stored. `event_log` is the whole log, stored events and activity events, read by
-- every consumer. A rollback copies the withdrawn activity events (with their record as `data`)
-- into merchant_events before their rows are deleted, so a withdrawn event keeps its place in the log.
-- Activity rows indexed before this migration keep their events in merchant_events and have no event columns.
alter table activity add column event_seq bigint;
create index activity_event_seq_idx on activity (merchant, event_seq) where event_seq is not null;

-- The event type of an activity row's event: the one place this mapping is written (inlined by the planner).
create function activity_event_type(activity_type text) returns text language sql immutable parallel safe as $$
  select case activity_type when 'CHARGE' then 'charge.succeeded' when 'FAIL' then 'charge.failed'
    else 'credit.refilled' end
$$;

-- The id of the activity event of the log at (chain, block, log index) in the block `block_hash`: `evt_` + those
-- numbers in fixed-width hex, then 34 hex digits of the block hash (64 characters; src/events/ids.ts reads it back).
create function activity_event_id(chain_id bigint, block_number bigint, log_index integer, block_hash text)
returns text language sql immutable parallel safe as $$
  select 'evt_' || lpad(to_hex(chain_id), 10, '0') || lpad(to_hex(block_number), 10, '0')
    || lpad(to_hex(log_index), 6, '0') || substr(block_hash, 3, 34)
$$;

-- Every event; an activity event's `data` is null here: its record is built from the a_* columns (the API's
-- activity record). Each branch reads one table with no WHERE and columns of the same types, so the planner
-- flattens the view into an append of the two tables: a join or filter on it reaches both tables' indexes. Hence
-- the id and the token metadata as scalar subqueries, and activity rows without an event (indexed with the events hook off)
-- showing with a null seq and id: readers ask for `seq is not null` or for a seq or id, which excludes them.
create view event_log as
  select e.seq, e.id, e.chain_id, e.merchant, e.type, e.block_number, e.log_index, e.sub_index, e.ts, e.data,
    e.reverted_by, null::text as a_tx_hash, null::text as a_module, null::numeric(78,0) as a_subscription_id,
    null::text as a_type, null::numeric(78,0) as a_amount, null::numeric(78,0) as a_fee, null::text as a_reason,
    null::text as a_keeper, null::text as a_symbol, null::integer as a_decimals
  from merchant_events e
  union all
  select a.event_seq,
    (select activity_event_id(a.chain_id, a.block_number, a.log_index, ev.block_hash) from events ev
      where ev.chain_id = a.chain_id and ev.block_number = a.block_number and ev.log_index = a.log_index
        and a.event_seq is not null),
    a.chain_id, a.merchant,
    activity_event_type(a.type),
    a.block_number, a.log_index, 0, a.block_time, null::jsonb, null::text, a.tx_hash, a.module, a.subscription_id,
    a.type, a.amount, a.fee, a.reason, a.keeper,
    (select t.symbol from tokens t where t.chain_id = a.chain_id and t.address = coalesce(a.token, (
      select p.token from subscriptions s
      join plans p on p.chain_id = s.chain_id and p.module = s.module and p.plan_id = s.plan_id
      where s.chain_id = a.chain_id and s.subscription_id = a.subscription_id))),
    (select t.decimals from tokens t where t.chain_id = a.chain_id and t.address = coalesce(a.token, (
      select p.token from subscriptions s
      join plans p on p.chain_id = s.chain_id and p.module = s.module and p.plan_id = s.plan_id
      where s.chain_id = a.chain_id and s.subscription_id = a.subscription_id)))
  from activity a;
