-- Every rollback of a chain's index, counted where streamed exports can see it: `rollback_seq` goes up by one and
-- `rolled_back_to` is the highest block the rollback kept (-1: none). A stream bounded by the indexed block B at its
-- start stops (src/http/features/activity/service.ts) when a rollback since then kept less than B: its later rows
-- would not be the index at B any more. Set by a trigger, so every writer of the cursor is covered.
alter table chains add column rollback_seq bigint not null default 0;
alter table chains add column rolled_back_to bigint;

create function chains_count_rollback() returns trigger language plpgsql as $$
declare
  kept bigint;
begin
  kept := null;
  -- The cursor moved back (a rollback transaction), or a batch recorded a reorg of `last_reorg_depth` blocks.
  if old.indexed_block is not null and (new.indexed_block is null or new.indexed_block < old.indexed_block) then
    kept := coalesce(new.indexed_block, -1);
  end if;
  if new.last_reorg_at is distinct from old.last_reorg_at and new.last_reorg_depth is not null
     and old.indexed_block is not null then
    kept := least(coalesce(kept, old.indexed_block), old.indexed_block - new.last_reorg_depth);
  end if;
  if kept is not null then
    new.rollback_seq := old.rollback_seq + 1;
    new.rolled_back_to := kept;
  end if;
  return new;
end
$$;

create trigger chains_count_rollback before update on chains
  for each row execute function chains_count_rollback();
