-- Each indexed batch takes one value of the event log's sequence and numbers its events (activity rows and stored
-- events) inside [value, value + 2^28) in chain order (src/events/queries.ts SEQ_BLOCK); every other writer takes
-- one value per event. 2^63 / 2^28 leaves 3.4e10 values.
alter table merchant_events alter column seq set increment by 268435456;
