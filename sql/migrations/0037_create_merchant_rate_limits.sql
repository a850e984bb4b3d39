-- The per-merchant rate limit (RATE_LIMIT_PER_MERCHANT_PER_MINUTE) shared by every API process: one token bucket
-- per merchant, from which each process leases tokens in blocks (src/http/merchant-limit.ts), so a request costs no
-- statement. `tokens` is the bucket's level at `refilled_at`; it refills at the configured rate up to the burst.
create table merchant_rate_limits (
  merchant    text primary key,
  tokens      double precision not null,
  refilled_at timestamptz not null default now()
);
