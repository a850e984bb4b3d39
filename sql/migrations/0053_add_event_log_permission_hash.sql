-- The view of migration 0035 with `a_permission_hash` appended: a spend permission's charge event names the
-- permission's hash in its allocation id and says its source.
create or replace view event_log as
  select e.seq, e.id, e.chain_id, e.merchant, e.type, e.block_number, e.log_index, e.sub_index, e.ts, e.data,
    e.reverted_by, null::text as a_tx_hash, null::text as a_module, null::numeric(78,0) as a_subscription_id,
    null::text as a_type, null::numeric(78,0) as a_amount, null::numeric(78,0) as a_fee, null::text as a_reason,
    null::text as a_keeper, null::text as a_symbol, null::integer as a_decimals,
    e.s_subscription_id, e.s_module, e.s_subscriber, e.s_plan_id, e.s_max_executions, e.s_created_at,
    e.s_times_executed, e.s_total_spent, e.s_next_charge_at, e.s_allowance_expiry, e.s_paused, e.s_cancelled,
    e.s_blocked, e.s_status, e.s_previous_status, true as stored, null::text as a_permission_hash
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
    null::text, false, a.permission_hash
  from activity a;
