-- Spend Permissions feed MRR: a chain indexed before holds movements of module allocations only. Its customers who
-- hold a permission are folded again from their status events at the indexer's next start (src/analytics/rebuild.ts),
-- which then clears the flag. A chain without permissions, or one indexed from now on, has nothing to rebuild.
alter table chains add column mrr_rebuild_due boolean not null default false;
update chains c set mrr_rebuild_due = true
  where exists (select 1 from spend_permissions p where p.chain_id = c.chain_id);
