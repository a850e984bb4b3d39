-- Backfill rate and last reorg of each chain, written by the indexer in its batch and rollback transactions, so
-- /readyz and `bun run status` in any process report progress, ETA and the last reorg.
-- Blocks per second over the indexer's last progress interval while it backfills; null when it follows the head.
alter table chains add column sync_blocks_per_s double precision;
-- The last rollback: when, and how many indexed blocks it removed.
alter table chains add column last_reorg_at timestamptz;
alter table chains add column last_reorg_depth bigint;
