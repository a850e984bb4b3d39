-- The grace of the chain's spend permissions (SPEND_PERMISSION_GRACE_S), recorded by its indexer so the API computes
-- the same status without the indexer's configuration.
alter table chains add column spend_permission_grace_s bigint;
