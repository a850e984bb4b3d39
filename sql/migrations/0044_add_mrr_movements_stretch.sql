-- Two facts of the customer carried on each movement, so the figures group movements instead of walking each
-- customer's history: `first_at`, the instant of the customer's first `new` movement (its cohort), and
-- `active_since`, the instant of the `new` or `reactivation` movement that began its current stretch of MRR > 0
-- (for `new`/`reactivation` the movement's own instant): a movement counts for net revenue retention in a period
-- starting at s exactly when active_since <= s. The table is written only by the indexer and is new: no row exists.
alter table mrr_movements
  add column first_at bigint not null default 0,
  add column active_since bigint not null default 0;
