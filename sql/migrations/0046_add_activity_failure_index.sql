-- The failed charges of an allocation, for the reason of an involuntary churn (its last failure since its last
-- successful charge; analytics.md §2), read by the indexer in each batch with expiries. Partial, so a backfill
-- (which goes without the other secondary indexes of `activity`) pays for the failures only.
create index activity_failure_idx on activity (chain_id, subscription_id, block_number, log_index) where type = 'FAIL';
