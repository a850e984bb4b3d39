-- The webhook fan-out's outbox (src/webhooks/fanout.ts): a transaction that writes events records their range here,
-- and the dispatcher creates the range's deliveries in a transaction of its own, deleting the row with them. The
-- indexer's batches write one small row instead of a delivery per event and endpoint. A row becomes visible when its
-- events do, so no range is skipped whatever order the writers commit in.
create table webhook_fanout_queue (
  id           bigint generated always as identity primary key,
  chain_id     bigint not null,
  from_seq     bigint not null,
  to_seq       bigint not null,
  -- The range holds a rollback's event.reverted events (their deliveries go where the withdrawn event went).
  withdrawals  boolean not null,
  -- Whose events the range holds, when the writer knew (a range of no merchant with an endpoint costs one lookup).
  merchants    text[],
  -- Endpoints created after this instant do not get the range's events (webhooks.md §4).
  queued_at    timestamptz not null default clock_timestamp()
);

-- Whether the chain's last committed batch stopped short of the head it was indexing towards (a backfill or a
-- catch-up; written with the cursor). Its queued ranges wait until it reaches the head, or until its cursor stops
-- moving for a minute: the deliveries of history are created after the index, not in its way.
alter table chains add column catching_up boolean not null default false;
