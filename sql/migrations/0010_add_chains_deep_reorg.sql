-- When the indexer first saw the chain disagree with every stored block (a deep reorg it has not yet acted on);
-- null otherwise. Kept in the database so every API process's /readyz can report it.
alter table chains add column deep_reorg_suspected_at timestamptz;
