-- allowanceExpiry is a uint64 on chain: values above 2^63-1 (e.g. type(uint64).max as "never") do not fit a
-- bigint. numeric(20,0) holds every uint64 exactly; postgres.js returns it as a string, like bigint.
alter table subscriptions alter column allowance_expiry type numeric(20,0);
