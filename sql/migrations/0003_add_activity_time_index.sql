-- Lets a `since` filter start a merchant's activity scan at the first record at or after that time instead of
-- reading the merchant's whole history: the API looks up that record's (block_number, log_index) here (an
-- index-only scan) and uses it as the lower bound on activity_merchant_idx / activity_merchant_type_idx.
create index activity_merchant_time_idx on activity (merchant, chain_id, block_time, block_number, log_index);
