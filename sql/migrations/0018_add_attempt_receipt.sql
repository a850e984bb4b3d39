-- Whether the receiver may have the event after each attempt (webhooks.md §1, "Received"): 'delivered' (a 2xx),
-- 'rejected' (another answer), 'unknown' (a timeout, or a connection lost after the request may have gone out),
-- 'not_sent' (refused destination, failed lookup, refused connection or certificate). A withdrawn event's
-- event.reverted goes to the endpoints with a delivered or unknown attempt of it.
alter table webhook_attempts add column receipt text not null default 'unknown'
  check (receipt in ('delivered', 'rejected', 'unknown', 'not_sent'));
-- Attempts recorded before: a success was delivered and a failure with a status rejected; a failure without one did
-- not record whether the request went out, so it stays unknown (an extra event.reverted is harmless, a missing one
-- is not).
update webhook_attempts set receipt = case when outcome = 'succeeded' then 'delivered' else 'rejected' end
where outcome = 'succeeded' or response_status is not null;
