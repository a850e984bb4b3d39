-- A subscription event (`subscription.created`, `subscription.status_changed`) no longer stores a copy of the whole
-- subscription record as jsonb: 29,214 of a 50,000-log backfill's 31,490 stored events were status changes, each
-- about 600 bytes of jsonb. The allocation's state at the event is kept in typed columns instead, and its record is
-- built when read (`eventData`, src/events/envelope.ts). The row holds every field the record needs (no join: a page
-- of the log stays an index scan, and a rollback that deletes the allocation leaves its events as they were). Events
-- stored before keep their `data`.
alter table merchant_events
  alter column data drop not null,
  add column s_subscription_id numeric(78,0),
  add column s_module text,
  add column s_subscriber text,
  add column s_plan_id bigint,
  add column s_max_executions bigint,
  add column s_created_at bigint,
  add column s_times_executed bigint,
  add column s_total_spent numeric(78,0),
  add column s_next_charge_at bigint,
  add column s_allowance_expiry numeric(20,0),
  add column s_paused boolean,
  add column s_cancelled boolean,
  add column s_blocked boolean,
  add column s_status text,
  -- Null for `subscription.created` (its data has no `previous_status`).
  add column s_previous_status text,
  -- `not valid`: every existing row has `data` (it was not null), so the table is not scanned under this lock.
  add constraint merchant_events_data_check check (data is not null or s_status is not null) not valid;

-- The view of migration 0034 with the snapshot's columns appended, and `stored`: true for a row of
-- `merchant_events`, false for an activity event (a constant, so a filter on it drops a branch at planning).
create or replace view event_log as
  select e.seq, e.id, e.chain_id, e.merchant, e.type, e.block_number, e.log_index, e.sub_index, e.ts, e.data,
    e.reverted_by, null::text as a_tx_hash, null::text as a_module, null::numeric(78,0) as a_subscription_id,
    null::text as a_type, null::numeric(78,0) as a_amount, null::numeric(78,0) as a_fee, null::text as a_reason,
    null::text as a_keeper, null::text as a_symbol, null::integer as a_decimals,
    e.s_subscription_id, e.s_module, e.s_subscriber, e.s_plan_id, e.s_max_executions, e.s_created_at,
    e.s_times_executed, e.s_total_spent, e.s_next_charge_at, e.s_allowance_expiry, e.s_paused, e.s_cancelled,
    e.s_blocked, e.s_status, e.s_previous_status, true as stored
  from merchant_events e
  union all
  select a.event_seq,
    case when a.event_seq is not null then activity_event_id(a.chain_id, a.block_number, a.log_index, a.block_hash) end,
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
      where s.chain_id = a.chain_id and s.subscription_id = a.subscription_id))),
    null::numeric(78,0), null::text, null::text, null::bigint, null::bigint, null::bigint, null::bigint,
    null::numeric(78,0), null::bigint, null::numeric(20,0), null::boolean, null::boolean, null::boolean, null::text,
    null::text, false
  from activity a;
