-- MRR movements (analytics): one row per customer (merchant, subscriber wallet, token) and instant at which the
-- customer's MRR changed, written by the indexer in the batch transaction that writes the status events it follows
-- (same block, same instant, expiries included) and deleted with them when a rollback removes that block. Every
-- analytics figure (MRR at any instant, rates, cohorts) is a sum or a count over these rows.
create table mrr_movements (
  chain_id      bigint not null,
  -- `mov_` + 40 hex digits of a hash over the chain, the block hash, the customer and the instant.
  id            text not null,
  merchant      text not null,
  customer      text not null,
  token         text not null,
  block_number  bigint not null,
  -- The instant (unix seconds): the block's timestamp, or an expiry's computed instant.
  at            bigint not null,
  kind          text not null check (kind in ('new', 'expansion', 'contraction', 'churn', 'reactivation')),
  mrr_before    numeric(78,0) not null,
  mrr_after     numeric(78,0) not null,
  reason        text,
  recovered     boolean not null default false,
  -- The allocations whose status changed at this instant (subscription ids, decimal).
  allocation_ids text[] not null,
  primary key (chain_id, id)
);
-- The customer's latest movement (its MRR now, whether it ever had MRR, its last churn).
create index mrr_movements_customer_idx on mrr_movements (chain_id, merchant, customer, token, block_number, at);
-- A rollback deletes the rows of the removed blocks.
create index mrr_movements_block_idx on mrr_movements (chain_id, block_number);
-- The movements list, newest first, paged.
create index mrr_movements_page_idx on mrr_movements (merchant, chain_id, at, block_number, id);
