-- A payment log (ChargeSucceeded, ChargeFailed, CreditRefilled) is stored once: as its activity row, which holds
-- every argument of the log (src/domain/chain-event.ts, ACTIVITY_LOGS) and now its block's hash too. `events` keeps
-- every other log. Each payment log had a second copy there (with its arguments as jsonb), written by every batch
-- and read only for its block hash (the activity event's id) and by a rollback's replay of charges.
alter table activity add column block_hash text;
update activity a set block_hash = e.block_hash from events e
  where e.chain_id = a.chain_id and e.block_number = a.block_number and e.log_index = a.log_index;
alter table activity alter column block_hash set not null;
-- Payment logs of modules the index does not know (created before START_BLOCK) had no activity row: nothing read them.
delete from events where name in ('ChargeSucceeded', 'ChargeFailed', 'CreditRefilled');

-- The same view as migration 0014, the activity event's id built from the row's own block hash.
create or replace view event_log as
  select e.seq, e.id, e.chain_id, e.merchant, e.type, e.block_number, e.log_index, e.sub_index, e.ts, e.data,
    e.reverted_by, null::text as a_tx_hash, null::text as a_module, null::numeric(78,0) as a_subscription_id,
    null::text as a_type, null::numeric(78,0) as a_amount, null::numeric(78,0) as a_fee, null::text as a_reason,
    null::text as a_keeper, null::text as a_symbol, null::integer as a_decimals
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
      where s.chain_id = a.chain_id and s.subscription_id = a.subscription_id)))
  from activity a;
