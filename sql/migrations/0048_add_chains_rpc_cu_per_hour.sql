-- Compute units the indexer's RPC client spent over the last hour (extrapolated while younger), written at the head.
alter table chains add column rpc_cu_per_hour integer;
