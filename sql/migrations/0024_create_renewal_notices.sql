-- renewal_upcoming notices announced so far, one per (allocation, due instant): never twice for one due instant.
-- Rows above a rollback's ancestor are deleted with the events they caused (the events are withdrawn).
create table renewal_notices (
  chain_id         bigint not null,
  subscription_id  numeric(78,0) not null,
  due_at           bigint not null,
  block_number     bigint not null,
  primary key (chain_id, subscription_id, due_at)
);
create index renewal_notices_block_idx on renewal_notices (chain_id, block_number);
