-- Rollups of `mrr_movements` kept by the indexer in the batch transaction that writes the movements (and taken back
-- by a rollback before it deletes them), so a year of figures reads a few thousand rows instead of every movement.
--
-- `prev_churn_at`: the customer's churn before this movement (0: none), so a churn is known to be the customer's
-- second in a period (churned customers count once) without reading its history.
alter table mrr_movements add column prev_churn_at bigint not null default 0;

-- Movements per UTC day (day = (at − 1) ÷ 86,400: a period (start, end] holds its instants) and kind, with what the
-- week and month figures need: `stretch_day`, the day its customer's stretch of MRR > 0 began when that is within 31
-- days before (else −1: it began before any period holding this day), and `prev_churn_day`, the day of the
-- customer's previous churn on the same terms (churn only, else −1).
create table mrr_daily (
  chain_id        bigint not null,
  merchant        text not null,
  token           text not null,
  day             integer not null,
  kind            text not null,
  reason          text not null,
  recovered       boolean not null,
  stretch_day     integer not null,
  prev_churn_day  integer not null,
  count           bigint not null,
  amount          numeric(78,0) not null,
  primary key (merchant, chain_id, token, day, kind, reason, recovered, stretch_day, prev_churn_day)
);
create index mrr_daily_day_idx on mrr_daily (chain_id, day);

-- Cohorts: per cohort (the week or month of the customer's first movement) and period, the sum of the movements'
-- amounts, of their customer steps (+1 new/reactivation, −1 churn) and the cohort's `new` movements.
create table mrr_cohorts (
  chain_id      bigint not null,
  merchant      text not null,
  token         text not null,
  interval      text not null check (interval in ('week', 'month')),
  cohort_start  bigint not null,
  period_start  bigint not null,
  amount        numeric(78,0) not null,
  customers     bigint not null,
  size          bigint not null,
  primary key (merchant, chain_id, token, interval, cohort_start, period_start)
);
